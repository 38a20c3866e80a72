"""Celery tasks (and the commands that run the same services) retire only the pages of the
institution they write for: a sync task of B's account, and the alert and retention
evaluations it queues, keep A's cached pages; A's retire them. A task starts with no scope of
its own, even run eagerly inside a person's request; one that writes every institution's rows
(the samples' pruning) retires every page; a periodic job's conditional UPDATE that finds
nothing to change retires none."""

import datetime as dt

import pytest
import time_machine
from django.db import connection

from labgov.alerts.models import Alert
from labgov.core import dataversion
from labgov.notifications.models import Notification
from labgov.runpod.services import account_connect
from labgov.simulator import SimulatorServer, load_scenario
from tests.dashboard.test_page_cache_scope import (
    INSTITUTION,
    ME,
    _client,
    _elsewhere,
    _state,
    _warm,
)
from tests.factories import ResourceFactory


def _sync_task(account_id: int) -> None:
    """The sync task as a worker runs it (eagerly here: signals, the task's own scope), and
    the evaluations its after-sync steps queue for its institution."""
    from labgov.alerts.tasks import evaluate_institution as alerts_of
    from labgov.retention.tasks import evaluate_institution as retention_of
    from labgov.runpod.models import RunpodAccount, SyncRun
    from labgov.runpod.tasks import sync_account

    run = SyncRun.objects.get(pk=sync_account.delay(account_id).get())
    assert run.status == "succeeded", run.error
    institution_id = RunpodAccount.objects.get(pk=account_id).institution_id
    alerts_of.delay(institution_id).get()
    retention_of.delay(institution_id).get()


def test_a_sync_task_of_another_institution_keeps_this_ones_pages(world, sim, sim_account):
    with time_machine.travel(sim.state.now, tick=False):
        # The same Runpod account connected in B too (under another name of its host, while
        # A's connection rests): the sync of either writes that institution's records only.
        sim_account.is_active = False
        sim_account.save(update_fields=["is_active"])
        theirs = account_connect(
            actor=world.outsider,
            institution=_elsewhere(world),
            name="B's Runpod",
            api_key=sim.api_key,
            write_key=sim.api_key,
            base_url=sim.base_url.replace("127.0.0.1", "localhost"),
        )
        ours, others = _client(world.finance), _client(world.outsider)
        _warm(ours, INSTITUTION)
        _warm(others, INSTITUTION)

        _sync_task(theirs.pk)
        # B's sync wrote its records and its evaluation opened B's alerts: B's page is
        # computed again, A's is served from the cache.
        assert Alert.objects.filter(institution_id=theirs.institution_id).exists()
        assert _state(ours, INSTITUTION) == "hit"
        assert _state(others, INSTITUTION) == "miss"
        assert _state(others, INSTITUTION) == "hit"

        # A's own connection (another Runpod account, with nothing on it yet): its sync
        # task writes A's rows (its run, its empty slices) and retires A's pages alone.
        with SimulatorServer(scenario=load_scenario("empty")) as empty:
            ours_too = account_connect(
                actor=world.inst_admin,
                institution=world.institution,
                name="A's second Runpod",
                api_key=empty.api_key,
                base_url=empty.base_url,
            )
            _warm(ours, INSTITUTION)
            _warm(others, INSTITUTION)
            _sync_task(ours_too.pk)
        assert _state(ours, INSTITUTION) == "miss"
        assert _state(others, INSTITUTION) == "hit"


def _both_warm(world):
    member, outsider = _client(world.member), _client(world.outsider)
    _warm(member, ME)
    _warm(outsider, INSTITUTION)
    return member, outsider


def _sample(world, at):
    from labgov.utilization.models import Sample

    pod = ResourceFactory(kind="pod", status="RUNNING", account__institution=world.institution)
    return Sample.objects.create(
        resource=pod, at=at, gpus=1, util_sum=0, util_max=0, mem_sum=0, mem_max=0, busy_gpus=0
    )


def test_a_task_writing_every_institutions_rows_retires_every_page_even_inside_a_request(
    world, spend, settings
):
    """The pruning of samples deletes rows of every institution: no single one's. Run eagerly
    inside a person of A's request, it does not take on that person's scope."""
    from labgov.utilization.tasks import prune_samples

    _sample(
        world, dt.datetime.now(dt.UTC) - dt.timedelta(days=settings.LABGOV_UTILIZATION_RAW_DAYS + 1)
    )
    member, outsider = _both_warm(world)
    with dataversion.scope([world.institution.pk]):  # as WriteScopeMiddleware sets it
        assert prune_samples.delay().get() == 1
    assert _state(member, ME) == "miss"
    assert _state(outsider, INSTITUTION) == "miss"


def test_a_periodic_update_that_changes_nothing_retires_no_page(world, spend):
    """Every 15 minutes the sweep of unconfirmed emails runs two conditional UPDATEs; on most
    runs they find nothing, and nothing changed means no page to retire. When one is marked,
    every page is (the sweep names no institution)."""
    from labgov.notifications.services import UNCONFIRMED_AFTER
    from labgov.notifications.tasks import mark_unconfirmed_emails

    member, outsider = _both_warm(world)
    assert mark_unconfirmed_emails.delay().get() == 0
    assert _state(member, ME) == "hit"
    assert _state(outsider, INSTITUTION) == "hit"

    Notification.objects.create(
        recipient=world.member,
        kind="test",
        subject="s",
        dedupe_key="claimed",
        emailed_at=dt.datetime.now(dt.UTC) - UNCONFIRMED_AFTER - dt.timedelta(minutes=1),
        email_claim="a-dead-worker",
    )
    member, outsider = _both_warm(world)
    assert mark_unconfirmed_emails.delay().get() == 1
    assert _state(member, ME) == "miss"
    assert _state(outsider, INSTITUTION) == "miss"


@pytest.mark.parametrize(
    ("sql", "noticed"),
    [
        ('UPDATE "funding_allocation" SET "cap_usd" = 1 WHERE "id" = -1', False),
        ('DELETE FROM "usage_dailyspend" WHERE "id" = -1', False),
        ('UPDATE "funding_allocation" SET "cap_usd" = "cap_usd" WHERE "id" = %s', True),
        # A WITH's inner writes and RETURNING rows are not in the count: always writes.
        (
            'WITH x AS (UPDATE "funding_allocation" SET "cap_usd" = "cap_usd" WHERE "id" = %s '
            'RETURNING "id") SELECT 1 WHERE false',
            True,
        ),
        ('UPDATE "funding_allocation" SET "cap_usd" = 1 WHERE "id" = -1 RETURNING "id"', True),
    ],
)
def test_which_statements_count_as_writes(world, sql, noticed):
    connection._labgov_wrote = False
    with connection.cursor() as cursor:
        cursor.execute(sql, [world.allocation.pk] if "%s" in sql else None)
    assert dataversion.has_own_writes() is noticed
