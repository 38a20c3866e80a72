"""The sync task through a real Celery worker consuming from Redis."""

import os
import time

import pytest
import time_machine

from labgov.runpod.models import SyncRun

REDIS_URL = os.environ.get("LABGOV_TEST_REDIS_URL")
REQUIRE = os.environ.get("LABGOV_REQUIRE_SERVICES") == "1"


@pytest.fixture
def redis_worker(settings):
    if not REDIS_URL:
        if REQUIRE:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but LABGOV_TEST_REDIS_URL is not set")
        pytest.skip("needs Redis (make test sets LABGOV_TEST_REDIS_URL when it answers)")
    from celery.contrib.testing.worker import start_worker

    from labgov.celery import app

    saved = {k: app.conf[k] for k in ("broker_url", "task_always_eager", "result_backend")}
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False, result_backend=None)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
            yield app
    finally:
        app.conf.update(saved)


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_sync_task_runs_in_a_real_worker(sim, world, redis_worker):
    from labgov.runpod.services import account_connect
    from labgov.runpod.tasks import sync_account

    account = account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name="Sim",
        api_key=sim.api_key,
        base_url=sim.base_url,
    )
    with time_machine.travel(sim.state.now, tick=True):
        sync_account.delay(account.pk, SyncRun.Trigger.MANUAL)
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
