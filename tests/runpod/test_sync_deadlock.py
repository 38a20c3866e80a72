"""Slices of a sync written side by side, and what they meet: one lock order keeps them from
deadlocking (labgov/runpod/sync.py); a slice that meets a deadlock or a serialization failure
anyway is written again whole, and one that keeps meeting it fails the sync saying which.

The PostgreSQL tests run first syncs with four writers, each in a fresh world: an institution
admin's rules paying pods billed on several days of the window, and pods billed but never
listed (terminated before the first sync), whose resources a slice creates mid-way."""

import dataclasses
import datetime as dt
import threading
from decimal import Decimal

import httpx
import psycopg
import pytest
from django.db import OperationalError, connection, transaction
from django.db.models import Count

from labgov.accounts.models import Role
from labgov.funding import totals
from labgov.funding.models import LedgerEntry, LedgerTotal
from labgov.runpod import billing_store, providers
from labgov.runpod import sync as sync_module
from labgov.runpod.client import RunpodClient
from labgov.runpod.models import (
    AccountBillingRecord,
    AttributionRule,
    BillingRecord,
    Resource,
    RunpodAccount,
    SyncRun,
)
from labgov.runpod.services import account_connect, rule_create
from labgov.runpod.sync import SLICE_ATTEMPTS, account_sync, contention
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


@pytest.fixture
def small_sim():
    moment = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with SimulatorServer(scenario=_scenario(0, moment), now=moment) as server:
        yield server


@pytest.fixture
def no_pause(monkeypatch):
    pauses = []
    monkeypatch.setattr(sync_module, "_pause_before_retry", pauses.append)
    return pauses


def _django_wrapped(error: Exception) -> Exception:
    """The error as Django's cursor raises it: an OperationalError whose cause is psycopg's
    (on SQLite, psycopg's own, as the PostgreSQL bulk writer raises it)."""
    try:
        with connection.wrap_database_errors:
            raise error
    except Exception as wrapped:  # noqa: BLE001 - whichever Django made of it
        return wrapped
    raise AssertionError("not raised")


def test_a_slice_that_meets_a_deadlock_is_written_again_whole(
    small_sim, world, no_pause, monkeypatch
):
    account = _connect(small_sim, world.institution, world.inst_admin, world.allocation)
    today = small_sim.state.now.date()
    writes, failed = [], []
    real_write, real_rebuild = billing_store.write_slice, providers.rollups_rebuild

    def counted_write(*, account, payload):
        writes.append(payload.start)
        return real_write(account=account, payload=payload)

    def deadlocked_twice(*, account, days, sums=None):
        # The last slice's records and ledger usage are written by now: they must go back.
        real_rebuild(account=account, days=days, sums=sums)
        if today in days and len(failed) < 2:
            failed.append(today)
            raise _django_wrapped(psycopg.errors.DeadlockDetected("deadlock detected"))

    monkeypatch.setattr(billing_store, "write_slice", counted_write)
    monkeypatch.setattr(providers, "rollups_rebuild", deadlocked_twice)
    run = account_sync(account_id=account.pk, client_factory=_plain_http_client(small_sim))

    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert run.counts["slice_retries"] == 2
    assert no_pause == [1, 2]  # a pause after each failed attempt
    assert writes.count(writes[-1]) == 3  # the last slice, from its records on, three times
    assert len(writes) == len(set(writes)) + 2
    records = BillingRecord.objects.filter(resource__account=account)
    billed = _sum(records, "total_usd")
    assert billed > 0
    usage = LedgerEntry.objects.filter(source=f"runpod-account:{account.pk}")
    assert _sum(usage, "amount_usd") == billed
    # One entry per day paid: the attempts rolled back left none behind.
    assert usage.count() == run.counts["ledger_entries"]
    assert not usage.values("occurred_at").annotate(n=Count("id")).filter(n__gt=1).exists()
    assert _sum(DailySpend.objects.filter(account=account), "amount_usd") == billed
    assert _sum(MonthlySpend.objects.filter(account=account), "amount_usd") == billed


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (psycopg.errors.DeadlockDetected("deadlock detected"), "deadlock"),
        (
            psycopg.errors.SerializationFailure("could not serialize access"),
            "serialization failure",
        ),
    ],
)
@pytest.mark.parametrize("wrapped", [True, False], ids=["django", "psycopg"])
def test_a_slice_that_keeps_meeting_it_fails_the_sync_saying_so(
    small_sim, world, no_pause, monkeypatch, error, words, wrapped
):
    account = _connect(small_sim, world.institution, world.inst_admin, world.allocation)
    attempts = []

    def contended(*, account, payload):
        attempts.append(payload.start)
        raise _django_wrapped(error) if wrapped else error

    monkeypatch.setattr(billing_store, "write_slice", contended)
    run = account_sync(account_id=account.pk, client_factory=_plain_http_client(small_sim))

    assert run.status == SyncRun.Status.FAILED
    assert len(attempts) == SLICE_ATTEMPTS  # the first slice, then the sync gave up
    assert run.error.startswith(f"The sync met a {words} in the database while writing billing")
    assert f"{SLICE_ATTEMPTS} times in a row" in run.error
    assert "next sync fetches the rest" in run.error
    assert "connection to the database was lost" not in run.error
    assert RunpodAccount.objects.get(pk=account.pk).sync_locked_until is None  # released
    assert not BillingRecord.objects.filter(resource__account=account).exists()

    monkeypatch.undo()
    again = account_sync(account_id=account.pk, client_factory=_plain_http_client(small_sim))
    assert again.status == SyncRun.Status.SUCCEEDED, again.error


def test_a_deadlock_outside_a_slice_is_named_too(small_sim, world, monkeypatch):
    account = _connect(small_sim, world.institution, world.inst_admin, world.allocation)

    def deadlocked(**kwargs):
        raise _django_wrapped(psycopg.errors.DeadlockDetected("deadlock detected"))

    monkeypatch.setattr(sync_module, "rules_apply", deadlocked)
    run = account_sync(account_id=account.pk, client_factory=_plain_http_client(small_sim))
    assert run.status == SyncRun.Status.FAILED
    assert run.error.startswith("The sync met a deadlock in the database: PostgreSQL ended")


@pytest.mark.usefixtures("postgres")
def test_a_real_deadlock_is_told_apart_from_a_lost_connection():
    """Two connections (each thread its own) taking two locks in opposite order: PostgreSQL
    ends one (soon: the suite's user may shorten deadlock_timeout), and what Django raises
    there is named a deadlock."""
    barrier = threading.Barrier(2, timeout=10)
    errors: list[Exception] = []

    def take(first: int, second: int) -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL deadlock_timeout = '100ms'")
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [first])
                barrier.wait()
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [second])
        except OperationalError as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=take, args=pair) for pair in [(71, 72), (72, 71)]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(errors) == 1
    assert contention(errors[0]) == "deadlock"
    assert contention(OperationalError("server closed the connection unexpectedly")) is None


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
        assert run.counts["slice_retries"] == 0, f"sync {world} needed a retry"
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
