"""The sync task through a real Celery worker consuming from Redis."""

import os
import time
import uuid

import pytest
import time_machine

from labgov.runpod.models import SyncRun

REDIS_URL = os.environ.get("LABGOV_TEST_REDIS_URL")
REQUIRE = os.environ.get("LABGOV_REQUIRE_SERVICES") == "1"


@pytest.fixture
def redis_worker():
    """A Celery app of the test's own on Redis, with labgov's shared tasks, and a worker
    thread consuming a queue no other run uses. (labgov's own app runs tasks in-process in
    tests, and Celery fixes an app's broker when it is first used, so it cannot be switched.)"""
    if not REDIS_URL:
        if REQUIRE:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but LABGOV_TEST_REDIS_URL is not set")
        pytest.skip("needs Redis (make test sets LABGOV_TEST_REDIS_URL when it answers)")
    from celery import Celery
    from celery.contrib.testing.worker import start_worker

    import labgov.runpod.tasks  # noqa: F401 - registers the shared tasks on every app

    app = Celery("labgov-test-worker", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False, result_backend=None)
    queue = f"labgov-test-{uuid.uuid4().hex}"
    try:
        with start_worker(
            app, pool="solo", perform_ping_check=False, shutdown_timeout=20, queues=[queue]
        ):
            yield app, queue
    finally:
        # start_worker makes its app the current and default one for the whole process and
        # leaves it so: every later test's shared task (.delay) would go to this app's Redis
        # queue instead of running in-process (a sync's alert evaluation never ran).
        from labgov.celery import app as labgov_app

        labgov_app.set_current()
        labgov_app.set_default()


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_sync_task_runs_in_a_real_worker(sim, world, redis_worker):
    from labgov.runpod.services import account_connect

    app, queue = redis_worker
    account = account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name="Sim",
        api_key=sim.api_key,
        base_url=sim.base_url,
    )
    run = None
    with time_machine.travel(sim.state.now, tick=True):
        # Sent by name over Redis, as Celery beat and the web process do.
        app.send_task(
            "labgov.runpod.tasks.sync_account",
            args=[account.pk, SyncRun.Trigger.MANUAL],
            queue=queue,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            run = SyncRun.objects.filter(account=account).first()
            if run is not None and run.status != SyncRun.Status.RUNNING:
                break
            time.sleep(0.2)
    assert run is not None, "the worker never picked the task up"
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert run.trigger == SyncRun.Trigger.MANUAL
    assert run.counts["records"] > 0


@pytest.mark.celery_worker
def test_after_a_real_worker_the_shared_tasks_run_on_labgovs_app_again():
    """start_worker left its app current: every later test's .delay went to its Redis queue."""
    from celery import current_app

    from labgov.celery import app as labgov_app

    fixture = redis_worker.__wrapped__()  # the fixture's generator, driven by hand
    app, _ = next(fixture)
    assert current_app.main == app.main  # what start_worker does
    with pytest.raises(StopIteration):
        next(fixture)
    assert current_app.main == labgov_app.main
