"""Rollups equal the sums of the raw records, after syncs, re-syncs and re-assignments."""

import datetime as dt
from collections import defaultdict
from decimal import Decimal

import pytest
import time_machine

from labgov.runpod.models import BillingRecord, Resource, ResourceKind
from labgov.runpod.services import resource_assign
from labgov.runpod.sync import account_sync
from labgov.usage.models import Category, DailySpend, MonthlySpend
from tests.derived_rollups import assert_derived_rollups_match
from tests.fixtures_sim import hour

pytestmark = pytest.mark.usefixtures("at_sim_now")
UTC = dt.UTC


def _from_records(account) -> dict:
    totals = defaultdict(Decimal)
    for start, allocation_id, total in BillingRecord.objects.filter(
        resource__account=account
    ).values_list("bucket_start", "allocation_id", "total_usd"):
        totals[(start.astimezone(UTC).date(), allocation_id)] += total
    return dict(totals)


def _from_rollups(account) -> dict:
    totals = defaultdict(Decimal)
    for day, allocation_id, amount in DailySpend.objects.filter(account=account).values_list(
        "day", "allocation_id", "amount_usd"
    ):
        totals[(day, allocation_id)] += amount
    return {k: v for k, v in totals.items() if v}


def _assert_consistent(account):
    records = {k: v for k, v in _from_records(account).items() if v}
    assert _from_rollups(account) == records
    monthly = sum(
        MonthlySpend.objects.filter(account=account).values_list("amount_usd", flat=True),
        Decimal(0),
    )
    assert monthly == sum(records.values(), Decimal(0))
    assert_derived_rollups_match()


def test_rollups_follow_syncs_resyncs_and_reassignments(sim, world, sim_account, fast_clients):
    account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    _assert_consistent(sim_account)
    account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    _assert_consistent(sim_account)

    pod = Resource.objects.filter(
        kind=ResourceKind.POD, current_allocation__isnull=True, status="RUNNING"
    ).first()
    resource_assign(actor=world.lab_admin, resource=pod, allocation=world.allocation)
    _assert_consistent(sim_account)
    assert DailySpend.objects.filter(
        allocation=world.allocation,
        funding_source=world.funding_source,
        lab=world.lab,
        user=world.member,
    ).exists()

    sim.advance(hours=30)
    with time_machine.travel(sim.state.now, tick=True):
        account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    _assert_consistent(sim_account)


def test_categories_split_pods_and_volumes(sim, sim_account, fast_clients):
    account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    categories = set(
        DailySpend.objects.filter(account=sim_account).values_list("category", flat=True)
    )
    assert {
        Category.GPU_COMPUTE,
        Category.POD_DISK,
        Category.NETWORK_STANDARD,
        Category.NETWORK_HIGH_PERFORMANCE,
        Category.SERVERLESS,
        Category.CLUSTERS,
    } <= categories
    disk = sum(
        BillingRecord.objects.filter(resource__account=sim_account, kind="pod").values_list(
            "disk_usd", flat=True
        ),
        Decimal(0),
    )
    rolled = sum(
        DailySpend.objects.filter(account=sim_account, category=Category.POD_DISK).values_list(
            "amount_usd", flat=True
        ),
        Decimal(0),
    )
    assert rolled == disk


def test_today_is_rebuilt_as_the_hour_grows(sim, sim_account, fast_clients):
    account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    today = hour(sim.state.now).date()
    before = sum(
        DailySpend.objects.filter(account=sim_account, day=today).values_list(
            "amount_usd", flat=True
        ),
        Decimal(0),
    )
    sim.advance(minutes=25)
    with time_machine.travel(sim.state.now, tick=True):
        account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    after = sum(
        DailySpend.objects.filter(account=sim_account, day=today).values_list(
            "amount_usd", flat=True
        ),
        Decimal(0),
    )
    assert after > before
    _assert_consistent(sim_account)
