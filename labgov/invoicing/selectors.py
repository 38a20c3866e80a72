"""Reads of invoices, for pages and exports.

The API other modules (exports) build on, all read-only and unscoped (scope with
`Invoice.objects.visible_to(user)` or the page selectors below first):

- `period_invoices(institution, month, *, include_void=False)`: the invoices of one billing
  period (`month` is its first day), ordered by cost center, funding source and number, with
  `funding_source`, `lab` and `institution` loaded. Void ones only when asked.
- `invoice_lines(invoice)`: the invoice's lines in order (`position`), with `resource`,
  `allocation`, `person`, `entered_by` and `account` loaded. Each line has `category` (and
  `get_category_display()`), `kind`, `description`, `quantity` + `unit` (None/"" where the
  records give none), `unit_rate_usd`, `exact_amount_usd`, `amount_usd` (cents), `reconciled`,
  `reason`, `corrects_month`/`corrects_invoice`.
- An `Invoice` carries `number` ("" for drafts), `status`, `month`, `period_start`/`period_end`
  (UTC), `cost_center`, `award_number`, `lab`, `funding_source`, `total_usd` (sum of rounded
  lines), `exact_total_usd`, `rounding_difference_usd`, and `is_reconciled` (all lines).
- `period_totals(invoices)`: totals by cost center and overall for a list of invoices.
- `labgov.invoicing.reconciliation.period_reconciliation(institution, month)`: per Runpod
  account, attributed + unattributed against Runpod's total, per category and day.
"""

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Q

from labgov.accounts import access
from labgov.accounts.models import Institution
from labgov.core.money import ZERO
from labgov.invoicing.bridge import Bridge, period_bridge
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.invoicing.reconciliation import AccountPeriod, period_reconciliation
from labgov.invoicing.staleness import stale_drafts
from labgov.usage.models import ClosedPeriod
from labgov.usage.periods import billing_period


def period_invoices(institution, month: dt.date, *, include_void: bool = False):
    invoices = Invoice.objects.filter(institution=institution, month=month.replace(day=1))
    if not include_void:
        invoices = invoices.exclude(status=Invoice.Status.VOID)
    return invoices.select_related("funding_source", "lab", "institution").order_by(
        "cost_center", "funding_source__name", "number_seq", "pk"
    )


def invoice_lines(invoice: Invoice) -> Iterator[InvoiceLine]:
    yield from (
        InvoiceLine.objects.filter(invoice=invoice)
        .select_related("resource", "allocation", "person", "entered_by", "account")
        .order_by("position")
        .iterator(chunk_size=2000)
    )


@dataclass
class CostCenterGroup:
    cost_center: str
    invoices: list[Invoice] = field(default_factory=list)
    total_usd: Decimal = ZERO


def period_totals(invoices) -> tuple[list[CostCenterGroup], Decimal]:
    groups: dict[str, CostCenterGroup] = {}
    total = ZERO
    for invoice in invoices:
        group = groups.setdefault(invoice.cost_center, CostCenterGroup(invoice.cost_center))
        group.invoices.append(invoice)
        if invoice.status != Invoice.Status.VOID:
            group.total_usd += invoice.total_usd
            total += invoice.total_usd
    return list(groups.values()), total


# Pages -----------------------------------------------------------------------------------


def visible_institutions(user):
    scope = access.scope_for(user)
    return Institution.objects.filter(
        Q(pk__in=scope.money_institutions) | Q(labs__id__in=scope.admin_labs)
    ).distinct()


@dataclass
class PeriodRow:
    institution: Institution
    month: dt.date
    closed: bool
    drafts: int = 0
    issued: int = 0
    total_usd: Decimal = ZERO


def period_list(user, *, today: dt.date, months: int = 12) -> list[PeriodRow]:
    """The last `months` billing periods of each institution the person sees invoices of."""
    institutions = list(visible_institutions(user).order_by("name"))
    access.deny_unless(bool(institutions))
    ids = [i.pk for i in institutions]
    closed = set(
        ClosedPeriod.objects.filter(institution_id__in=ids).values_list("institution_id", "month")
    )
    counts = {}
    for row in (
        Invoice.objects.visible_to(user)
        .filter(institution_id__in=ids)
        .values("institution_id", "month")
        .annotate(
            drafts=Count("pk", filter=Q(status=Invoice.Status.DRAFT)),
            issued=Count("pk", filter=Q(status=Invoice.Status.ISSUED)),
        )
        .order_by()
    ):
        counts[(row["institution_id"], row["month"])] = row
    totals = {}
    for inst_id, month, total in (
        Invoice.objects.visible_to(user)
        .filter(institution_id__in=ids)
        .exclude(status=Invoice.Status.VOID)
        .values_list("institution_id", "month", "total_usd")
    ):
        totals[(inst_id, month)] = totals.get((inst_id, month), ZERO) + total
    rows = []
    for institution in institutions:
        month = today.replace(day=1)
        for _ in range(months):
            key = (institution.pk, month)
            c = counts.get(key, {})
            rows.append(
                PeriodRow(
                    institution=institution,
                    month=month,
                    closed=key in closed,
                    drafts=c.get("drafts", 0),
                    issued=c.get("issued", 0),
                    total_usd=totals.get(key, ZERO),
                )
            )
            month = (month - dt.timedelta(days=1)).replace(day=1)
    return rows


@dataclass
class PeriodSummary:
    institution: Institution
    month: dt.date
    start: dt.datetime
    end: dt.datetime
    closed: ClosedPeriod | None
    groups: list[CostCenterGroup]
    total_usd: Decimal
    void: list[Invoice]
    can_manage: bool
    reconciliations: list[AccountPeriod]
    attributed_usd: Decimal = ZERO
    unattributed_usd: Decimal = ZERO
    runpod_usd: Decimal = ZERO
    bridge: Bridge | None = None  # for those who manage invoices, as the reconciliation
    # Stale drafts (invoicing/staleness.py) by invoice id; each invoice carries its own too.
    stale: dict = field(default_factory=dict)

    @property
    def stale_difference_usd(self) -> Decimal:
        return sum((s.difference_usd for s in self.stale.values()), ZERO)

    @property
    def records_usd(self) -> Decimal:
        return self.attributed_usd + self.unattributed_usd

    @property
    def days_to_come(self) -> int:
        """Days of the period that have not ended yet (a period reconciles once it is over)."""
        return max((sum(1 for d in a.days if not d.due) for a in self.reconciliations), default=0)

    @property
    def reconciled(self) -> bool:
        return bool(self.reconciliations) and all(a.reconciled for a in self.reconciliations)

    @property
    def archived_months(self) -> list[dt.date]:
        return self.reconciliations[0].archived_months if self.reconciliations else []

    @property
    def slug(self) -> str:
        return f"{self.month:%Y-%m}"


def get_institution_for_invoices(user, pk: int) -> Institution:
    return access.get_or_404(visible_institutions(user), pk=pk)


def period_summary(user, institution_id: int, month: dt.date) -> PeriodSummary:
    institution = get_institution_for_invoices(user, institution_id)
    can_manage = access.can_manage_invoices(user, institution.pk)
    invoices = list(
        period_invoices(institution, month, include_void=True).filter(access.invoices_q(user))
    )
    live = [i for i in invoices if i.status != Invoice.Status.VOID]
    stale = stale_drafts(institution, month, live)
    for invoice in live:
        invoice.stale = stale.get(invoice.pk)
    groups, total = period_totals(live)
    start, end = billing_period(month.year, month.month, institution.time_zone)
    reconciliations = period_reconciliation(institution, month) if can_manage else []
    return PeriodSummary(
        institution=institution,
        month=month,
        start=start,
        end=end,
        closed=ClosedPeriod.objects.filter(institution=institution, month=month).first(),
        groups=groups,
        total_usd=total,
        void=[i for i in invoices if i.status == Invoice.Status.VOID],
        can_manage=can_manage,
        reconciliations=reconciliations,
        attributed_usd=sum((a.attributed_usd for a in reconciliations), ZERO),
        unattributed_usd=sum((a.unattributed_usd for a in reconciliations), ZERO),
        runpod_usd=sum((a.runpod_usd for a in reconciliations), ZERO),
        bridge=period_bridge(institution, month, reconciliations=reconciliations)
        if can_manage
        else None,
        stale=stale,
    )


def invoice_staleness(invoice: Invoice):
    """The draft's Stale (invoicing/staleness.py), or None."""
    if invoice.status != Invoice.Status.DRAFT:
        return None
    return stale_drafts(invoice.institution, invoice.month, [invoice]).get(invoice.pk)


def get_invoice_for_user(user, pk: int) -> Invoice:
    return access.get_or_404(
        Invoice.objects.visible_to(user).select_related(
            "institution", "funding_source", "lab", "replaces", "issued_by", "voided_by"
        ),
        pk=pk,
    )


def my_lines(user):
    """The lines of issued invoices charged to the person's own allocations."""
    return (
        InvoiceLine.objects.filter(access.member_invoice_lines_q(user))
        .select_related("invoice", "invoice__funding_source", "allocation", "resource")
        .order_by("-invoice__month", "invoice__number_seq", "position")
    )
