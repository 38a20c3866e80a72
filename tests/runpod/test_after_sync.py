"""What runs after a sync is composed in settings.LABGOV_AFTER_SYNC: the steps run in order
with the finished run, whether it succeeded or failed, and one step's failure stops none of
the others."""

import datetime as dt

import pytest

from labgov.runpod.client import RunpodClient
from labgov.runpod.errors import RunpodError
from labgov.runpod.models import SyncRun
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import RunpodAccountFactory

KEY = "sim-key-after"
HERE = "tests.runpod.test_after_sync"
seen: list[tuple[str, str]] = []


def first_step(*, run):
    seen.append(("first", run.status))
    return {"first_counted": 3}


def second_step(*, run):
    seen.append(("second", run.status))


def broken_step(*, run):
    seen.append(("broken", run.status))
    raise ValueError("a consumer's bug")


@pytest.fixture(autouse=True)
def _clear():
    seen.clear()


@pytest.fixture
def empty_sim():
    with SimulatorServer(scenario=load_scenario("empty"), api_key=KEY) as server:
        yield server


def _sync(world, sim, factory=None) -> SyncRun:
    account = RunpodAccountFactory(institution=world.institution, base_url=sim.base_url)
    return account_sync(
        account_id=account.pk,
        start=sim.state.now - dt.timedelta(hours=2),
        end=sim.state.now,
        client_factory=factory
        or (lambda a: RunpodClient(base_url=sim.base_url, api_key=KEY, sleep=lambda s: None)),
    )


def test_steps_run_in_order_and_their_counts_join_the_run(world, empty_sim, settings):
    settings.LABGOV_AFTER_SYNC = [f"{HERE}.first_step", f"{HERE}.second_step"]
    run = _sync(world, empty_sim)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert seen == [("first", "succeeded"), ("second", "succeeded")]
    run.refresh_from_db()
    assert run.counts["first_counted"] == 3
    assert "records" in run.counts  # the sync's own counts are kept


def test_each_steps_seconds_are_kept_under_its_own_name(world, empty_sim, monkeypatch):
    """Alerts' and retention's steps are both `evaluation_after_sync`: each keeps its time."""
    import labgov.alerts.tasks as alert_tasks
    import labgov.retention.tasks as retention_tasks

    for tasks in (alert_tasks, retention_tasks):
        monkeypatch.setattr(tasks.evaluate_institution, "delay", lambda institution_id: None)
    run = _sync(world, empty_sim)
    run.refresh_from_db()
    assert {k for k in run.counts["seconds"] if k.startswith("after:")} == {
        "after:provisioning.services.commitments.commitments_after_sync",
        "after:alerts.tasks.evaluation_after_sync",
        "after:retention.tasks.evaluation_after_sync",
    }


def test_a_failed_sync_runs_the_steps_too(world, empty_sim, settings):
    settings.LABGOV_AFTER_SYNC = [f"{HERE}.second_step"]

    def unreachable(account):
        raise RunpodError("Could not reach Runpod.")

    run = _sync(world, empty_sim, unreachable)
    assert run.status == SyncRun.Status.FAILED
    assert seen == [("second", "failed")]


def test_a_failing_step_stops_none_of_the_others_and_is_raised(world, empty_sim, settings):
    settings.LABGOV_AFTER_SYNC = [f"{HERE}.broken_step", f"{HERE}.second_step"]
    with pytest.raises(ValueError, match="a consumer's bug"):
        _sync(world, empty_sim)
    assert seen == [("broken", "succeeded"), ("second", "succeeded")]
    run = SyncRun.objects.get()
    assert run.status == SyncRun.Status.SUCCEEDED  # the synced data stands
    assert run.counts["after_sync_failed"] == [f"{HERE}.broken_step"]


def test_the_default_steps_reconcile_commitments_and_queue_alerts(
    world, empty_sim, monkeypatch, django_capture_on_commit_callbacks
):
    import labgov.alerts.tasks as alert_tasks

    queued = []
    monkeypatch.setattr(alert_tasks.evaluate_institution, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        run = _sync(world, empty_sim)
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert run.counts["commitments_released"] == 0
    assert queued == [world.institution.pk]
