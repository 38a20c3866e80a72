"""settings.CELERY_BEAT_SCHEDULE run in-process, for the embedded mode (no broker): under
`make run` the accounts sync every LABGOV_SYNC_INTERVAL_MINUTES and alerts are evaluated daily
without Redis or a beat process, from the one schedule beat would read.

`EmbeddedScheduler.tick(now)` runs what is due at `now` and says what it ran; the
`run_schedule` command calls it every few seconds. Interval entries run at the first tick and
then every interval; crontab entries at their next time after the start (missed runs are not
caught up, as with beat). Everything is UTC, as CELERY_TIMEZONE is.
"""

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from celery.schedules import crontab
from django.utils.module_loading import import_string

log = logging.getLogger(__name__)
UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)


def run_task(name: str, args: tuple, kwargs: dict) -> None:
    """Run a Celery task here and now (its name is its dotted path), as beat's worker would."""
    import_string(name).apply(args=args, kwargs=kwargs, throw=True)


def next_cron(schedule: crontab, after: dt.datetime) -> dt.datetime:
    """The first minute strictly after `after` that `schedule` names (UTC)."""
    t = after.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
    limit = t + dt.timedelta(days=366 * 5)
    while t < limit:
        if (
            t.month not in schedule.month_of_year
            or t.day not in schedule.day_of_month
            or t.isoweekday() % 7 not in schedule.day_of_week  # crontab: 0 is Sunday
        ):
            t = t.replace(hour=0, minute=0) + dt.timedelta(days=1)
        elif t.hour not in schedule.hour:
            t = t.replace(minute=0) + dt.timedelta(hours=1)
        elif t.minute not in schedule.minute:
            t += MINUTE
        else:
            return t
    raise ValueError(f"{schedule} names no time in the next five years")


@dataclass
class Entry:
    name: str
    task: str
    schedule: dt.timedelta | crontab
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    due_at: dt.datetime | None = None

    def following(self, now: dt.datetime) -> dt.datetime:
        if isinstance(self.schedule, dt.timedelta):
            return now + self.schedule
        return next_cron(self.schedule, now)


def _interval(value) -> dt.timedelta | crontab:
    if isinstance(value, crontab | dt.timedelta):
        return value
    if isinstance(value, int | float):
        return dt.timedelta(seconds=value)
    run_every = getattr(value, "run_every", None)  # celery.schedules.schedule
    if isinstance(run_every, dt.timedelta):
        return run_every
    raise ValueError(f"the embedded scheduler cannot run a {type(value).__name__} schedule")


class EmbeddedScheduler:
    def __init__(
        self,
        beat_schedule: dict,
        *,
        start: dt.datetime,
        run: Callable[[str, tuple, dict], None] | None = None,
    ):
        self._run = run or run_task
        self.entries = []
        for name, spec in beat_schedule.items():
            entry = Entry(
                name=name,
                task=spec["task"],
                schedule=_interval(spec["schedule"]),
                args=tuple(spec.get("args", ())),
                kwargs=dict(spec.get("kwargs", {})),
            )
            entry.due_at = start if isinstance(entry.schedule, dt.timedelta) else None
            if entry.due_at is None:
                entry.due_at = next_cron(entry.schedule, start - MINUTE)
            self.entries.append(entry)

    def tick(self, now: dt.datetime) -> list[str]:
        """Run every entry due at `now`, in the schedule's order; return their names. A task
        that fails is logged and does not stop the others, nor its own next run."""
        ran = []
        for entry in self.entries:
            if entry.due_at is None or now < entry.due_at:
                continue
            try:
                self._run(entry.task, entry.args, entry.kwargs)
            except Exception:
                log.exception("scheduled task %s (%s) failed", entry.name, entry.task)
            entry.due_at = entry.following(now)
            ran.append(entry.name)
        return ran

    def next_due(self) -> dt.datetime:
        return min(entry.due_at for entry in self.entries if entry.due_at is not None)
