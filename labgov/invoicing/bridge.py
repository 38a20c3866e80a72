"""The bridge: a month's reconciliation written so that it adds up in cents (journey 6).

Runpod's total for the month = direct usage on the month's invoices + rounding + unattributed
spend (+ attributed spend on no invoice yet, + what labgov does not hold of Runpod's bill),
each its own line. Every line but rounding is its exact figure rounded to cents once;
rounding is what those roundings leave (the invoice lines' own, the bulk of it, and the other
figures'), so the lines add up to Runpod's total in cents exactly, and the exact figures to
Runpod's exact total (rounding's exact figure is nought).

The invoices carry more than Runpod billed: F&A (indirect costs) charged to grants on top of
Runpod's bill, and credits, adjustments and corrections of earlier months. They are listed
apart, adding up to the invoices' total.
"""

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from labgov.core.money import ZERO, grouped_multi_sums, to_cents
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.invoicing.reconciliation import AccountPeriod, period_reconciliation

Kind = InvoiceLine.Kind


@dataclass(frozen=True)
class BridgeLine:
    key: str  # a stable name, for files and tests
    label: str
    amount_usd: Decimal  # cents
    exact_usd: Decimal  # every digit
    note: str = ""


@dataclass
class Bridge:
    month: dt.date
    runpod: BridgeLine  # Runpod's total for the month
    runpod_parts: list[BridgeLine] = field(default_factory=list)  # add up to `runpod`
    invoices: BridgeLine | None = None  # the month's live invoices' total
    invoice_parts: list[BridgeLine] = field(default_factory=list)  # add up to `invoices`

    @property
    def adds_up(self) -> bool:
        return sum((p.amount_usd for p in self.runpod_parts), ZERO) == self.runpod.amount_usd and (
            self.invoices is None
            or sum((p.amount_usd for p in self.invoice_parts), ZERO) == self.invoices.amount_usd
        )

    @property
    def lines(self) -> list[tuple[str, BridgeLine]]:
        """Every line with the side it belongs to ("runpod" or "invoices"), totals last."""
        rows = [("runpod", p) for p in self.runpod_parts] + [("runpod", self.runpod)]
        if self.invoices is not None:
            rows += [("invoices", p) for p in self.invoice_parts] + [("invoices", self.invoices)]
        return rows


def _line(key: str, label: str, exact: Decimal, note: str = "") -> BridgeLine:
    return BridgeLine(key, label, to_cents(exact), exact, note)


def period_bridge(
    institution, month: dt.date, *, reconciliations: list[AccountPeriod] | None = None
) -> Bridge:
    """The bridge of one billing period, over every Runpod account and every live invoice of
    the institution (for finance: it is institution-wide). `reconciliations`: the period's
    (period_reconciliation), when the caller has them already."""
    month = month.replace(day=1)
    if reconciliations is None:
        reconciliations = period_reconciliation(institution, month)
    runpod = sum((a.runpod_usd for a in reconciliations), ZERO)
    attributed = sum((a.attributed_usd for a in reconciliations), ZERO)
    unattributed = sum((a.unattributed_usd for a in reconciliations), ZERO)

    lines = InvoiceLine.objects.filter(
        invoice__institution=institution, invoice__month=month
    ).exclude(invoice__status=Invoice.Status.VOID)
    sums = {
        key[0]: (cents, exact)
        for key, (cents, exact) in grouped_multi_sums(
            lines, ["kind"], ["amount_usd", "exact_amount_usd"]
        ).items()
    }
    usage, usage_exact = sums.get(Kind.USAGE, (ZERO, ZERO))

    parts = [
        BridgeLine(
            "direct_usage",
            "Direct usage on the month's invoices (lines rounded to cents)",
            usage,
            usage_exact,
        ),
        _line("unattributed", "Unattributed: on nobody's invoice", unattributed),
    ]
    if not_invoiced := attributed - usage_exact:
        parts.append(
            _line(
                "not_invoiced",
                "Attributed, on no invoice yet",
                not_invoiced,
                "drafts not generated, or generated before this spend was attributed: "
                "regenerate them",
            )
        )
    if not_held := runpod - attributed - unattributed:
        parts.append(
            _line(
                "not_held",
                "On Runpod's bill, not in labgov's records",
                not_held,
                "days not synced whole, or differing from Runpod (see the reconciliation)",
            )
        )
    rounding = to_cents(runpod) - sum((p.amount_usd for p in parts), ZERO)
    parts.insert(
        1,
        BridgeLine(
            "rounding",
            "Rounding to cents",
            rounding,
            ZERO,  # in exact figures nothing is rounded
            f"the invoice lines' own rounding: {usage_exact - usage:+f} USD; the rest, the "
            "other figures' rounding to cents",
        ),
    )
    bridge = Bridge(month, _line("runpod_total", "Runpod's total for the month", runpod), parts)

    if not sums:
        return bridge
    others = [
        (Kind.LATE_USAGE, "late_usage", "Corrections of earlier months (late usage)"),
        (Kind.TRANSFER, "transfers", "Cost transfers between funding sources (net)"),
        (Kind.CREDIT, "credits", "Credits"),
        (Kind.MANUAL, "adjustments", "Manual adjustments"),
    ]
    bridge.invoice_parts = [BridgeLine("direct_usage", "Direct usage", usage, usage_exact)]
    for kind, key, label in others:
        cents, exact = sums.get(kind, (ZERO, ZERO))
        if cents or exact:
            bridge.invoice_parts.append(BridgeLine(key, label, cents, exact))
    fa, fa_exact = sums.get(Kind.INDIRECT, (ZERO, ZERO))
    if fa or fa_exact:
        bridge.invoice_parts.append(
            BridgeLine(
                "indirect",
                "F&A (indirect costs), charged to grants on top of Runpod's bill",
                fa,
                fa_exact,
            )
        )
    total = sum((cents for cents, _ in sums.values()), ZERO)
    exact = sum((exact for _, exact in sums.values()), ZERO)
    bridge.invoices = BridgeLine("invoices_total", "The month's invoices", total, exact)
    return bridge
