"""A split resource through the real sync (simulator over HTTP, the billing store): rollups and
ledger usage follow the shares, to the last digit, after a later sync writes new hours."""

import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from labgov.core.money import ZERO, grouped_sums
from labgov.funding.models import Allocation
from labgov.runpod.models import BillingRecord, Resource, ResourceKind
from labgov.runpod.sync import account_sync
from labgov.transfers.splits import resource_split_set
from labgov.usage.models import DailySpend
from tests.derived_rollups import assert_derived_rollups_match
from tests.factories import AllocationFactory

pytestmark = pytest.mark.usefixtures("at_sim_now")


def _by_allocation(queryset, field) -> dict:
    return {k[0]: v for k, v in grouped_sums(queryset, ["allocation_id"], field).items() if v}


def test_a_split_pod_after_resyncs(sim, world, sim_account, fast_clients):
    account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    pod = Resource.objects.filter(kind=ResourceKind.POD, status="RUNNING").first()
    second = AllocationFactory(funding_source=world.funding_source, user=None, project_name="B")
    day = dt.datetime.combine(sim.state.now.date(), dt.time(), tzinfo=dt.UTC)
    resource_split_set(
        actor=world.inst_admin,
        resource=pod,
        shares=[(world.allocation, Decimal(70)), (second, Decimal(30))],
        starts_at=day,
    )
    sim.advance(hours=30)
    with time_machine.travel(sim.state.now, tick=True):
        account_sync(account_id=sim_account.pk, client_factory=fast_clients)

    records = BillingRecord.objects.filter(resource=pod, bucket_start__gte=day)
    split_total = sum(records.values_list("total_usd", flat=True), ZERO)
    assert split_total > 0
    rollups = _by_allocation(DailySpend.objects.filter(account=sim_account), "amount_usd")
    attributed = _by_allocation(
        BillingRecord.objects.filter(resource__account=sim_account), "total_usd"
    )
    # Everything attributed is in the rollups, and the second allocation holds ~30% of the
    # split's spend (each day and category split exactly, so within a unit per piece).
    assert sum(rollups.values(), ZERO) == sum(
        BillingRecord.objects.filter(resource__account=sim_account).values_list(
            "total_usd", flat=True
        ),
        ZERO,
    )
    assert abs(rollups[second.pk] - split_total * Decimal("0.3")) < Decimal("1E-8")
    assert rollups[world.allocation.pk] == attributed[world.allocation.pk] - rollups[second.pk]
    for allocation in (world.allocation, second):
        spent = Allocation.objects.with_figures().get(pk=allocation.pk).spent_usd
        assert spent == rollups[allocation.pk]
    assert_derived_rollups_match()
