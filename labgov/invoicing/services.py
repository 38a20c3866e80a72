"""Invoice writes: generate drafts, add credits and adjustments, issue, void, close a period.

Guarantees:
- Money is exact: a line's amount is its exact sum rounded once to cents (half to even); an
  invoice's total is the sum of its rounded lines, and `rounding_difference_usd` shows what
  rounding changed against the exact sum.
- Issued invoices never change (refused here and, on PostgreSQL, by a trigger); voiding one
  of an open month keeps it and its number, and creates a replacement draft that will get a
  new number.
- Two people: every change to an invoice's lines by hand (a credit or adjustment entered or
  removed, the void that opened a replacement) is its maker's (`Invoice.changed_by`, and the
  lines' `entered_by`); none of them issues it.
- Numbers are gap-free per institution and year: issuing locks the year's counter row, so
  concurrent issues queue, and a failed issue rolls its number back with it.
- A closed period never changes (its invoices are not voided, its drafts neither edited nor
  issued): usage of it that changes later (a Runpod correction, a late
  record) is charged or credited by a *late usage* line in the first open period, naming the
  month and invoice it corrects.
"""

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from labgov.accounts import access
from labgov.accounts.models import Institution, Membership, Role, User
from labgov.audit.services import audit_record, audit_records
from labgov.core import dataversion
from labgov.core.errors import DomainError
from labgov.core.money import CENT, ZERO, to_cents
from labgov.funding.models import Allocation, FundingSource
from labgov.invoicing.lines import CATEGORY_ORDER, late_usage, local_days, period_usage
from labgov.invoicing.models import (
    Invoice,
    InvoiceCounter,
    InvoiceLine,
    LineCategory,
    ScheduledGeneration,
    person_name,
)
from labgov.invoicing.reconciliation import period_reconciliation
from labgov.runpod.models import Resource
from labgov.transfers.selectors import transfers_of_month
from labgov.usage.models import ClosedPeriod
from labgov.usage.periods import (
    billing_period,
    closed_until,
    is_closed,
    month_of,
    period_close,
    zone,
)
from labgov.usage.services import spend_version

# A provider's own credits and adjustments (FOCUS ChargeCategory Credit, Adjustment) are
# usage lines of their own, named as such: the provider's bill holds them, and a finance user
# reading the invoice sees the credit, not usage that looks cheaper than it was.
PROVIDER_CHARGES = {
    LineCategory.CLOUD_CREDIT: "Credit",
    LineCategory.CLOUD_ADJUSTMENT: "Adjustment",
}
# How many closed months back generation looks for usage that changed after the close.
LATE_MONTHS = 12
MAX_AMOUNT = Decimal("1e10")
MAX_REASON = 2000


def _require_manager(actor, institution_id: int) -> None:
    if actor is not None and not access.can_manage_invoices(actor, institution_id):
        raise DomainError("Only finance and the institution's admins manage invoices.")


def _month_label(month: dt.date) -> str:
    return f"{month:%B %Y}"


def _lock_institution(institution) -> Institution:
    """Generation, issue-at-close and close of one institution run one at a time."""
    return Institution.objects.select_for_update().get(pk=institution.pk)


def first_open_month(institution) -> dt.date | None:
    until = closed_until(institution.pk)
    return month_of(until, institution.time_zone) if until else None


# Generation ------------------------------------------------------------------------------


def _usage_lines(institution, month, *, now, reconcile=True) -> dict[int, list[InvoiceLine]]:
    """Unsaved usage lines per funding source id (`reconcile=False`: without working out
    which are reconciled, for comparing amounts only)."""
    usage = period_usage(institution, month)
    if not usage:
        return {}
    matched = (
        {a.account.pk: a.matched_days for a in period_reconciliation(institution, month, now=now)}
        if reconcile
        else {}
    )
    resources = Resource.objects.select_related("account").in_bulk({k[0] for k in usage})
    allocations = Allocation.objects.in_bulk({k[1] for k in usage})
    lines: dict[int, list[InvoiceLine]] = {}
    for (resource_id, allocation_id, category), u in usage.items():
        resource, allocation = resources[resource_id], allocations[allocation_id]
        days = local_days(u.first, u.last, institution.time_zone)
        quantity = Decimal(u.hours) if u.hours else None
        description = f"{resource.get_kind_display()} {resource.label}"
        if category in PROVIDER_CHARGES:
            description = f"{PROVIDER_CHARGES[category]} from {resource.account.provider}: " + (
                description
            )
        lines.setdefault(allocation.funding_source_id, []).append(
            InvoiceLine(
                kind=InvoiceLine.Kind.USAGE,
                category=category,
                description=description[:300],
                account_id=resource.account_id,
                resource=resource,
                allocation=allocation,
                person_id=allocation.user_id,
                quantity=quantity,
                unit="hour" if quantity else "",
                unit_rate_usd=(u.exact_usd / quantity).quantize(Decimal("1e-10"))
                if quantity
                else None,
                exact_amount_usd=u.exact_usd,
                amount_usd=to_cents(u.exact_usd),
                reconciled=days <= matched.get(resource.account_id, set()),
            )
        )
    return lines


def _late_months(institution, month) -> list[dt.date]:
    """The closed months whose corrections `month`'s invoices carry (the first open month
    only, so each is charged once), newest first."""
    if first_open_month(institution) != month:
        return []
    return list(
        ClosedPeriod.objects.filter(institution=institution, month__lt=month)
        .filter(month__in=Invoice.objects.filter(institution=institution).values("month"))
        .order_by("-month")
        .values_list("month", flat=True)[:LATE_MONTHS]
    )


def _late_lines(institution, month, *, now, reconcile=True) -> dict[int, list[InvoiceLine]]:
    """Corrections of closed months, for the first open month only (so each is charged
    once)."""
    closed = _late_months(institution, month)
    lines: dict[int, list[InvoiceLine]] = {}
    for closed_month in sorted(closed):
        changes = late_usage(institution, closed_month, into=month)
        if not changes:
            continue
        reconciled = (
            {
                a.account.pk: a.reconciled
                for a in period_reconciliation(institution, closed_month, now=now)
            }
            if reconcile
            else {}
        )
        resources = Resource.objects.in_bulk({k[0] for k in changes})
        allocations = Allocation.objects.in_bulk({k[1] for k in changes})
        corrected = dict(
            Invoice.objects.filter(institution=institution, month=closed_month)
            .exclude(status=Invoice.Status.VOID)
            .values_list("funding_source_id", "pk")
        )
        for (resource_id, allocation_id, category), amount in sorted(changes.items()):
            resource, allocation = resources[resource_id], allocations[allocation_id]
            fs_id = allocation.funding_source_id
            label = LineCategory(category).label
            lines.setdefault(fs_id, []).append(
                InvoiceLine(
                    kind=InvoiceLine.Kind.LATE_USAGE,
                    category=category,
                    description=(
                        f"{label} of {_month_label(closed_month)} changed after it closed: "
                        f"{resource.get_kind_display()} {resource.label}"
                    )[:300],
                    account_id=resource.account_id,
                    resource=resource,
                    allocation=allocation,
                    person_id=allocation.user_id,
                    exact_amount_usd=amount,
                    amount_usd=to_cents(amount),
                    reconciled=reconciled.get(resource.account_id, False),
                    corrects_month=closed_month,
                    corrects_invoice_id=corrected.get(fs_id),
                )
            )
    return lines


def _transfer_lines(institution, month, *, now, reconcile=True) -> dict[int, list[InvoiceLine]]:
    """Cost transfers of the month (labgov/transfers): a negative line on the source the spend
    left and a positive one on the source it went to, each with the justification; so the
    invoices of both sources show it, and their sum with the others' is unchanged."""
    transfers = transfers_of_month(institution.pk, month)
    if not transfers:
        return {}
    reconciled = (
        {a.account.pk: a.reconciled for a in period_reconciliation(institution, month, now=now)}
        if reconcile
        else {}
    )
    lines: dict[int, list[InvoiceLine]] = {}
    for t in transfers:
        what = f"{t.resource.label} on {t.account.name}" if t.resource else (t.account.name)
        for allocation, other, amount, word in (
            (t.from_allocation, t.to_funding_source, -t.amount_usd, "to"),
            (t.to_allocation, t.from_funding_source, t.amount_usd, "from"),
        ):
            lines.setdefault(allocation.funding_source_id, []).append(
                InvoiceLine(
                    kind=InvoiceLine.Kind.TRANSFER,
                    category=LineCategory.TRANSFER,
                    description=(
                        f"Cost transfer #{t.pk} {word} {other} ({what}): {t.justification}"
                    )[:300],
                    account_id=t.account_id,
                    resource_id=t.resource_id,
                    allocation=allocation,
                    person_id=allocation.user_id,
                    exact_amount_usd=amount,
                    amount_usd=to_cents(amount),
                    reconciled=reconciled.get(t.account_id, False),
                    reason=t.justification,
                )
            )
    return lines


def transfer_problems(*, institution_id: int, month: dt.date, funding_source_ids) -> list:
    """A cost transfer check (settings.LABGOV_TRANSFER_CHECKS): an issued invoice never
    changes, so no spend moves in a month into or out of a source whose invoice is issued."""
    issued = (
        Invoice.objects.filter(
            institution_id=institution_id,
            month=month,
            funding_source_id__in=funding_source_ids,
            status=Invoice.Status.ISSUED,
        )
        .select_related("funding_source")
        .order_by("pk")
    )
    return [
        (
            "month",
            f"The {_month_label(month)} invoice of {invoice.funding_source} is issued "
            f"({invoice.number}): void it first to move spend of that month.",
        )
        for invoice in issued
    ]


def _sort_key(line: InvoiceLine):
    kind_order = [InvoiceLine.Kind.USAGE, InvoiceLine.Kind.LATE_USAGE, InvoiceLine.Kind.TRANSFER]
    if line.kind in kind_order:
        return (
            kind_order.index(line.kind),
            line.corrects_month or dt.date.min,
            CATEGORY_ORDER.get(line.category, 99),
            line.description,
            line.allocation_id or 0,
        )
    return (3, line.created_at, 0, "", 0)


def _with_indirect(lines: list[InvoiceLine], funding_source) -> list[InvoiceLine]:
    """`lines` in order, then the F&A line on what they charge; unsaved, numbered."""
    ordered = sorted(lines, key=_sort_key)
    rate = funding_source.indirect_cost_rate_percent
    base = sum((line.amount_usd for line in ordered), ZERO)
    if rate and base:
        exact = base * rate / 100
        ordered.append(
            InvoiceLine(
                kind=InvoiceLine.Kind.INDIRECT,
                category=LineCategory.INDIRECT,
                description=f"Indirect costs (F&A) at {rate}% of {to_cents(base)} USD",
                quantity=base,
                unit="USD",
                unit_rate_usd=rate / 100,
                exact_amount_usd=exact,
                amount_usd=to_cents(exact),
                reconciled=all(line.reconciled for line in ordered),
            )
        )
    for position, line in enumerate(ordered, start=1):
        line.pk = None
        line._state.adding = True
        line.position = position
    return ordered


def _set_totals(invoice: Invoice, lines: list[InvoiceLine]) -> None:
    invoice.total_usd = sum((line.amount_usd for line in lines), ZERO)
    invoice.exact_total_usd = sum((line.exact_amount_usd for line in lines), ZERO)


def _rewrite_lines(invoice: Invoice, lines: list[InvoiceLine], funding_source) -> None:
    """Replace a draft's lines: `lines` in order, then the F&A line on what they charge, and
    the totals from the rounded lines."""
    InvoiceLine.objects.filter(invoice=invoice).delete()
    ordered = _with_indirect(lines, funding_source)
    for line in ordered:
        line.invoice = invoice
    InvoiceLine.objects.bulk_create(ordered)
    _set_totals(invoice, ordered)
    invoice.save(update_fields=["total_usd", "exact_total_usd"])


def _copy_funding(invoice: Invoice, fs: FundingSource) -> None:
    invoice.lab_id = fs.lab_id
    invoice.cost_center = fs.cost_center
    invoice.award_number = fs.award_number


def generated_lines(institution, month, *, now, reconcile=True) -> dict[int, list[InvoiceLine]]:
    """The unsaved lines generation makes for `month`, per funding source id: usage, the
    corrections of closed months, cost transfers."""
    generated = _usage_lines(institution, month, now=now, reconcile=reconcile)
    for fs_id, late in _late_lines(institution, month, now=now, reconcile=reconcile).items():
        generated.setdefault(fs_id, []).extend(late)
    for fs_id, moved in _transfer_lines(institution, month, now=now, reconcile=reconcile).items():
        generated.setdefault(fs_id, []).extend(moved)
    return generated


def draft_spend_version(institution, month: dt.date) -> int:
    """The spend version (labgov.usage SpendVersion) of the UTC days `month`'s drafts are
    generated from: the period's, and those of the closed months it corrects."""
    start, end = billing_period(month.year, month.month, institution.time_zone)
    late = _late_months(institution, month)
    if late:
        earliest = min(late)
        start = billing_period(earliest.year, earliest.month, institution.time_zone)[0]
    last = end - dt.timedelta(microseconds=1)
    return spend_version(
        institution.pk, start.astimezone(dt.UTC).date(), last.astimezone(dt.UTC).date()
    )


@transaction.atomic
@dataversion.scoped(lambda *, institution, **_: [institution.pk])
def invoices_generate(*, actor, institution, month: dt.date, now=None) -> list[Invoice]:
    """Generate (or regenerate) the drafts of one open billing period: one per funding
    source with attributed usage in it. Issued invoices are left alone; a draft's credits and
    manual adjustments are kept; a draft left with no line is discarded."""
    _require_manager(actor, institution.pk)
    now = now or timezone.now()
    institution = _lock_institution(institution)
    month = month.replace(day=1)
    if is_closed(institution.pk, month):
        raise DomainError(f"{_month_label(month)} is closed: its invoices are frozen.")
    start, end = billing_period(month.year, month.month, institution.time_zone)
    if start > now:
        raise DomainError(f"{_month_label(month)} has not begun.")
    # Read before the lines: a change committed meanwhile makes the drafts look stale, never
    # the other way round.
    version = draft_spend_version(institution, month)
    generated = generated_lines(institution, month, now=now)
    existing = {
        invoice.funding_source_id: invoice
        for invoice in Invoice.objects.select_for_update()
        .filter(institution=institution, month=month)
        .exclude(status=Invoice.Status.VOID)
    }
    sources = FundingSource.objects.in_bulk(set(generated) | set(existing))
    drafts = [i for i in existing.values() if i.status == Invoice.Status.DRAFT]
    entered: dict[int, list[InvoiceLine]] = {i.pk: [] for i in drafts}
    for line in InvoiceLine.objects.filter(
        invoice__in=drafts, kind__in=InvoiceLine.ENTERED_KINDS
    ).order_by("position"):
        entered[line.invoice_id].append(line)
    # Every draft's lines are worked out first, then written together: a few queries for the
    # period rather than a few per funding source.
    result, written, events = [], [], []
    for fs_id in sorted(set(generated) | set(existing)):
        invoice, fs = existing.get(fs_id), sources[fs_id]
        if invoice is not None and invoice.status != Invoice.Status.DRAFT:
            continue
        lines = generated.get(fs_id, [])
        if invoice is None:
            if not lines:
                continue
            invoice = Invoice(
                institution=institution, funding_source=fs, month=month, generated_by=actor
            )
            before = None
        else:
            lines += entered[invoice.pk]
            before = {"total_usd": str(invoice.total_usd)}
            if not lines:
                audit_record(
                    actor=actor,
                    action="invoice.discard",
                    target=invoice,
                    institution_id=institution.pk,
                    note="No usage left in the period.",
                )
                InvoiceLine.objects.filter(invoice=invoice).delete()
                invoice.delete()
                continue
        _copy_funding(invoice, fs)
        invoice.period_start, invoice.period_end = start, end
        invoice.generated_at, invoice.generated_by = now, actor
        invoice.generated_spend_version = version
        ordered = _with_indirect(lines, fs)
        _set_totals(invoice, ordered)
        written.append((invoice, ordered))
        events.append((invoice, before, {"total_usd": str(invoice.total_usd), "lines": len(lines)}))
        result.append(invoice)
    if not result:
        return result
    kept = [invoice for invoice in result if invoice.pk is not None]
    InvoiceLine.objects.filter(invoice__in=kept).delete()
    Invoice.objects.bulk_update(kept, GENERATED_FIELDS, batch_size=500)
    Invoice.objects.bulk_create([invoice for invoice in result if invoice.pk is None])
    for invoice, ordered in written:
        for line in ordered:
            line.invoice = invoice
    InvoiceLine.objects.bulk_create(
        [line for _, ordered in written for line in ordered], batch_size=2000
    )
    audit_records(
        actor=actor, action="invoice.generate", institution_id=institution.pk, events=events
    )
    return result


# What generation writes on a draft it keeps.
GENERATED_FIELDS = [
    "lab",
    "cost_center",
    "award_number",
    "period_start",
    "period_end",
    "generated_at",
    "generated_by",
    "generated_spend_version",
    "total_usd",
    "exact_total_usd",
]


# Credits and adjustments -----------------------------------------------------------------


def _refuse_closed(invoice: Invoice) -> None:
    """After close nothing of a month changes, not even a replacement of its invoice."""
    if is_closed(invoice.institution_id, invoice.month):
        raise DomainError(
            f"{_month_label(invoice.month)} is closed: its invoices are frozen. Correct it in "
            "the first open month, with a credit or an adjustment on that month's invoice."
        )


def _locked_draft(invoice: Invoice, *, actor) -> Invoice:
    """The draft, locked, with `actor` recorded among those who changed it by hand."""
    locked = Invoice.objects.select_for_update().select_related("funding_source").get(pk=invoice.pk)
    if locked.status != Invoice.Status.DRAFT:
        raise DomainError("Only a draft changes: an issued invoice is voided and replaced instead.")
    _refuse_closed(locked)
    locked.changed_by.add(actor)
    return locked


def _clean_reason(reason: str, what: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise DomainError(f"{what} needs a reason.", field="reason")
    if len(reason) > MAX_REASON:
        raise DomainError(f"Keep the reason under {MAX_REASON} characters.", field="reason")
    return reason


@transaction.atomic
def invoice_line_add(
    *, actor, invoice: Invoice, kind: str, amount_usd: Decimal, reason: str
) -> InvoiceLine:
    """Add a credit (a positive amount, charged as negative) or a manual adjustment (either
    sign) to a draft, with the reason and the person who entered it."""
    _require_manager(actor, invoice.institution_id)
    if actor is None:
        raise DomainError("A person enters credits and adjustments.")
    if kind not in InvoiceLine.ENTERED_KINDS:
        raise DomainError("Add a credit or a manual adjustment.", field="kind")
    if not isinstance(amount_usd, Decimal) or not amount_usd.is_finite():
        raise DomainError("Give the amount in USD.", field="amount_usd")
    if amount_usd != amount_usd.quantize(CENT) or abs(amount_usd) >= MAX_AMOUNT:
        raise DomainError("Give the amount in whole cents, under 10 billion.", field="amount_usd")
    if kind == InvoiceLine.Kind.CREDIT and amount_usd <= 0:
        raise DomainError("A credit is a positive amount (it is charged as negative).")
    if amount_usd == 0:
        raise DomainError("An adjustment of nothing changes nothing.", field="amount_usd")
    reason = _clean_reason(reason, "A credit or an adjustment")
    locked = _locked_draft(invoice, actor=actor)
    signed = -amount_usd if kind == InvoiceLine.Kind.CREDIT else amount_usd
    line = InvoiceLine(
        kind=kind,
        category=(
            LineCategory.CREDIT if kind == InvoiceLine.Kind.CREDIT else LineCategory.ADJUSTMENT
        ),
        description=reason[:300],
        exact_amount_usd=signed,
        amount_usd=signed,
        reconciled=True,
        reason=reason,
        entered_by=actor,
        created_at=timezone.now(),
    )
    lines = list(locked.lines.exclude(kind=InvoiceLine.Kind.INDIRECT)) + [line]
    _rewrite_lines(locked, lines, locked.funding_source)
    audit_record(
        actor=actor,
        action=f"invoice.{kind}",
        target=locked,
        institution_id=locked.institution_id,
        after={"amount_usd": str(signed), "total_usd": str(locked.total_usd)},
        note=reason,
    )
    return line  # saved by _rewrite_lines


@transaction.atomic
def invoice_line_remove(*, actor, line: InvoiceLine) -> None:
    """Take a credit or manual adjustment off a draft (generated lines are regenerated)."""
    _require_manager(actor, line.invoice.institution_id)
    if actor is None:
        raise DomainError("A person takes credits and adjustments off.")
    locked = _locked_draft(line.invoice, actor=actor)
    if line.kind not in InvoiceLine.ENTERED_KINDS or line.invoice_id != locked.pk:
        raise DomainError("Only credits and manual adjustments are removed by hand.")
    lines = list(locked.lines.exclude(kind=InvoiceLine.Kind.INDIRECT).exclude(pk=line.pk))
    _rewrite_lines(locked, lines, locked.funding_source)
    audit_record(
        actor=actor,
        action="invoice.line_remove",
        target=locked,
        institution_id=locked.institution_id,
        before={"amount_usd": str(line.amount_usd), "reason": line.reason},
        after={"total_usd": str(locked.total_usd)},
    )


# Issue and void --------------------------------------------------------------------------


def _next_numbers(institution_id: int, year: int, count: int) -> range:
    """The next `count` numbers of the institution's year, taken under the counter row's lock
    (held to the end of the transaction: concurrent issues queue, and a failed one rolls its
    numbers back with it, so none is lost)."""
    InvoiceCounter.objects.bulk_create(
        [InvoiceCounter(institution_id=institution_id, year=year)], ignore_conflicts=True
    )
    counter = InvoiceCounter.objects.select_for_update().get(
        institution_id=institution_id, year=year
    )
    first = counter.last_seq + 1
    counter.last_seq += count
    counter.save(update_fields=["last_seq"])
    return range(first, first + count)


def _snapshot_names(invoices: list[Invoice]) -> None:
    """Keep on the invoices and their lines the names they are issued under (saved with the
    invoices; the lines while they are still drafts, which the database's trigger requires)."""
    for invoice in invoices:
        invoice.institution_name = invoice.institution.name
        invoice.lab_name = invoice.lab.name
        invoice.funding_source_name = invoice.funding_source.name
    names = User.objects.filter(pk=OuterRef("person_id")).annotate(n=person_name()).values("n")
    InvoiceLine.objects.filter(
        invoice_id__in=[i.pk for i in invoices], person__isnull=False
    ).update(person_name=Subquery(names[:1]))


ISSUED_FIELDS = [
    "status",
    "number_year",
    "number_seq",
    "number",
    "issued_at",
    "issued_by",
    "institution_name",
    "lab_name",
    "funding_source_name",
]


def _issue(*, actor, invoices, now) -> list[Invoice]:
    """Number drafts in the order given and freeze them, in the caller's transaction: each
    passes invoice_issue's checks (the first that fails, in that order, refuses them all), and
    the reads and writes take a fixed number of queries however many they are."""
    from labgov.invoicing.staleness import stale_drafts

    ids = [invoice.pk for invoice in invoices]
    rows = {
        row.pk: row
        for row in Invoice.objects.select_for_update(of=("self",))
        .select_related("institution", "lab", "funding_source")
        .filter(pk__in=ids)
        .order_by("pk")
    }
    locked = [rows[pk] for pk in ids]
    periods = {(i.institution_id, i.month): i.institution for i in locked}
    closed = {key: is_closed(key[0], key[1]) for key in periods}
    stale: dict = {}
    for (_, month), institution in periods.items():
        drafts = [i for i in locked if i.institution_id == institution.pk and i.month == month]
        stale |= stale_drafts(institution, month, drafts, now=now)
    changed: set[int] = set()
    if actor is not None:
        changed |= set(
            InvoiceLine.objects.filter(invoice_id__in=ids, entered_by=actor).values_list(
                "invoice_id", flat=True
            )
        )
        changed |= set(
            Invoice.changed_by.through.objects.filter(
                invoice_id__in=ids, user_id=actor.pk
            ).values_list("invoice_id", flat=True)
        )
    for invoice in locked:
        if invoice.status != Invoice.Status.DRAFT:
            raise DomainError(f"{invoice} is not a draft; it was issued already.")
        if invoice.period_end > now:
            raise DomainError(f"{_month_label(invoice.month)} has not ended; issue it after.")
        if closed[(invoice.institution_id, invoice.month)]:
            _refuse_closed(invoice)
        if invoice.pk in stale:
            raise DomainError(f"{invoice} is not issued. {stale[invoice.pk].message}")
        if invoice.pk in changed:
            raise DomainError(
                "You changed this invoice's lines (entered or removed a credit or adjustment, "
                "or voided the invoice it replaces): another person issues it."
            )
    by_year: dict[tuple[int, int], list[Invoice]] = {}
    for invoice in locked:
        year = now.astimezone(zone(invoice.institution.time_zone)).year
        by_year.setdefault((invoice.institution_id, year), []).append(invoice)
    for (institution_id, year), numbered in by_year.items():
        for invoice, seq in zip(
            numbered, _next_numbers(institution_id, year, len(numbered)), strict=True
        ):
            invoice.status = Invoice.Status.ISSUED
            invoice.number_year, invoice.number_seq = year, seq
            invoice.number = f"{year}-{seq:05d}"
            invoice.issued_at, invoice.issued_by = now, actor
    _snapshot_names(locked)
    Invoice.objects.bulk_update(locked, ISSUED_FIELDS, batch_size=500)
    for institution_id in {invoice.institution_id for invoice in locked}:
        audit_records(
            actor=actor,
            action="invoice.issue",
            institution_id=institution_id,
            events=[
                (invoice, None, {"number": invoice.number, "total_usd": str(invoice.total_usd)})
                for invoice in locked
                if invoice.institution_id == institution_id
            ],
        )
    return locked


@transaction.atomic
def invoice_issue(*, actor, invoice: Invoice, now=None) -> Invoice:
    """Number a draft and freeze it. Nobody issues an invoice carrying a credit or an
    adjustment they entered themselves: a second person does."""
    _require_manager(actor, invoice.institution_id)
    (issued,) = _issue(actor=actor, invoices=[invoice], now=now or timezone.now())
    return issued


@transaction.atomic
def invoice_void(*, actor, invoice: Invoice, reason: str) -> Invoice:
    """Void an issued invoice of an open month (it keeps its number) and open its
    replacement: a draft with the same lines, to be corrected and issued under a new number
    by someone other than the voider (or anyone who changed the one it replaces)."""
    _require_manager(actor, invoice.institution_id)
    if actor is None:
        raise DomainError("A person voids an invoice.")
    reason = _clean_reason(reason, "Voiding an invoice")
    locked = Invoice.objects.select_for_update().select_related("funding_source").get(pk=invoice.pk)
    if locked.status != Invoice.Status.ISSUED:
        raise DomainError("Only an issued invoice is voided; a draft is regenerated or edited.")
    _refuse_closed(locked)
    lines = list(locked.lines.exclude(kind=InvoiceLine.Kind.INDIRECT))
    locked.status = Invoice.Status.VOID
    locked.voided_at, locked.voided_by, locked.void_reason = timezone.now(), actor, reason
    locked.save(update_fields=["status", "voided_at", "voided_by", "void_reason"])
    replacement = Invoice.objects.create(
        institution_id=locked.institution_id,
        funding_source=locked.funding_source,
        lab_id=locked.lab_id,
        cost_center=locked.cost_center,
        award_number=locked.award_number,
        month=locked.month,
        period_start=locked.period_start,
        period_end=locked.period_end,
        replaces=locked,
        generated_by=actor,
    )
    _rewrite_lines(replacement, lines, locked.funding_source)
    replacement.changed_by.add(actor, *locked.changed_by.all())
    audit_record(
        actor=actor,
        action="invoice.void",
        target=locked,
        institution_id=locked.institution_id,
        after={"number": locked.number, "replacement_id": replacement.pk},
        note=reason,
    )
    return replacement


# Close -----------------------------------------------------------------------------------


def close_problems(reconciliations) -> list[str]:
    """What keeps a period from closing without an acceptance, in words."""
    problems = []
    for a in reconciliations:
        name = a.account.name
        if not a.matches_to_the_cent:
            problems.append(f"{name}: labgov holds {a.difference_usd:+.2f} USD against Runpod.")
        if a.days_missing:
            days = ", ".join(f"{d:%d}" for d in a.days_missing)
            problems.append(f"{name}: days not synced whole: {days}.")
        differing = [d for d in a.days_differing if d.due]
        if differing and a.matches_to_the_cent:
            days = ", ".join(f"{d.day:%d}" for d in differing)
            problems.append(f"{name}: days that differ from Runpod: {days}.")
        if any(not d.due for d in a.days):
            problems.append(f"{name}: the period has not ended.")
    return problems


@transaction.atomic
def period_close_checked(
    *, actor, institution, month: dt.date, acceptance_reason: str = "", now=None
) -> ClosedPeriod:
    """Close a billing period: regenerate its drafts, issue them, and freeze it. It must be
    reconciled (every day held, no difference to the cent) on every Runpod account, or
    finance accepts what is not with a reason, recorded with the difference."""
    _require_manager(actor, institution.pk)
    now = now or timezone.now()
    institution = _lock_institution(institution)
    month = month.replace(day=1)
    reconciliations = period_reconciliation(institution, month, now=now)
    problems = close_problems(reconciliations)
    reason = (acceptance_reason or "").strip()
    if problems and not reason:
        raise DomainError(
            f"{_month_label(month)} does not reconcile: "
            + " ".join(problems)
            + " Close it anyway only with a reason for accepting this."
        )
    if reason:
        reason = _clean_reason(reason, "Accepting a difference")
    invoices_generate(actor=actor, institution=institution, month=month, now=now)
    drafts = Invoice.objects.filter(
        institution=institution, month=month, status=Invoice.Status.DRAFT
    ).order_by("cost_center", "funding_source__name", "pk")
    _issue(actor=actor, invoices=list(drafts), now=now)
    difference = sum((a.difference_usd for a in reconciliations), ZERO)
    period = period_close(
        actor=actor,
        institution=institution,
        year=month.year,
        month=month.month,
        acceptance_reason=reason if problems else "",
        difference_usd=difference if problems else ZERO,
    )
    if problems:
        audit_record(
            actor=actor,
            action="period.accept",
            target=period,
            institution_id=institution.pk,
            after={"difference_usd": str(difference), "problems": problems},
            note=reason,
        )
    return period


# Schedule --------------------------------------------------------------------------------


def finance_people(institution_id: int):
    return User.objects.filter(
        pk__in=Membership.objects.active()
        .filter(institution_id=institution_id, role=Role.FINANCE)
        .values("user_id"),
        is_active=True,
    )


def drafts_generate_due(*, now=None) -> list[tuple[int, dt.date]]:
    """On the first day of a month (in each institution's zone), generate the previous
    month's drafts once and tell finance they are ready. Returns the (institution id, month)
    that got drafts."""
    from django.urls import reverse

    from labgov.notifications.services import notify

    now = now or timezone.now()
    done = []
    for institution in Institution.objects.order_by("pk"):
        local = now.astimezone(zone(institution.time_zone))
        if local.day != 1 or local.hour < settings.LABGOV_INVOICE_DRAFTS_HOUR:
            continue
        month = (local.date() - dt.timedelta(days=1)).replace(day=1)
        if billing_period(month.year, month.month, institution.time_zone)[1] > now:
            continue
        with dataversion.scope([institution.pk]), transaction.atomic():
            _, claimed = ScheduledGeneration.objects.get_or_create(
                institution=institution, month=month
            )
            if not claimed or is_closed(institution.pk, month):
                continue
            invoices = invoices_generate(actor=None, institution=institution, month=month, now=now)
            if not invoices:
                continue
            notify(
                recipients=finance_people(institution.pk),
                kind="invoicing.drafts_ready",
                subject=f"Draft invoices for {_month_label(month)} are ready ({len(invoices)})",
                body="Review them, reconcile the month with Runpod, issue them and close it.",
                url=reverse("invoicing:period", args=[institution.pk, month.year, month.month]),
                dedupe_key=f"invoicing.drafts_ready:{institution.pk}:{month:%Y-%m}",
            )
        done.append((institution.pk, month))
    return done
