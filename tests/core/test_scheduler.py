"""The embedded scheduler runs CELERY_BEAT_SCHEDULE without a broker: syncs every
LABGOV_SYNC_INTERVAL_MINUTES, alerts once a day. Driven by tick(now) with chosen times, so no
test waits on the wall clock."""

import datetime as dt
from collections import Counter

import pytest
from celery.schedules import crontab
from django.conf import settings
from django.core.management import CommandError, call_command

from labgov.core.scheduler import EmbeddedScheduler, next_cron

UTC = dt.UTC
START = dt.datetime(2026, 11, 20, 4, 50, tzinfo=UTC)


class Recorder:
    def __init__(self, failing=()):
        self.calls: list[str] = []
        self.failing = set(failing)

    def __call__(self, task, args, kwargs):
        self.calls.append(task)
        if task in self.failing:
            raise RuntimeError("boom")


def _minutes(scheduler, start, minutes) -> Counter:
    ran: Counter = Counter()
    for m in range(minutes):
        ran.update(scheduler.tick(start + dt.timedelta(minutes=m)))
    return ran


def test_a_day_of_the_settings_schedule_syncs_every_interval_and_alerts_once():
    recorder = Recorder()
    scheduler = EmbeddedScheduler(settings.CELERY_BEAT_SCHEDULE, start=START, run=recorder)
    ran = _minutes(scheduler, START, 24 * 60)
    interval = settings.LABGOV_SYNC_INTERVAL_MINUTES
    assert ran["runpod-sync-all"] == 24 * 60 // interval
    assert ran["alerts-evaluate-daily"] == 1
    assert ran["notifications-digest"] == 1
    assert ran["provisioning-expire"] == 24
    assert ran["provisioning-resume"] == 24 * 60 // 5
    assert "labgov.runpod.tasks.sync_all_accounts" in recorder.calls
    assert "labgov.alerts.tasks.evaluate_all" in recorder.calls


def test_the_sync_runs_at_once_and_then_each_interval(settings):
    settings.LABGOV_SYNC_INTERVAL_MINUTES = 15
    schedule = {"sync": {"task": "t.sync", "schedule": 15 * 60}}
    scheduler = EmbeddedScheduler(schedule, start=START, run=Recorder())
    assert scheduler.tick(START) == ["sync"]
    assert scheduler.tick(START + dt.timedelta(minutes=14, seconds=59)) == []
    assert scheduler.tick(START + dt.timedelta(minutes=15)) == ["sync"]
    assert scheduler.next_due() == START + dt.timedelta(minutes=30)


def test_the_daily_alerts_run_at_their_hour_not_at_start():
    schedule = {"daily": {"task": "t.alerts", "schedule": crontab(minute=0, hour=5)}}
    scheduler = EmbeddedScheduler(schedule, start=START, run=Recorder())
    assert scheduler.tick(START) == []
    assert scheduler.tick(dt.datetime(2026, 11, 20, 4, 59, 59, tzinfo=UTC)) == []
    assert scheduler.tick(dt.datetime(2026, 11, 20, 5, 0, 3, tzinfo=UTC)) == ["daily"]
    assert scheduler.tick(dt.datetime(2026, 11, 20, 5, 0, 8, tzinfo=UTC)) == []
    assert scheduler.next_due() == dt.datetime(2026, 11, 21, 5, 0, tzinfo=UTC)


def test_a_failing_task_stops_neither_the_others_nor_its_next_run(caplog):
    schedule = {
        "bad": {"task": "t.bad", "schedule": 60},
        "good": {"task": "t.good", "schedule": 60},
    }
    recorder = Recorder(failing={"t.bad"})
    scheduler = EmbeddedScheduler(schedule, start=START, run=recorder)
    assert scheduler.tick(START) == ["bad", "good"]
    assert scheduler.tick(START + dt.timedelta(minutes=1)) == ["bad", "good"]
    assert "scheduled task bad (t.bad) failed" in caplog.text


def test_next_cron():
    assert next_cron(crontab(minute=0, hour=7), dt.datetime(2026, 11, 20, 7, 0, tzinfo=UTC)) == (
        dt.datetime(2026, 11, 21, 7, 0, tzinfo=UTC)
    )
    mondays = crontab(minute=30, hour=2, day_of_week=1)  # 2026-11-20 is a Friday
    assert next_cron(mondays, dt.datetime(2026, 11, 20, 12, 0, tzinfo=UTC)) == (
        dt.datetime(2026, 11, 23, 2, 30, tzinfo=UTC)
    )


def test_a_tick_syncs_every_account_for_real(world, sim, sim_account, at_sim_now):
    """The settings' own sync entry, run in-process, with no broker: the account syncs."""
    from labgov.runpod.models import SyncRun

    schedule = {"runpod-sync-all": settings.CELERY_BEAT_SCHEDULE["runpod-sync-all"]}
    scheduler = EmbeddedScheduler(schedule, start=at_sim_now)
    assert scheduler.tick(at_sim_now) == ["runpod-sync-all"]
    run = SyncRun.objects.get(account=sim_account)
    assert run.trigger == SyncRun.Trigger.SCHEDULE
    assert run.status == SyncRun.Status.SUCCEEDED, run.error


def test_the_command_refuses_when_a_broker_is_configured(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    with pytest.raises(CommandError, match="run celery beat"):
        call_command("run_schedule", "--once")


def test_the_command_runs_what_is_due_once(db, monkeypatch, capsys):
    import labgov.core.scheduler as scheduler_module

    calls = []
    monkeypatch.setattr(scheduler_module, "run_task", lambda *a: calls.append(a[0]))
    call_command("run_schedule", "--once")
    assert "labgov.runpod.tasks.sync_all_accounts" in calls
    assert "ran runpod-sync-all" in capsys.readouterr().out
