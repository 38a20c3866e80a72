"""A sync that loses its process or its database half-way: the next sync completes the work,
and no billing hour is lost or counted twice (PostgreSQL, a real worker on Redis)."""

import datetime as dt
import time

import psycopg
import pytest
from django.db import connection

from labgov.accounts.models import Role
from labgov.runpod import sync as sync_module
from labgov.runpod.models import RunpodAccount, SyncRun
from labgov.runpod.removal import account_removal_request, account_remove
from labgov.runpod.services import account_connect
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import MembershipFactory
from tests.runpod.test_sync_parallel import _totals, _unattributed

pytestmark = [pytest.mark.usefixtures("postgres"), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def wall_sim():
    """The simulator's history ending now, its clock then standing still: the worker process
    cannot share a test's time travel, and a moving clock would bill more between syncs."""
    moment = dt.datetime.now(dt.UTC).replace(microsecond=0)
    scenario = load_scenario("default").anchored(moment)
    with SimulatorServer(scenario=scenario, now=moment) as server:
        yield server


@pytest.fixture
def fast_clients(wall_sim):
    """The real client to the wall-clock simulator, never really waiting between retries."""
    from labgov.runpod.client import RunpodClient

    def factory(account):
        return RunpodClient(
            base_url=wall_sim.base_url,
            api_key=wall_sim.api_key,
            sleep=lambda seconds: None,
            max_attempts=4,
            deadline_s=30,
        )

    return factory


def _connect(world, sim, name="Sim"):
    return account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name=name,
        api_key=sim.api_key,
        base_url=sim.base_url,
    )


def _reference(world, sim, fast_clients) -> dict:
    """What a sync nothing interrupts holds; its connection is then removed (two admins), as
    one Runpod account may be connected once."""
    account = _connect(world, sim, "Reference")
    run = account_sync(account_id=account.pk, client_factory=fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    totals = _totals(account)
    second = MembershipFactory(role=Role.INSTITUTION_ADMIN, lab=None, institution=world.institution)
    account_removal_request(actor=world.inst_admin, account=account)
    account_remove(actor=second.user, account=account)
    return totals


def _terminate_backend(pid: int) -> None:
    """What a PostgreSQL restart does to a client, without restarting the shared server."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]


def test_a_sync_whose_database_connection_dies_fails_in_words_and_the_next_succeeds(
    wall_sim, world, fast_clients, monkeypatch
):
    reference = _reference(world, wall_sim, fast_clients)
    account = _connect(world, wall_sim)
    real_write = sync_module._slice_write
    written = []

    def write_then_lose_the_database(account, payload):
        if len(written) == 1:  # the second slice of billing
            _terminate_backend(connection.connection.info.backend_pid)
        written.append(1)
        return real_write(account, payload)

    monkeypatch.setattr(sync_module, "_slice_write", write_then_lose_the_database)
    run = account_sync(account_id=account.pk, client_factory=fast_clients)
    assert run.status == SyncRun.Status.FAILED
    assert run.error.startswith("The connection to the database was lost during the sync (")
    assert "next sync fetches the rest" in run.error
    assert RunpodAccount.objects.get(pk=account.pk).sync_locked_until is None  # released
    # The slice written before the database went is whole: its resources' unattributed
    # spend is what their records say, with no step after the last slice to put it right.
    assert any(_unattributed(account).values())
    monkeypatch.undo()

    again = account_sync(account_id=account.pk, client_factory=fast_clients)
    assert again.status == SyncRun.Status.SUCCEEDED, again.error
    assert reference["count"] > 0
    assert _totals(account) == reference


@pytest.mark.celery_worker
def test_a_worker_killed_mid_sync_loses_nothing_and_counts_nothing_twice(
    wall_sim, world, fast_clients, worker_process
):
    reference = _reference(world, wall_sim, fast_clients)
    account = _connect(world, wall_sim)
    # Each billing request takes a while, so the kill lands in the middle of the billing.
    wall_sim.inject_fault(path_prefix="/v2/billing", kind="slow", delay=0.3, times=None)
    worker_process.send("labgov.runpod.tasks.sync_account", account.pk)
    deadline = time.monotonic() + 60
    while not SyncRun.objects.filter(
        account=account, phase="billing", progress_done__gte=2
    ).exists():
        assert time.monotonic() < deadline, worker_process.tail()
        time.sleep(0.05)
    worker_process.kill_child()
    killed = SyncRun.objects.get(account=account)
    assert killed.status == SyncRun.Status.RUNNING
    # acks_late + reject_on_worker_lost: the task goes back to the queue and runs again at
    # once, finds the dead run's lock still held and steps aside, in words.
    while SyncRun.objects.filter(account=account).count() < 2:
        assert time.monotonic() < deadline, worker_process.tail()
        time.sleep(0.05)
    redelivered = SyncRun.objects.filter(account=account).order_by("pk").last()
    while redelivered.status == SyncRun.Status.RUNNING:
        assert time.monotonic() < deadline, worker_process.tail()
        time.sleep(0.05)
        redelivered.refresh_from_db()
    assert redelivered.status == SyncRun.Status.SKIPPED
    wall_sim.clear_faults()

    # The next scheduled sync after the lock has run out (LABGOV_SYNC_LOCK_SECONDS).
    RunpodAccount.objects.filter(pk=account.pk).update(sync_locked_until="2000-01-01T00:00Z")
    run = account_sync(account_id=account.pk, client_factory=fast_clients)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert _totals(account) == reference
    killed.refresh_from_db()
    assert killed.status == SyncRun.Status.FAILED
    assert killed.error.startswith("The worker running this sync stopped before it finished")
