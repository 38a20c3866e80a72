"""Slices of a sync written side by side, and what they meet: one lock order keeps them from
deadlocking (labgov/runpod/sync.py).

The PostgreSQL test runs first syncs with four writers, each in a fresh world: an institution
admin's rules paying pods billed on several days of the window, and pods billed but never
listed (terminated before the first sync), whose resources a slice creates mid-way."""

import dataclasses
import datetime as dt
from decimal import Decimal

import httpx
import pytest

from labgov.accounts.models import Role
from labgov.funding import totals
from labgov.funding.models import LedgerTotal
from labgov.runpod.client import RunpodClient
from labgov.runpod.models import (
    AccountBillingRecord,
    AttributionRule,
    BillingRecord,
    Resource,
)
from labgov.runpod.services import account_connect, rule_create
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from labgov.simulator.scenario import PodSpec, Scenario, epoch
from labgov.usage.models import DailySpend, MonthlySpend
from tests.factories import (
    AllocationFactory,
    FundingSourceFactory,
    InstitutionFactory,
    LabFactory,
    MembershipFactory,
)

DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
SYNCS = 20
GPU = "NVIDIA RTX A5000"


def _pod(pod_id: str, name: str, start: dt.datetime, end: dt.datetime | None = None) -> PodSpec:
    history = [(epoch(start), "STARTING"), (epoch(start) + 60, "RUNNING")]
    if end is not None:
        history.append((epoch(end), "TERMINATED"))
    return PodSpec(
        id=pod_id,
        name=name,
        image="runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404",
        env={},
        disk=20,
        ports=("22/tcp",),
        cloud="SECURE",
        data_center_id="US-KS-2",
        history=tuple(history),
        gpu_type_id=GPU,
        gpu_count=1,
        volume_gb=20,
    )


def _scenario(world: int, now: dt.datetime) -> Scenario:
    """The window's three days (the first sync's, settings below): two listed pods billed on
    every one, and two pods gone before the sync (so never listed), one billed on the first
    two days, one first met by the second day's slice. Ids differ per world: one Runpod
    resource may be synced by one connection only."""
    midnight = (now - 2 * DAY).replace(hour=0, minute=0, second=0, microsecond=0)
    pods = (
        _pod(f"dl{world:02d}visiona0000", "vision-a", midnight - 5 * DAY),
        _pod(f"dl{world:02d}visionb0000", "vision-b", midnight - 2 * DAY),
        _pod(f"dl{world:02d}goneb000000", "", midnight + 2 * HOUR, midnight + DAY + 3 * HOUR),
        _pod(f"dl{world:02d}gonea000000", "", midnight + DAY + HOUR, midnight + DAY + 20 * HOUR),
    )
    base = load_scenario("default")
    return dataclasses.replace(
        base,
        name=f"deadlock-{world}",
        now=now,
        gpu_types=tuple(g for g in base.gpu_types if g.id == GPU),
        templates=(),
        pods=pods,
        network_volumes=(),
        endpoints=(),
        clusters=(),
        public_endpoints=None,
    )


def _fresh_world():
    institution = InstitutionFactory()
    lab = LabFactory(institution=institution)
    admin = MembershipFactory(role=Role.INSTITUTION_ADMIN, lab=None, institution=institution).user
    source = FundingSourceFactory(lab=lab)
    named = AllocationFactory(funding_source=source)
    account_wide = AllocationFactory(funding_source=source)
    return institution, admin, named, account_wide


@pytest.fixture
def four_writers(settings):
    settings.LABGOV_SYNC_WRITERS = 4
    settings.LABGOV_SYNC_SLICE_HOURS = 24
    settings.LABGOV_SYNC_FIRST_DAYS = 2
    settings.LABGOV_AFTER_SYNC = []  # the steps after a sync are not what is tested here
    settings.LABGOV_AFTER_INVENTORY = []


def _connect(sim, institution, admin, allocation, name="Sim"):
    """A connection to the simulator whose account-wide rule, made by an institution admin,
    pays everything billed in the last month."""
    account = account_connect(
        actor=admin,
        institution=institution,
        name=name,
        api_key=sim.api_key,
        base_url=sim.base_url,
    )
    rule_create(
        actor=admin,
        account=account,
        kind=AttributionRule.Kind.ACCOUNT,
        pattern="",
        allocation=allocation,
        starts_at=sim.state.now - 30 * DAY,
    )
    return account


def _plain_http_client(sim):
    """The real client, over a transport without TLS certificates (the simulator speaks plain
    http): loading the system's certificates is a tenth of a second per sync."""

    def factory(account):
        return RunpodClient(
            base_url=sim.base_url,
            api_key=sim.api_key,
            transport=httpx.HTTPTransport(verify=False),
            sleep=lambda seconds: None,
        )

    return factory


def _spent(owner_kind: str, owner_id: int) -> Decimal:
    row = LedgerTotal.objects.filter(owner_kind=owner_kind, owner_id=owner_id).first()
    return row.spent_usd if row else Decimal(0)


def _sum(queryset, field: str) -> Decimal:
    # In Python: SQLite sums decimals as floating point.
    return sum(queryset.values_list(field, flat=True), Decimal(0))


@pytest.mark.usefixtures("postgres")
@pytest.mark.django_db(transaction=True)
def test_first_syncs_with_four_writers_never_deadlock_and_post_exact_totals(four_writers):
    moment = dt.datetime.now(dt.UTC).replace(microsecond=0)
    for world in range(SYNCS):
        institution, admin, named, account_wide = _fresh_world()
        with SimulatorServer(scenario=_scenario(world, moment), now=moment) as sim:
            account = _connect(sim, institution, admin, account_wide, name=f"Sim {world}")
            rule_create(
                actor=admin,
                account=account,
                kind=AttributionRule.Kind.NAME_PREFIX,
                pattern="vision-",
                allocation=named,
                starts_at=moment - 30 * DAY,
            )
            run = account_sync(account_id=account.pk, client_factory=_plain_http_client(sim))
        assert run.status == "succeeded", f"sync {world}: {run.error}"
        assert run.progress_total == 4  # inventory, then the window's three days side by side
        gone = [r for r in Resource.objects.filter(account=account) if r.billing_only]
        assert len(gone) == 2  # billed, never listed
        records = BillingRecord.objects.filter(resource__account=account)
        # What Runpod says the account spent, per its account-wide records, every cent paid.
        billed = _sum(AccountBillingRecord.objects.filter(account=account), "total_usd")
        assert billed > 0
        assert _sum(records, "total_usd") == billed
        assert not records.filter(allocation__isnull=True).exists()
        for allocation in (named, account_wide):
            paid = _sum(records.filter(allocation=allocation), "total_usd")
            assert paid > 0
            assert _spent("allocation", allocation.pk) == paid
        assert _spent("funding_source", named.funding_source_id) == billed
        assert _sum(DailySpend.objects.filter(account=account), "amount_usd") == billed
        assert _sum(MonthlySpend.objects.filter(account=account), "amount_usd") == billed
    assert totals.differences() == []  # `manage.py ledger_totals`: every total its entries' sum
