import datetime as dt
from decimal import Decimal

import pytest

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.funding.models import Allocation, FundingSource
from labgov.funding.services import (
    allocation_create,
    allocation_update,
    funding_source_create,
    funding_source_update,
)
from tests.factories import AllocationFactory, MembershipFactory

D = dt.date


def _create(world, **overrides):
    values = {
        "actor": world.finance,
        "lab": world.lab,
        "name": "New grant",
        "award_number": "NEW-1",
        "start_date": D(2026, 1, 1),
        "end_date": D(2026, 12, 31),
        "amount_usd": Decimal("5000.00"),
    }
    values.update(overrides)
    return funding_source_create(**values)


def test_create_funding_source_audits_it(world):
    fs = _create(world, indirect_cost_rate_percent=Decimal("55"))
    assert fs.institution == world.institution
    event = AuditEvent.objects.get(action="funding_source.create", target_id=str(fs.pk))
    assert event.actor == world.finance
    assert event.institution == world.institution
    assert event.after["amount_usd"] == "5000.00"


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"end_date": D(2025, 12, 31)}, "end_date", "before the start date"),
        ({"amount_usd": Decimal("-1")}, "amount_usd", "cannot be negative"),
        ({"amount_usd": Decimal("1.001")}, "amount_usd", "two decimal places"),
        ({"name": "  "}, "name", "needs a name"),
        ({"indirect_cost_rate_percent": Decimal("250")}, "indirect_cost_rate_percent", "between 0"),
        ({"kind": "lottery"}, "kind", "Unknown kind"),
    ],
)
def test_create_rejects_bad_values(world, overrides, field, words):
    with pytest.raises(DomainError) as info:
        _create(world, **overrides)
    assert info.value.field == field
    assert words in info.value.message
    assert not FundingSource.objects.filter(award_number="NEW-1").exists()
    assert not AuditEvent.objects.filter(action="funding_source.create").exists()


def test_award_number_is_unique_per_institution(world):
    _create(world)
    with pytest.raises(DomainError, match="already used"):
        _create(world, name="Other")


def test_update_records_before_and_after(world):
    fs = world.funding_source
    funding_source_update(actor=world.finance, funding_source=fs, amount_usd=Decimal("12000.00"))
    event = AuditEvent.objects.get(action="funding_source.update")
    assert event.before["amount_usd"] == "10000.00"
    assert event.after["amount_usd"] == "12000.00"
    assert event.actor == world.finance


def test_update_without_change_records_nothing(world):
    fs = world.funding_source
    funding_source_update(actor=world.finance, funding_source=fs, name=fs.name)
    assert not AuditEvent.objects.filter(action="funding_source.update").exists()


def test_amount_cannot_drop_below_allocations(world):
    with pytest.raises(DomainError, match="already allocated") as info:
        funding_source_update(
            actor=world.finance, funding_source=world.funding_source, amount_usd=Decimal("999")
        )
    assert info.value.field == "amount_usd"
    world.funding_source.refresh_from_db()
    assert world.funding_source.amount_usd == Decimal("10000.00")


def test_period_cannot_shrink_under_allocations(world):
    fs = world.funding_source
    with pytest.raises(DomainError, match="outside the new funding period"):
        funding_source_update(
            actor=world.finance, funding_source=fs, end_date=fs.end_date - dt.timedelta(days=1)
        )


def test_allocation_create_and_audit(world):
    fs = world.funding_source
    allocation = allocation_create(
        actor=world.lab_admin,
        funding_source=fs,
        user=world.member,
        cap_usd=Decimal("2500.00"),
        start_date=fs.start_date,
        end_date=fs.end_date,
    )
    assert AuditEvent.objects.filter(
        action="allocation.create", target_id=str(allocation.pk)
    ).exists()


def test_allocations_may_not_exceed_the_funding_source(world):
    fs = world.funding_source  # 10,000 with 1,000 allocated
    with pytest.raises(DomainError) as info:
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            project_name="big",
            cap_usd=Decimal("9000.01"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )
    assert info.value.field == "cap_usd"
    assert "$9,000.00 is left" in info.value.message
    # Exactly what is left is fine.
    allocation_create(
        actor=world.lab_admin,
        funding_source=fs,
        project_name="big",
        cap_usd=Decimal("9000.00"),
        start_date=fs.start_date,
        end_date=fs.end_date,
    )


@pytest.mark.parametrize("which", ["start", "end"])
def test_allocation_dates_within_funding_period(world, which):
    fs = world.funding_source
    start, end = fs.start_date, fs.end_date
    if which == "start":
        start -= dt.timedelta(days=1)
    else:
        end += dt.timedelta(days=1)
    with pytest.raises(DomainError, match="within the funding period") as info:
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            project_name="p",
            cap_usd=Decimal("1"),
            start_date=start,
            end_date=end,
        )
    assert info.value.field == f"{which}_date"


def test_allocation_end_before_start(world):
    fs = world.funding_source
    with pytest.raises(DomainError, match="before the start date"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            project_name="p",
            cap_usd=Decimal("1"),
            start_date=fs.end_date,
            end_date=fs.start_date,
        )


def test_allocation_negative_cap(world):
    fs = world.funding_source
    with pytest.raises(DomainError, match="cannot be negative"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            project_name="p",
            cap_usd=Decimal("-5"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )


def test_allocation_needs_a_holder(world):
    fs = world.funding_source
    with pytest.raises(DomainError, match="person or a named project"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            cap_usd=Decimal("5"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )


def test_allocation_holder_must_be_a_member_of_the_lab(world):
    fs = world.funding_source
    with pytest.raises(DomainError, match="not a current member"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            user=world.other_member,
            cap_usd=Decimal("5"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )


def test_allocation_update_excludes_itself_from_the_total(world):
    allocation = world.allocation
    allocation_update(actor=world.lab_admin, allocation=allocation, cap_usd=Decimal("10000.00"))
    allocation.refresh_from_db()
    assert allocation.cap_usd == Decimal("10000.00")
    event = AuditEvent.objects.get(action="allocation.update")
    assert event.before["cap_usd"] == "1000.00"
    with pytest.raises(DomainError):
        allocation_update(actor=world.lab_admin, allocation=allocation, cap_usd=Decimal("10000.01"))


def test_ended_membership_blocks_new_allocations(world):
    fs = world.funding_source
    ended = MembershipFactory(
        lab=world.lab, end_date=dt.date(2020, 1, 1), start_date=dt.date(2019, 1, 1)
    ).user
    with pytest.raises(DomainError, match="not a current member"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            user=ended,
            cap_usd=Decimal("5"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )


def test_closed_funding_source_takes_no_allocations(world):
    fs = world.funding_source
    funding_source_update(
        actor=world.finance, funding_source=fs, status=FundingSource.Status.CLOSED
    )
    with pytest.raises(DomainError, match="closed"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            project_name="p",
            cap_usd=Decimal("5"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )
    assert Allocation.objects.filter(funding_source=fs).count() == 1


def test_allocation_factory_sanity(world):
    # Factories keep the invariants the services enforce.
    allocation = AllocationFactory(funding_source=world.funding_source, user=world.member)
    assert allocation.start_date >= world.funding_source.start_date
