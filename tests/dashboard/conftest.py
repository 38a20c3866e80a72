"""Dashboard fixtures: spend written straight into the rollups (the sync's job is tested in
tests/usage), resources in every state that matters, and a clock fixed at noon UTC."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

import pytest
import time_machine
from django.db import transaction

from labgov.funding.models import LedgerEntry
from labgov.funding.services import ledger_post
from labgov.runpod.models import Resource
from labgov.usage.models import Category, DailySpend, MonthlySpend
from labgov.usage.services import lab_days_rebuild, source_months_rebuild
from tests.derived_rollups import assert_derived_rollups_match
from tests.factories import ResourceFactory, RunpodAccountFactory

NOW = dt.datetime(2026, 3, 18, 12, 0, tzinfo=dt.UTC)
TODAY = NOW.date()


@pytest.fixture(autouse=True)
def fixed_clock():
    with time_machine.travel(NOW, tick=False):
        yield


def add_spend(
    account,
    day: dt.date,
    amount: str | Decimal,
    *,
    allocation=None,
    category: str = Category.GPU_COMPUTE,
    ledger: bool = True,
    rebuild: bool = True,
) -> None:
    """One day's spend in the daily and monthly rollups (and those summed from them: by lab
    and day, by funding source and month), as the sync would leave it; with `ledger`, the
    matching usage on the ledger too (attributed spend only). `rebuild=False` leaves the
    summed rollups to the caller, who rebuilds them once for all the days it added
    (`rebuild_summed`), as a sync does."""
    amount = Decimal(amount)
    owners = {"lab_id": account.lab_id}
    if allocation is not None:
        owners = {
            "allocation": allocation,
            "funding_source_id": allocation.funding_source_id,
            "lab_id": allocation.funding_source.lab_id,
            "user_id": allocation.user_id,
        }
    common = {
        "account": account,
        "institution_id": account.institution_id,
        "category": category,
        "amount_usd": amount,
        **owners,
    }
    DailySpend.objects.create(day=day, **common)
    MonthlySpend.objects.create(month=day.replace(day=1), **common)
    if rebuild:
        rebuild_summed(account, [day])
    if ledger and allocation is not None:
        ledger_post(
            actor=None,
            funding_source=allocation.funding_source,
            allocation=allocation,
            kind=LedgerEntry.Kind.USAGE,
            amount_usd=amount,
        )


def rebuild_summed(account, days) -> None:
    """The rollups summed from the daily and monthly ones, for these days, as the sync leaves
    them (lab_days_rebuild, and source_months_rebuild from months_rebuild)."""
    with transaction.atomic():  # the rebuilds lock the account row, to its commit
        lab_days_rebuild(account=account, days=days)
        source_months_rebuild(account=account, months={d.replace(day=1) for d in days})


@dataclass
class Spend:
    account: object
    running: Resource
    stopped: Resource
    idle_volume: Resource
    mounted_volume: Resource


@pytest.fixture
def spend(world) -> Spend:
    """The member's allocation spends $10/day of GPU for the last 10 days and $1/day of disk;
    the lab admin's lab has a running pod, a stopped pod with a volume disk, and two network
    volumes, one mounted by the running pod."""
    # The standing world is built once, at the real date: put its money on this clock's
    # calendar (each test's transaction is rolled back, so no other test sees it).
    period = {
        "start_date": TODAY - dt.timedelta(days=100),
        "end_date": TODAY + dt.timedelta(days=265),
    }
    for obj in (world.funding_source, world.other_funding_source, world.allocation):
        type(obj).objects.filter(pk=obj.pk).update(**period)
        obj.refresh_from_db()
    account = RunpodAccountFactory(institution=world.institution, name="Main")
    days = [TODAY - dt.timedelta(days=i) for i in range(1, 11)]
    for day in days:
        add_spend(account, day, "10.00", allocation=world.allocation, rebuild=False)
        add_spend(
            account,
            day,
            "1.00",
            allocation=world.allocation,
            category=Category.POD_DISK,
            rebuild=False,
        )
    add_spend(account, TODAY - dt.timedelta(days=2), "5.00", rebuild=False)  # unattributed
    rebuild_summed(account, days)  # once for all of it, as a sync
    mounted = ResourceFactory(
        account=account,
        kind="network_volume",
        runpod_id="vol-mounted",
        name="datasets",
        status="AVAILABLE",
        size_gb=100,
        volume_type="STANDARD",
        current_allocation=world.allocation,
    )
    running = ResourceFactory(
        account=account,
        name="train-a100",
        status="RUNNING",
        cost_per_hr_usd=Decimal("1.89"),
        gpu_count=1,
        gpu_type_id="NVIDIA A100 80GB PCIe",
        container_disk_gb=20,
        volume_disk_gb=50,
        network_volume_id="vol-mounted",
        current_allocation=world.allocation,
    )
    stopped = ResourceFactory(
        account=account,
        name="forgotten",
        status="EXITED",
        cost_per_hr_usd=Decimal("0.44"),
        volume_disk_gb=200,
        current_allocation=world.allocation,
    )
    idle = ResourceFactory(
        account=account,
        kind="network_volume",
        runpod_id="vol-idle",
        name="old-checkpoints",
        status="AVAILABLE",
        size_gb=500,
        volume_type="STANDARD",
        current_allocation=world.allocation,
    )
    return Spend(account, running, stopped, idle, mounted)


def past_rate_only(spend: Spend) -> None:
    """Stop the running pod, so what runs and is stored now ($3.02/day of storage) costs less
    than the last 7 days' $11/day and the forecasts go by the latter."""
    Resource.objects.filter(pk=spend.running.pk).update(status="EXITED", cost_per_hr_usd=0)


def grow(world, spend: Spend, n: int) -> None:
    """n more of everything the dashboards read: people with allocations on new and existing
    funding sources of both labs, ten days of spend each, resources running and idle, and
    unattributed spend; so a query per row would show."""
    from labgov.accounts.models import Role
    from tests.factories import AllocationFactory, FundingSourceFactory, MembershipFactory

    days = set()

    def add(day: dt.date, amount: str, **kwargs) -> None:
        # The summed rollups are rebuilt once below: one rebuild per row (~5 ms each) was
        # half of a test that grows by ten.
        days.add(day)
        add_spend(spend.account, day, amount, rebuild=False, **kwargs)

    for i in range(n):
        for lab in (world.lab, world.other_lab):
            person = MembershipFactory(role=Role.MEMBER, lab=lab).user
            fs = FundingSourceFactory(lab=lab)
            for funding_source in (fs, world.funding_source if lab == world.lab else fs):
                allocation = AllocationFactory(funding_source=funding_source, user=person)
                for d in range(1, 11):
                    add(TODAY - dt.timedelta(days=d), "2.50", allocation=allocation)
                ResourceFactory(
                    account=spend.account, status="RUNNING", current_allocation=allocation
                )
                ResourceFactory(
                    account=spend.account,
                    status="EXITED",
                    volume_disk_gb=10,
                    current_allocation=allocation,
                )
                ResourceFactory(
                    account=spend.account,
                    kind="network_volume",
                    status="AVAILABLE",
                    size_gb=10,
                    current_allocation=allocation,
                )
        # The member gets more of their own too.
        extra = AllocationFactory(funding_source=world.funding_source, user=world.member)
        add(TODAY - dt.timedelta(days=3), "1.25", allocation=extra)
        ResourceFactory(account=spend.account, status="RUNNING", current_allocation=extra)
        add(TODAY - dt.timedelta(days=i % 10 + 1), "0.75")
        add(TODAY - dt.timedelta(days=40 + i), "3.00", allocation=world.allocation)
    rebuild_summed(spend.account, days)
    assert_derived_rollups_match()  # the pages read them: as one rebuild per row would leave them


def count_queries(client, url: str, **extra) -> tuple[int, object]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **extra)
    assert response.status_code == 200, response.content[:500]
    return len(ctx.captured_queries), response
