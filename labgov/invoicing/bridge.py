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


# A lab's month ------------------------------------------------------------------------------


@dataclass
class LabMonth:
    """What a lab's invoices of one month say, beside the spend its dashboard shows for the
    month, and why the two differ when they do: each reason its own amount, in cents, adding
    up to the difference exactly."""

    month: dt.date
    invoices: int
    drafts: int
    direct_usd: Decimal  # everything the invoices charge but F&A
    indirect_usd: Decimal  # F&A, on top of Runpod's bill
    page_spend_usd: Decimal  # the dashboard's spend of the month, exact
    reasons: list[BridgeLine] = field(default_factory=list)

    @property
    def total_usd(self) -> Decimal:
        return self.direct_usd + self.indirect_usd

    @property
    def difference_usd(self) -> Decimal:
        """The invoices' direct charges less the page's spend, in cents."""
        return self.direct_usd - to_cents(self.page_spend_usd)

    @property
    def difference_size_usd(self) -> Decimal:
        return abs(self.difference_usd)

    @property
    def agrees(self) -> bool:
        return self.difference_usd == 0


def lab_month(user, lab, month: dt.date, *, page_spend_usd: Decimal) -> LabMonth:
    """The lab's live invoices of `month` the person sees, against `page_spend_usd` (the
    lab's attributed spend on the month's UTC days, cost transfers included)."""
    invoices = (
        Invoice.objects.visible_to(user)
        .filter(lab=lab, month=month)
        .exclude(status=Invoice.Status.VOID)
    )
    counts = list(invoices.values_list("status", flat=True))
    sums = {
        key[0]: values
        for key, values in grouped_multi_sums(
            InvoiceLine.objects.filter(invoice__in=invoices),
            ["kind"],
            ["amount_usd", "exact_amount_usd"],
        ).items()
    }

    def cents(*kinds) -> Decimal:
        return sum((sums.get(k, (ZERO, ZERO))[0] for k in kinds), ZERO)

    def exact(*kinds) -> Decimal:
        return sum((sums.get(k, (ZERO, ZERO))[1] for k in kinds), ZERO)

    spend = (Kind.USAGE, Kind.TRANSFER)
    result = LabMonth(
        month=month,
        invoices=len(counts),
        drafts=counts.count(Invoice.Status.DRAFT),
        direct_usd=cents(*spend, Kind.LATE_USAGE, Kind.CREDIT, Kind.MANUAL),
        indirect_usd=cents(Kind.INDIRECT),
        page_spend_usd=page_spend_usd,
    )
    if result.agrees:
        return result
    reasons = [
        _line(
            "late_usage",
            "Corrections of earlier months on these invoices",
            exact(Kind.LATE_USAGE),
        ),
        _line("credits", "Credits and adjustments (not spend)", exact(Kind.CREDIT, Kind.MANUAL)),
        _line(
            "not_invoiced",
            "Spend of the month on no invoice of the lab yet",
            exact(*spend) - page_spend_usd,
            "drafts not generated, or generated before this spend was synced or attributed"
            + (
                f"; or the month's edges: invoices follow the {lab.institution.time_zone} "
                "calendar, this page UTC days"
                if lab.institution.time_zone not in ("", "UTC")
                else ""
            ),
        ),
    ]
    reasons = [r for r in reasons if r.amount_usd]
    rounding = result.difference_usd - sum((r.amount_usd for r in reasons), ZERO)
    if rounding:
        reasons.append(BridgeLine("rounding", "Invoice lines rounded to cents", rounding, ZERO))
    result.reasons = reasons
    return result
