import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from labgov.accounts import access
from labgov.accounts.models import Lab, Membership, Role
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.money import ZERO
from labgov.core.snapshots import snapshot
from labgov.funding.models import Allocation, FundingSource, LedgerEntry

FUNDING_FIELDS = (
    "kind",
    "name",
    "sponsor",
    "award_number",
    "cost_center",
    "start_date",
    "end_date",
    "amount_usd",
    "indirect_cost_rate_percent",
    "status",
)
ALLOCATION_FIELDS = ("user", "project_name", "cap_usd", "start_date", "end_date")


def _usd(amount: Decimal) -> str:
    return f"${amount:,.2f}"


def funding_value_problems(
    *,
    name: str | None = None,
    start_date: dt.date | None = None,
    end_date: dt.date | None = None,
    amount_usd: Decimal | None = None,
    indirect_cost_rate_percent: Decimal | None = None,
    kind: str | None = None,
    status: str | None = None,
) -> list[tuple[str, str]]:
    """Every rule a funding source's values break, as (field, message): a form reports them
    all at once; a value not given (None) is not checked."""
    problems = []
    if name is not None and not name.strip():
        problems.append(("name", "A funding source needs a name."))
    if kind is not None and kind not in FundingSource.Kind.values:
        problems.append(("kind", f"Unknown kind {kind!r}."))
    if status is not None and status not in FundingSource.Status.values:
        problems.append(("status", f"Unknown status {status!r}."))
    if start_date is not None and end_date is not None and end_date < start_date:
        problems.append(("end_date", "The end date is before the start date."))
    if amount_usd is not None and amount_usd < 0:
        problems.append(("amount_usd", "The amount cannot be negative."))
    elif amount_usd is not None and amount_usd != amount_usd.quantize(Decimal("0.01")):
        problems.append(("amount_usd", "The amount has more than two decimal places."))
    if indirect_cost_rate_percent is not None and not (0 <= indirect_cost_rate_percent <= 200):
        problems.append(
            ("indirect_cost_rate_percent", "The indirect-cost rate must be between 0 and 200 %.")
        )
    return problems


def validate_funding_values(
    *,
    name: str,
    start_date: dt.date,
    end_date: dt.date,
    amount_usd: Decimal,
    indirect_cost_rate_percent: Decimal | None,
    kind: str,
    status: str,
) -> None:
    problems = funding_value_problems(
        name=name,
        start_date=start_date,
        end_date=end_date,
        amount_usd=amount_usd,
        indirect_cost_rate_percent=indirect_cost_rate_percent,
        kind=kind,
        status=status,
    )
    if problems:
        field, message = problems[0]
        raise DomainError(message, field=field)


def _check_award_number_free(institution_id: int, award_number: str, exclude_pk=None) -> None:
    if not award_number:
        return
    clash = FundingSource.objects.filter(institution_id=institution_id, award_number=award_number)
    if exclude_pk is not None:
        clash = clash.exclude(pk=exclude_pk)
    if clash.exists():
        raise DomainError(
            f"Award number {award_number} is already used by another funding source.",
            field="award_number",
        )


def _require_funding_writer(actor, institution_id: int) -> None:
    """Amounts, dates and status of funding sources are finance's and the institution admins'
    to set; a lab admin proposes (funding/proposals.py). actor None is the system (the demo
    seeder, migrations)."""
    if actor is not None and not access.can_write_funding_source(
        actor, lab_id=None, institution_id=institution_id
    ):
        raise DomainError(
            "Only finance or an institution admin sets funding sources; propose the change instead."
        )


def _require_lab_manager(actor, lab_id: int) -> None:
    if actor is not None and not access.can_manage_lab(actor, lab_id):
        raise DomainError("Only the lab's admins and the institution's admins allocate.")


def _require_not_own_allocation(actor, user) -> None:
    """Giving yourself an allocation (or changing your own) moves money to yourself: another
    lab admin of the lab or an institution admin does it."""
    if actor is not None and user is not None and user.pk == actor.pk:
        raise DomainError(
            "You cannot give or change an allocation of your own; ask another lab admin or an "
            "institution admin.",
            field="user",
        )


def _allocated_total(funding_source: FundingSource, exclude_pk=None) -> Decimal:
    allocations = Allocation.objects.filter(funding_source=funding_source)
    if exclude_pk is not None:
        allocations = allocations.exclude(pk=exclude_pk)
    return allocations.aggregate(total=Sum("cap_usd"))["total"] or ZERO


@transaction.atomic
def funding_source_create(
    *,
    actor,
    lab: Lab,
    name: str,
    start_date: dt.date,
    end_date: dt.date,
    amount_usd: Decimal,
    kind: str = FundingSource.Kind.GRANT,
    sponsor: str = "",
    award_number: str = "",
    cost_center: str = "",
    indirect_cost_rate_percent: Decimal | None = None,
    status: str = FundingSource.Status.ACTIVE,
) -> FundingSource:
    _require_funding_writer(actor, lab.institution_id)
    award_number = award_number.strip()
    validate_funding_values(
        name=name,
        start_date=start_date,
        end_date=end_date,
        amount_usd=amount_usd,
        indirect_cost_rate_percent=indirect_cost_rate_percent,
        kind=kind,
        status=status,
    )
    _check_award_number_free(lab.institution_id, award_number)
    funding_source = FundingSource.objects.create(
        institution_id=lab.institution_id,
        lab=lab,
        kind=kind,
        name=name.strip(),
        sponsor=sponsor.strip(),
        award_number=award_number,
        cost_center=cost_center.strip(),
        start_date=start_date,
        end_date=end_date,
        amount_usd=amount_usd,
        indirect_cost_rate_percent=indirect_cost_rate_percent,
        status=status,
    )
    audit_record(
        actor=actor,
        action="funding_source.create",
        target=funding_source,
        institution_id=funding_source.institution_id,
    )
    return funding_source


@transaction.atomic
def funding_source_update(*, actor, funding_source: FundingSource, **changes) -> FundingSource:
    """Change a funding source's fields. Amount and dates may not cut under its allocations."""
    unknown = set(changes) - set(FUNDING_FIELDS) - {"lab"}
    if unknown:
        raise TypeError(f"funding_source_update got unknown fields {sorted(unknown)}")
    # Lock the row: allocation services lock it too, so the allocation check below cannot
    # race a concurrent allocation.
    locked = FundingSource.objects.select_for_update().get(pk=funding_source.pk)
    _require_funding_writer(actor, locked.institution_id)
    before = snapshot(locked)
    for field, value in changes.items():
        setattr(locked, field, value.strip() if isinstance(value, str) else value)
    if locked.lab.institution_id != locked.institution_id:
        raise DomainError("A funding source cannot move to another institution.", field="lab")
    validate_funding_values(
        name=locked.name,
        start_date=locked.start_date,
        end_date=locked.end_date,
        amount_usd=locked.amount_usd,
        indirect_cost_rate_percent=locked.indirect_cost_rate_percent,
        kind=locked.kind,
        status=locked.status,
    )
    _check_award_number_free(locked.institution_id, locked.award_number, exclude_pk=locked.pk)
    allocated = _allocated_total(locked)
    if locked.amount_usd < allocated:
        raise DomainError(
            f"The amount cannot be less than the {_usd(allocated)} already allocated.",
            field="amount_usd",
        )
    outside = Allocation.objects.filter(funding_source=locked).exclude(
        start_date__gte=locked.start_date, end_date__lte=locked.end_date
    )
    if outside.exists():
        raise DomainError(
            f"{outside.count()} allocation(s) would fall outside the new funding period; "
            "change them first.",
            field="end_date",
        )
    after = snapshot(locked)
    if after == before:
        return locked
    locked.updated_at = timezone.now()
    locked.save()
    audit_record(
        actor=actor,
        action="funding_source.update",
        target=locked,
        institution_id=locked.institution_id,
        before=before,
        after=snapshot(locked),
    )
    return locked


def allocation_value_problems(
    *,
    funding_source: FundingSource,
    user=None,
    project_name: str | None = None,
    cap_usd: Decimal | None = None,
    start_date: dt.date | None = None,
    end_date: dt.date | None = None,
) -> list[tuple[str, str]]:
    """Every rule an allocation's own values break, as (field, message), for a form to report
    them all at once; a value not given (None) is not checked."""
    problems = []
    if user is None and project_name is not None and not project_name.strip():
        problems.append(("user", "An allocation is for a person or a named project."))
    if cap_usd is not None and cap_usd < 0:
        problems.append(("cap_usd", "The cap cannot be negative."))
    elif cap_usd is not None and cap_usd != cap_usd.quantize(Decimal("0.01")):
        problems.append(("cap_usd", "The cap has more than two decimal places."))
    if start_date is not None and end_date is not None and end_date < start_date:
        problems.append(("end_date", "The end date is before the start date."))
    elif start_date is not None and start_date < funding_source.start_date:
        problems.append(("start_date", _outside_period(funding_source)))
    elif end_date is not None and end_date > funding_source.end_date:
        problems.append(("end_date", _outside_period(funding_source)))
    return problems


def _outside_period(funding_source: FundingSource) -> str:
    return (
        "The allocation must lie within the funding period "
        f"({funding_source.start_date:%Y-%m-%d} to {funding_source.end_date:%Y-%m-%d})."
    )


def _validate_allocation(
    *,
    funding_source: FundingSource,
    user,
    project_name: str,
    cap_usd: Decimal,
    start_date: dt.date,
    end_date: dt.date,
    exclude_pk=None,
) -> None:
    problems = allocation_value_problems(
        funding_source=funding_source,
        user=user,
        project_name=project_name,
        cap_usd=cap_usd,
        start_date=start_date,
        end_date=end_date,
    )
    if problems:
        field, message = problems[0]
        raise DomainError(message, field=field)
    if user is not None and not (
        Membership.objects.active()
        .filter(user=user, lab_id=funding_source.lab_id, role__in=[Role.MEMBER, Role.LAB_ADMIN])
        .exists()
    ):
        raise DomainError(f"{user} is not a current member of {funding_source.lab}.", field="user")
    already = _allocated_total(funding_source, exclude_pk=exclude_pk)
    if already + cap_usd > funding_source.amount_usd:
        left = funding_source.amount_usd - already
        raise DomainError(
            f"Allocations would total {_usd(already + cap_usd)}, more than the funding "
            f"source's {_usd(funding_source.amount_usd)}; {_usd(left)} is left to allocate.",
            field="cap_usd",
        )


@transaction.atomic
def allocation_create(
    *,
    actor,
    funding_source: FundingSource,
    cap_usd: Decimal,
    start_date: dt.date,
    end_date: dt.date,
    user=None,
    project_name: str = "",
) -> Allocation:
    locked = (
        FundingSource.objects.select_for_update().select_related("lab").get(pk=funding_source.pk)
    )
    if locked.status == FundingSource.Status.CLOSED:
        raise DomainError("This funding source is closed.")
    _require_lab_manager(actor, locked.lab_id)
    _require_not_own_allocation(actor, user)
    _validate_allocation(
        funding_source=locked,
        user=user,
        project_name=project_name,
        cap_usd=cap_usd,
        start_date=start_date,
        end_date=end_date,
    )
    allocation = Allocation.objects.create(
        funding_source=locked,
        user=user,
        project_name=project_name.strip(),
        cap_usd=cap_usd,
        start_date=start_date,
        end_date=end_date,
    )
    audit_record(
        actor=actor,
        action="allocation.create",
        target=allocation,
        institution_id=locked.institution_id,
    )
    return allocation


@transaction.atomic
def allocation_update(*, actor, allocation: Allocation, **changes) -> Allocation:
    unknown = set(changes) - set(ALLOCATION_FIELDS)
    if unknown:
        raise TypeError(f"allocation_update got unknown fields {sorted(unknown)}")
    funding_source = (
        FundingSource.objects.select_for_update()
        .select_related("lab")
        .get(pk=allocation.funding_source_id)
    )
    current = (
        Allocation.objects.select_for_update(of=("self",))
        .select_related("user")
        .get(pk=allocation.pk)
    )
    _require_lab_manager(actor, funding_source.lab_id)
    _require_not_own_allocation(actor, current.user)
    before = snapshot(current)
    for field, value in changes.items():
        setattr(current, field, value.strip() if isinstance(value, str) else value)
    _require_not_own_allocation(actor, current.user)
    _validate_allocation(
        funding_source=funding_source,
        user=current.user,
        project_name=current.project_name,
        cap_usd=current.cap_usd,
        start_date=current.start_date,
        end_date=current.end_date,
        exclude_pk=current.pk,
    )
    if snapshot(current) == before:
        return current
    current.updated_at = timezone.now()
    current.save()
    audit_record(
        actor=actor,
        action="allocation.update",
        target=current,
        institution_id=funding_source.institution_id,
        before=before,
    )
    return current


@transaction.atomic
def ledger_post(
    *,
    actor,
    funding_source: FundingSource,
    kind: str,
    amount_usd: Decimal,
    allocation: Allocation | None = None,
    memo: str = "",
    occurred_at: dt.datetime | None = None,
    idempotency_key: str = "",
) -> LedgerEntry:
    """Append one money movement. With an idempotency key, posting it again returns the first."""
    if kind not in LedgerEntry.Kind.values:
        raise DomainError(f"Unknown ledger entry kind {kind!r}.")
    if allocation is not None and allocation.funding_source_id != funding_source.pk:
        raise DomainError("The allocation belongs to another funding source.")
    if not isinstance(amount_usd, Decimal):
        raise TypeError("ledger amounts are Decimal")
    if idempotency_key:
        existing = LedgerEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
    entry = LedgerEntry.objects.create(
        funding_source=funding_source,
        allocation=allocation,
        kind=kind,
        amount_usd=amount_usd,
        occurred_at=occurred_at or timezone.now(),
        actor=actor if actor and actor.pk else None,
        memo=memo,
        idempotency_key=idempotency_key,
    )
    if kind == LedgerEntry.Kind.ADJUSTMENT:
        # Manual corrections are governance changes; automated postings are audited by the
        # process that makes them (approval, sync run).
        audit_record(
            actor=actor,
            action="ledger.adjust",
            target=entry,
            institution_id=funding_source.institution_id,
            note=memo,
        )
    return entry
