import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.money import ZERO, grouped_sums, split_by_shares
from labgov.funding.models import Allocation
from labgov.runpod.models import Assignment, AssignmentShare, BillingRecord
from labgov.transfers.services import Refused, available_to_move, cost_transfer_create
from labgov.transfers.splits import resource_split_set
from labgov.usage.models import DailySpend, MonthlySpend
from labgov.usage.periods import period_close
from tests.derived_rollups import assert_derived_rollups_match
from tests.factories import AllocationFactory
from tests.transfers.conftest import NOV, T0, hours

SPLIT_AT = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)


@given(
    amount=st.decimals(
        min_value=Decimal("-1000"), max_value=Decimal("100000"), places=10, allow_nan=False
    ),
    cuts=st.lists(st.integers(min_value=1, max_value=9999), min_size=1, max_size=5),
)
@settings(max_examples=100, deadline=None)
def test_split_parts_add_up_exactly_and_stay_within_a_unit(amount, cuts):
    # Shares in hundredths of a percent summing to exactly 100.
    bounds = sorted(set(cuts))
    points = [0, *bounds, 10000]
    shares = [Decimal(b - a) / 100 for a, b in zip(points, points[1:], strict=False) if b > a]
    parts = split_by_shares(amount, shares)
    assert sum(parts, ZERO) == amount
    unit = Decimal("1E-10")
    for part, share in zip(parts, shares, strict=True):
        assert abs(part - amount * share / 100) < unit
    assert split_by_shares(amount, shares) == parts  # deterministic


def test_split_by_shares_gives_leftover_units_to_the_largest_remainders():
    # 1E-10 in three equal-ish parts: the one unit goes to the biggest remainder (33.34 %).
    assert split_by_shares(
        Decimal("1E-10"), [Decimal("33.33"), Decimal("33.33"), Decimal("33.34")]
    ) == [
        ZERO,
        ZERO,
        Decimal("1E-10"),
    ]
    assert split_by_shares(Decimal("0.0000000002"), [Decimal(50), Decimal(50)]) == [
        Decimal("1E-10"),
        Decimal("1E-10"),
    ]


def _spent(allocation) -> Decimal:
    return Allocation.objects.with_figures().get(pk=allocation.pk).spent_usd


def _rollup(account, allocation) -> Decimal:
    return grouped_sums(
        DailySpend.objects.filter(account=account, allocation=allocation),
        ["allocation_id"],
        "amount_usd",
    ).get((allocation.pk,), ZERO)


def test_a_split_pays_in_shares_from_its_day_on_and_keeps_history(world, spent):
    account, pod, second, _ = spent
    third = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    shares = [
        (world.allocation, Decimal("33.33")),
        (second, Decimal("33.33")),
        (third, Decimal("33.34")),
    ]
    # Back-dated: an institution admin's applies at once (a lab admin's waits, test_moves.py).
    assignment = resource_split_set(
        actor=world.inst_admin, resource=pod, shares=shares, starts_at=SPLIT_AT
    )
    # Timeline: the first assignment stays; the split is a new one with its shares.
    assert Assignment.objects.filter(resource=pod).count() == 2
    assert sorted(
        AssignmentShare.objects.filter(assignment=assignment).values_list(
            "allocation_id", "share_percent"
        )
    ) == sorted((a.pk, p) for a, p in shares)
    assert assignment.allocation == third  # the largest share is named on the records
    # Before the split day: all the member's. From it: in shares, exactly.
    total = sum(
        BillingRecord.objects.filter(resource=pod).values_list("total_usd", flat=True), ZERO
    )
    before = Decimal("1.0000000001") * (24 + 24)  # October day + 2 Nov
    after = Decimal("1.0000000001") * 24  # 3 Nov
    parts = [_rollup(account, a) for a in (world.allocation, second, third)]
    assert sum(parts, ZERO) == total
    # The parts go in the shares' order: largest first, then by allocation.
    expected = split_by_shares(after, [Decimal("33.34"), Decimal("33.33"), Decimal("33.33")])
    assert parts == [before + expected[1], expected[2], expected[0]]
    # The ledger (allocations' remaining figures) equals the rollups, to the last digit.
    for allocation in (world.allocation, second, third):
        assert _spent(allocation) == _rollup(account, allocation)
    # Monthly rollups agree with daily ones.
    monthly = sum(
        MonthlySpend.objects.filter(account=account).values_list("amount_usd", flat=True), ZERO
    )
    assert monthly == total
    event = AuditEvent.objects.filter(action="resource.assign", target_id=str(pod.pk)).latest("pk")
    assert event.actor == world.inst_admin
    assert event.after["shares"] == {str(a.pk): str(p) for a, p in shares}


def test_billing_synced_after_the_split_follows_the_shares(world, spent):
    account, pod, second, _ = spent
    resource_split_set(
        actor=world.inst_admin,
        resource=pod,
        shares=[(world.allocation, Decimal(60)), (second, Decimal(40))],
        starts_at=SPLIT_AT,
    )
    # A later slice, written as the sync writes it: records, then attribution and rollups.
    from labgov.runpod.attribution import reattribute, usage_reconcile
    from labgov.usage.services import rollups_rebuild

    hours(pod, dt.datetime(2026, 11, 5, tzinfo=dt.UTC), 10, amount="0.3333333333")
    days = reattribute(resource_ids=[pod.pk], since=dt.datetime(2026, 11, 5, tzinfo=dt.UTC))
    usage_reconcile(account=account, days=days)
    rollups_rebuild(account=account, days=days)
    day5 = {
        k[0]: v
        for k, v in grouped_sums(
            DailySpend.objects.filter(account=account, day=dt.date(2026, 11, 5)),
            ["allocation_id"],
            "amount_usd",
        ).items()
    }
    assert day5 == {
        world.allocation.pk: Decimal("1.9999999998"),
        second.pk: Decimal("1.3333333332"),
    }
    for allocation in (world.allocation, second):
        assert _spent(allocation) == _rollup(account, allocation)
    # What a transfer may take counts the shares.
    assert available_to_move(
        account=account, allocation=second, month=NOV, resource=pod
    ) == _rollup(account, second)
    cost_transfer_create(
        actor=world.finance,
        account=account,
        resource=pod,
        from_allocation=second,
        to_allocation=world.allocation,
        month=NOV,
        amount_usd=_rollup(account, second),
        justification="All of it back",
    )
    assert _rollup(account, second) == ZERO
    assert_derived_rollups_match()


def test_who_may_split_and_within_which_rules(world, spent):
    account, pod, second, other = spent
    # The attack: the lab admin puts half of their pod on the other lab's grant.
    with pytest.raises(Refused, match="do not manage") as refused:
        resource_split_set(
            actor=world.lab_admin,
            resource=pod,
            shares=[(world.allocation, Decimal(50)), (other, Decimal(50))],
            starts_at=SPLIT_AT,
        )
    # Finance assigns nothing; a member neither.
    for actor in (world.finance, world.member):
        with pytest.raises(DomainError):
            resource_split_set(
                actor=actor,
                resource=pod,
                shares=[(world.allocation, Decimal(50)), (second, Decimal(50))],
                starts_at=SPLIT_AT,
            )
    # Every problem at once: the sum, a duplicate, a start before the current assignment.
    ended = AllocationFactory(
        funding_source=world.funding_source,
        user=world.lab_admin,
        start_date=dt.date(2025, 1, 1),
        end_date=dt.date(2025, 12, 31),
    )
    with pytest.raises(Refused) as refused:
        resource_split_set(
            actor=world.lab_admin,
            resource=pod,
            shares=[(world.allocation, Decimal(50)), (ended, Decimal("49.99"))],
            starts_at=SPLIT_AT,
        )
    messages = " ".join(m for _, m in refused.value.problems)
    assert "99.99%" in messages and "not active" in messages
    # A closed month cannot be split.
    period_close(actor=world.finance, institution=world.institution, year=2026, month=10)
    with pytest.raises(Refused, match="closed period"):
        resource_split_set(
            actor=world.inst_admin,
            resource=pod,
            shares=[(world.allocation, Decimal(50)), (second, Decimal(50))],
            starts_at=dt.datetime(2026, 10, 30, tzinfo=dt.UTC),
        )
    assert not AssignmentShare.objects.exists()


def test_one_allocation_at_100_ends_a_split(world, spent):
    account, pod, second, _ = spent
    resource_split_set(
        actor=world.inst_admin,
        resource=pod,
        shares=[(world.allocation, Decimal(50)), (second, Decimal(50))],
        starts_at=T0,
    )
    resource_split_set(
        actor=world.inst_admin,
        resource=pod,
        shares=[(second, Decimal(100))],
        starts_at=SPLIT_AT,
    )
    # 2 Nov split 50/50, 3 Nov all second's.
    half = split_by_shares(Decimal("24.0000000024"), [Decimal(50), Decimal(50)])
    assert _rollup(account, second) == half[1] + Decimal("24.0000000024")
    assert Assignment.objects.filter(resource=pod).count() == 3
