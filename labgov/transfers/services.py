"""Cost transfers: moving attributed spend of an open month from one allocation to another.

Finance and institution admins transfer directly (audited); a lab admin proposes a transfer
between allocations of their own lab, and finance or an institution admin, never the
proposer, approves it. Applying a transfer writes, in one transaction, two ledger adjustments
(out of the one allocation, into the other: the ledger is append-only), two daily rollup rows
of the category "Cost transfers" on the month's first day (kept when the rollups are rebuilt
from records, usage/services.py), the month's rollups again, and its audit row; so the
dashboards, the allocations' remaining figures and the invoices all see the same move.

Nothing may leave an allocation that it did not spend: the amount is at most what the
allocation spent in that month on that Runpod account (and on the resource, when one is
named), counting split shares and earlier transfers. The check runs again at approval.
"""

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from labgov.accounts import access
from labgov.accounts.models import Institution
from labgov.accounts.services import money_deciders
from labgov.audit.services import audit_record
from labgov.core.bounds import check_values
from labgov.core.errors import DomainError
from labgov.core.money import ZERO, sum_or_zero
from labgov.core.periods import UTC
from labgov.funding.models import Allocation, FundingSource, LedgerEntry
from labgov.runpod.locks import account_lock
from labgov.runpod.models import BillingRecord, Resource, RunpodAccount
from labgov.transfers.models import CostTransfer
from labgov.usage.models import Category, ClosedPeriod, DailySpend, MonthlySpend
from labgov.usage.periods import billing_period
from labgov.usage.services import lab_days_rebuild, months_rebuild, spend_changed, split_moves

S = CostTransfer.State


class Refused(DomainError):
    """Every reason at once, each with the input it is about, so a form shows them all."""

    def __init__(self, problems: list[tuple[str | None, str]]):
        super().__init__(" ".join(message for _, message in problems), field=problems[0][0])
        self.problems = problems


def _period(institution_id: int, month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """The billing period of `month` in the institution's time zone, [start, end) in UTC."""
    time_zone = Institution.objects.values_list("time_zone", flat=True).get(pk=institution_id)
    return billing_period(month.year, month.month, time_zone)


def _last_closed(institution_id: int) -> dt.date | None:
    """The latest month the institution closed (months close in order: all before it too)."""
    return (
        ClosedPeriod.objects.filter(institution_id=institution_id)
        .order_by("-month")
        .values_list("month", flat=True)
        .first()
    )


def open_months(institution_id: int, *, now: dt.datetime | None = None) -> list[dt.date]:
    """The months whose spend may still move: after the last closed one, up to this month
    (at most a year back), newest first."""
    today = (now or timezone.now()).astimezone(UTC).date()
    month = today.replace(day=1)
    closed = _last_closed(institution_id)
    months = []
    for _ in range(12):
        if closed is not None and month <= closed:
            break
        months.append(month)
        month = (month - dt.timedelta(days=1)).replace(day=1)
    return months


def available_to_move(
    *, account: RunpodAccount, allocation: Allocation, month: dt.date, resource=None
) -> Decimal:
    """What `allocation` spent in `month` on `account` (on `resource`, when given), after
    split shares and the transfers applied so far: the most a transfer may take from it."""
    available = MonthlySpend.objects.filter(
        account=account, month=month, allocation=allocation
    ).aggregate(total=sum_or_zero("amount_usd"))["total"]
    if resource is None:
        return available
    on_resource = resource_spent(resource=resource, month=month).get(allocation.pk, ZERO)
    return min(available, on_resource)


def resource_spent(*, resource: Resource, month: dt.date) -> dict[int, Decimal]:
    """What each allocation spent on `resource` in `month`: its billing records, split shares
    and the transfers applied so far (allocation id → USD, exact)."""
    start, end = _period(resource.account.institution_id, month)
    spent: dict[int, Decimal] = {}
    for allocation_id, total in (
        BillingRecord.objects.filter(
            resource=resource,
            allocation__isnull=False,
            bucket_start__gte=start,
            bucket_start__lt=end,
        )
        .values_list("allocation_id")
        .annotate(total=sum_or_zero("total_usd"))
        .order_by()
    ):
        spent[allocation_id] = spent.get(allocation_id, ZERO) + total
    for (_, _, _, allocation_id), delta in split_moves(
        start=start, end=end, resource_ids=[resource.pk]
    ).items():
        spent[allocation_id] = spent.get(allocation_id, ZERO) + delta
    for t in CostTransfer.objects.filter(state=S.APPLIED, resource=resource, month=month).only(
        "from_allocation_id", "to_allocation_id", "amount_usd"
    ):
        spent[t.to_allocation_id] = spent.get(t.to_allocation_id, ZERO) + t.amount_usd
        spent[t.from_allocation_id] = spent.get(t.from_allocation_id, ZERO) - t.amount_usd
    return spent


def _problems(
    *,
    account: RunpodAccount,
    resource,
    from_allocation: Allocation,
    to_allocation: Allocation,
    month: dt.date,
    amount_usd: Decimal,
    justification: str,
) -> list[tuple[str | None, str]]:
    problems: list[tuple[str | None, str]] = []
    institution_id = account.institution_id
    if not justification:
        problems.append(("justification", "Say why the spend moves (the justification)."))
    try:
        check_values(CostTransfer, {"amount_usd": amount_usd, "justification": justification})
    except DomainError as exc:
        problems.append((exc.field, exc.message))
        return problems
    if amount_usd <= 0:
        problems.append(("amount_usd", "The amount must be more than zero."))
    if from_allocation.pk == to_allocation.pk:
        problems.append(("to_allocation", "Choose another allocation to move the spend to."))
    for field, allocation in (
        ("from_allocation", from_allocation),
        ("to_allocation", to_allocation),
    ):
        if allocation.funding_source.institution_id != institution_id:
            problems.append((field, "The allocation belongs to another institution."))
    if resource is not None and resource.account_id != account.pk:
        problems.append(("resource", "The resource is not in that Runpod account."))
    to_lab = to_allocation.funding_source.lab_id
    if account.lab_id is not None and account.lab_id != to_lab:
        problems.append(
            (
                "to_allocation",
                "The allocation's lab may not use this Runpod account (another lab's own).",
            )
        )
    start, _ = _period(institution_id, month)
    if month.day != 1 or start > timezone.now():
        problems.append(("month", "Choose a month that has begun."))
    closed = _last_closed(institution_id)
    if closed is not None and month <= closed:
        problems.append(
            ("month", f"{month:%B %Y} is closed: finance froze its spend. Choose an open month.")
        )
    last_day = (month + dt.timedelta(days=32)).replace(day=1) - dt.timedelta(days=1)
    if not (to_allocation.start_date <= last_day and to_allocation.end_date >= month):
        problems.append(("to_allocation", f"The allocation does not run in {month:%B %Y}."))
    if to_allocation.funding_source.status == FundingSource.Status.CLOSED:
        problems.append(("to_allocation", "The allocation's funding source is closed."))
    for path in settings.LABGOV_TRANSFER_CHECKS:
        problems += import_string(path)(
            institution_id=institution_id,
            month=month,
            funding_source_ids=[from_allocation.funding_source_id, to_allocation.funding_source_id],
        )
    if not problems:
        available = available_to_move(
            account=account, allocation=from_allocation, month=month, resource=resource
        )
        if amount_usd > available:
            where = f" on {resource}" if resource is not None else ""
            problems.append(
                (
                    "amount_usd",
                    f"At most ${available:,.10f}".rstrip("0").rstrip(".")
                    + f" of {from_allocation}'s spend in {month:%B %Y} on {account.name}{where}"
                    " can move: nothing moves spend that was not spent.",
                )
            )
    return problems


def _notify(*, recipients, kind: str, transfer: CostTransfer, subject: str, body: str = ""):
    from labgov.notifications.services import notify

    notify(
        recipients=recipients,
        kind=kind,
        subject=subject,
        body=body,
        url=reverse("transfers:list"),
        dedupe_key=f"{kind}:{transfer.pk}",
        thread_key=f"cost_transfer:{transfer.pk}",
    )


def _summary(transfer: CostTransfer) -> dict:
    return {
        "account_id": transfer.account_id,
        "resource_id": transfer.resource_id,
        "month": transfer.month.isoformat(),
        "from_allocation_id": transfer.from_allocation_id,
        "to_allocation_id": transfer.to_allocation_id,
        "from_funding_source_id": transfer.from_funding_source_id,
        "to_funding_source_id": transfer.to_funding_source_id,
        "amount_usd": str(transfer.amount_usd),
        "proposed_by": transfer.proposed_by_id,
        "decided_by": transfer.decided_by_id,
    }


@transaction.atomic
def cost_transfer_create(
    *,
    actor,
    account: RunpodAccount,
    from_allocation: Allocation,
    to_allocation: Allocation,
    month: dt.date,
    amount_usd: Decimal,
    justification: str,
    resource: Resource | None = None,
) -> CostTransfer:
    """Move spend at once (finance, institution admins) or propose the move (a lab admin,
    between allocations of their own lab)."""
    justification = (justification or "").strip()
    institution_id = account.institution_id
    direct = access.can_transfer_directly(actor, institution_id)
    from_lab = from_allocation.funding_source.lab_id
    to_lab = to_allocation.funding_source.lab_id
    if not direct:
        if not access.can_propose_transfer(actor, from_lab):
            raise DomainError(
                "Only finance, an institution admin or the lab's admins move its spend."
            )
        if to_lab != from_lab:
            raise DomainError(
                "A lab admin moves spend only between allocations of their own lab; finance "
                "moves it between labs.",
                field="to_allocation",
            )
    if direct:
        # The account first: applying writes its rollups (labgov/runpod/sync.py's lock order).
        account_lock(account.pk)
    # One transfer at a time out of an allocation: the second sees what the first took.
    Allocation.objects.select_for_update().filter(pk=from_allocation.pk).first()
    problems = _problems(
        account=account,
        resource=resource,
        from_allocation=from_allocation,
        to_allocation=to_allocation,
        month=month,
        amount_usd=amount_usd,
        justification=justification,
    )
    if problems:
        raise Refused(problems)
    now = timezone.now()
    transfer = CostTransfer.objects.create(
        institution_id=institution_id,
        account=account,
        resource=resource,
        month=month,
        from_allocation=from_allocation,
        to_allocation=to_allocation,
        from_funding_source_id=from_allocation.funding_source_id,
        to_funding_source_id=to_allocation.funding_source_id,
        amount_usd=amount_usd,
        justification=justification,
        needs_approval=not direct,
        proposed_by=actor,
        proposed_at=now,
    )
    audit_record(
        actor=actor,
        action="cost_transfer.propose" if not direct else "cost_transfer.create",
        target=transfer,
        institution_id=institution_id,
        after=_summary(transfer),
        note=justification,
    )
    if direct:
        _apply(transfer, actor, now)
    else:
        _notify(
            recipients=[u for u in money_deciders(institution_id) if u.pk != actor.pk],
            kind="transfer.proposal",
            transfer=transfer,
            subject=f"{actor} proposes moving ${amount_usd:,.2f} of {month:%B %Y} spend "
            f"from {from_allocation} to {to_allocation}",
            body=justification,
        )
    return transfer


def _apply(transfer: CostTransfer, actor, now: dt.datetime) -> None:
    """Write the move: ledger adjustments, rollup rows, the month's rollups, the audit row."""
    transfer.state = S.APPLIED
    transfer.decided_by = actor
    transfer.decided_at = now
    transfer.save(update_fields=["state", "decided_by", "decided_at", "decision_note"])
    start, _ = _period(transfer.institution_id, transfer.month)
    memo = f"Cost transfer #{transfer.pk}: {transfer.justification}"[:300]
    legs = [
        (transfer.from_allocation, -transfer.amount_usd),
        (transfer.to_allocation, transfer.amount_usd),
    ]
    LedgerEntry.objects.bulk_create(
        LedgerEntry(
            funding_source_id=allocation.funding_source_id,
            allocation=allocation,
            kind=LedgerEntry.Kind.ADJUSTMENT,
            amount_usd=amount,
            occurred_at=start,
            created_at=now,
            actor=actor,
            memo=memo,
            idempotency_key=f"cost-transfer:{transfer.pk}:{'out' if amount < 0 else 'in'}",
            source=f"cost-transfer:{transfer.pk}",
        )
        for allocation, amount in legs
    )
    DailySpend.objects.bulk_create(
        DailySpend(
            account_id=transfer.account_id,
            institution_id=transfer.institution_id,
            day=transfer.month,
            category=Category.TRANSFER,
            allocation=allocation,
            funding_source_id=allocation.funding_source_id,
            lab_id=allocation.funding_source.lab_id,
            user_id=allocation.user_id,
            amount_usd=amount,
        )
        for allocation, amount in legs
    )
    lab_days_rebuild(account=transfer.account, days=[transfer.month])
    months_rebuild(account=transfer.account, months={transfer.month})
    spend_changed(account_id=transfer.account_id, days=[transfer.month])
    audit_record(
        actor=actor,
        action="cost_transfer.apply",
        target=transfer,
        institution_id=transfer.institution_id,
        after=_summary(transfer),
        note=(
            f"Proposed by {transfer.proposed_by}, approved by {actor}."
            if transfer.needs_approval
            else f"Moved by {actor} (finance)."
        ),
    )


def _lock_pending(transfer: CostTransfer, actor) -> CostTransfer:
    locked = (
        CostTransfer.objects.select_for_update(of=("self",))
        .select_related(
            "account",
            "resource",
            "proposed_by",
            "from_allocation__funding_source",
            "to_allocation__funding_source",
        )
        .get(pk=transfer.pk)
    )
    if locked.state != S.PENDING:
        raise DomainError(f"Transfer #{locked.pk} is {locked.get_state_display().lower()}.")
    if actor is None or not access.can_transfer_directly(actor, locked.institution_id):
        raise DomainError("Only finance or an institution admin decides on cost transfers.")
    if locked.proposed_by_id == actor.pk:
        raise DomainError("You cannot approve your own transfer; someone else must.")
    return locked


@transaction.atomic
def cost_transfer_approve(*, actor, transfer: CostTransfer, note: str = "") -> CostTransfer:
    """Apply a lab admin's proposal, as the approver, if it still holds (the month open, the
    spend still there)."""
    account_lock(transfer.account_id)  # first (labgov/runpod/sync.py's lock order)
    locked = _lock_pending(transfer, actor)
    Allocation.objects.select_for_update().filter(pk=locked.from_allocation_id).first()
    problems = _problems(
        account=locked.account,
        resource=locked.resource,
        from_allocation=locked.from_allocation,
        to_allocation=locked.to_allocation,
        month=locked.month,
        amount_usd=locked.amount_usd,
        justification=locked.justification,
    )
    if problems:
        raise Refused(problems)
    locked.decision_note = (note or "").strip()[:1000]
    _apply(locked, actor, timezone.now())
    _notify(
        recipients=[locked.proposed_by],
        kind="transfer.decided",
        transfer=locked,
        subject=f"Your cost transfer #{locked.pk} was approved by {actor}",
        body=locked.decision_note,
    )
    return locked


@transaction.atomic
def cost_transfer_reject(*, actor, transfer: CostTransfer, note: str) -> CostTransfer:
    note = (note or "").strip()[:1000]
    if not note:
        raise DomainError("Say why the transfer is rejected.", field="note")
    locked = _lock_pending(transfer, actor)
    locked.state = S.REJECTED
    locked.decided_by = actor
    locked.decided_at = timezone.now()
    locked.decision_note = note
    locked.save(update_fields=["state", "decided_by", "decided_at", "decision_note"])
    audit_record(
        actor=actor,
        action="cost_transfer.reject",
        target=locked,
        institution_id=locked.institution_id,
        after=_summary(locked),
        note=f"Proposed by {locked.proposed_by}, rejected by {actor}: {note}",
    )
    _notify(
        recipients=[locked.proposed_by],
        kind="transfer.decided",
        transfer=locked,
        subject=f"Your cost transfer #{locked.pk} was rejected by {actor}",
        body=note,
    )
    return locked
