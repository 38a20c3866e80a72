"""Reading utilization: which running pods are idle and since when, and what a pod's GPUs did
over a span (for right-sizing). Every read is an index range on (pod, time): the cost grows with
the pods asked about and the span, never with the history held.
"""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from functools import reduce
from operator import or_

from django.conf import settings
from django.db.models import Count, F, Max, Min, Q, Sum

from labgov.utilization.models import Hour, Sample


@dataclass(frozen=True)
class Thresholds:
    """A pod is idle while its GPUs' mean utilization and mean memory utilization are both
    below these percentages; "running idle" once that has lasted `grace`."""

    gpu_util: int
    memory_util: int
    grace: dt.timedelta

    def idle(self, gpus: int, util_sum: int, mem_sum: int) -> bool:
        # mean < threshold, in whole numbers: sum < threshold × readings
        return util_sum < self.gpu_util * gpus and mem_sum < self.memory_util * gpus

    def busy_q(self) -> Q:
        return Q(util_sum__gte=F("gpus") * self.gpu_util) | Q(
            mem_sum__gte=F("gpus") * self.memory_util
        )


@dataclass
class IdleState:
    resource_id: int
    idle_since: dt.datetime
    # True when no reading held showed work and older ones were pruned: idle since at least
    # then.
    since_bound: bool
    last_sample_at: dt.datetime
    recent: list[tuple[dt.datetime, float, float]] = field(default_factory=list)

    def idle_for(self, now: dt.datetime) -> dt.timedelta:
        return now - self.idle_since


def stale_after() -> dt.timedelta:
    """A pod whose latest sample is older than this is not judged (the poll or the sync
    stopped reaching it): three polls, and never less than one sync interval."""
    minutes = max(
        3 * settings.LABGOV_UTILIZATION_POLL_MINUTES, settings.LABGOV_SYNC_INTERVAL_MINUTES
    )
    return dt.timedelta(minutes=minutes + 1)


def idle_pods(
    *,
    pods: dict[int, tuple[Thresholds, dt.datetime | None]],
    now: dt.datetime,
    known: dict[int, dt.datetime] | None = None,
) -> dict[int, IdleState]:
    """Of `pods` (resource id → its thresholds and when its current run started), those whose
    every sample over the grace period was idle and whose idle run has lasted the grace period.

    `known` gives the idle start already worked out for some (a standing alert's facts), so
    only newly idle pods read back further than the grace period."""
    if not pods:
        return {}
    known = known or {}
    fresh_from = now - stale_after()
    # Per pod, in one aggregate per set of thresholds: its latest sample, and how many of its
    # samples over the grace period there are and how many of them show work.
    by_thresholds = defaultdict(list)
    for rid, (thresholds, _) in pods.items():
        by_thresholds[thresholds].append(rid)
    candidates: dict[int, dt.datetime] = {}
    for thresholds, ids in by_thresholds.items():
        since = now - thresholds.grace
        window = Q(at__gte=since)
        rows = (
            Sample.objects.filter(resource_id__in=ids, at__gte=min(since, fresh_from), at__lte=now)
            .values("resource_id")
            .annotate(
                last=Max("at"),
                n=Count("at", filter=window),
                busy=Count("at", filter=window & thresholds.busy_q()),
            )
            .values_list("resource_id", "last", "n", "busy")
        )
        candidates.update(
            {rid: last for rid, last, n, busy in rows if last >= fresh_from and n and not busy}
        )
    starts = _idle_starts({rid: pods[rid] for rid in candidates if rid not in known}, now)
    recent = defaultdict(list)
    for rid, at, gpus, util, mem in (
        Sample.objects.filter(resource_id__in=list(candidates), at__gte=fresh_from, at__lte=now)
        .order_by("resource_id", "at")
        .values_list("resource_id", "at", "gpus", "util_sum", "mem_sum")
    ):
        recent[rid].append((at, util / gpus, mem / gpus))
    found = {}
    for rid, last in candidates.items():
        thresholds, started = pods[rid]
        if rid in known:
            since, bound = known[rid], False
        else:
            since, bound = starts[rid]
        if started is not None and since < started:
            since, bound = started, False
        if now - since < thresholds.grace:
            continue
        found[rid] = IdleState(
            resource_id=rid,
            idle_since=since,
            since_bound=bound,
            last_sample_at=last,
            recent=recent[rid],
        )
    return found


def _idle_starts(pods, now) -> dict[int, tuple[dt.datetime, bool]]:
    """Resource id → (first idle sample after its last busy one within the raw window, or its
    first sample in the window when none was busy; whether that is only a bound)."""
    if not pods:
        return {}
    raw_from = now - dt.timedelta(days=settings.LABGOV_UTILIZATION_RAW_DAYS)
    by_thresholds = defaultdict(list)
    for rid, (thresholds, _) in pods.items():
        by_thresholds[(thresholds.gpu_util, thresholds.memory_util)].append(rid)
    last_busy = {}
    for (gpu, mem), ids in by_thresholds.items():
        t = Thresholds(gpu, mem, dt.timedelta(0))
        last_busy.update(
            Sample.objects.filter(resource_id__in=ids, at__gte=raw_from)
            .filter(t.busy_q())
            .values("resource_id")
            .annotate(last=Max("at"))
            .values_list("resource_id", "last")
        )
    starts = {}
    never_busy = [rid for rid in pods if rid not in last_busy]
    if never_busy:
        firsts = dict(
            Sample.objects.filter(resource_id__in=never_busy, at__gte=raw_from)
            .values("resource_id")
            .annotate(first=Min("at"))
            .values_list("resource_id", "first")
        )
        for rid in never_busy:
            # Only a bound when older samples may have been pruned; otherwise it is the first
            # reading labgov took of this pod.
            starts[rid] = (firsts[rid], firsts[rid] <= raw_from + stale_after())
    # The first sample after each pod's last busy one, for all of them in one query (a
    # cluster's pods are judged together: one query per pod would grow with the cluster).
    first_idle = (
        dict(
            Sample.objects.filter(
                reduce(or_, (Q(resource_id=r, at__gt=at) for r, at in last_busy.items()))
            )
            .values("resource_id")
            .annotate(first=Min("at"))
            .values_list("resource_id", "first")
        )
        if last_busy
        else {}
    )
    for rid, busy_at in last_busy.items():
        starts[rid] = (first_idle.get(rid) or busy_at, False)
    return starts


def recent_samples(resource_id: int, *, since: dt.datetime, limit: int = 24) -> list[dict]:
    """The latest raw samples of a pod since `since`, newest last: the evidence for a stop."""
    rows = list(
        Sample.objects.filter(resource_id=resource_id, at__gte=since)
        .order_by("-at")
        .values("at", "gpus", "util_sum", "util_max", "mem_sum", "mem_max")[:limit]
    )
    return [
        {
            "at": row["at"].isoformat(),
            "gpus": row["gpus"],
            "gpu_util_mean": round(row["util_sum"] / row["gpus"], 1),
            "gpu_util_max": row["util_max"],
            "memory_util_mean": round(row["mem_sum"] / row["gpus"], 1),
            "memory_util_max": row["mem_max"],
        }
        for row in reversed(rows)
    ]


@dataclass(frozen=True)
class UsageSummary:
    """What a pod's GPUs did over a span, from the hourly aggregates."""

    hours: int  # hours with at least one sample
    samples: int
    util_mean: float
    util_max: int
    memory_util_max: int  # GPU memory peak, in percent of the GPU's memory
    busy_gpus_mean: float
    busy_gpus_max: int


def usage_summaries(resource_ids, *, start=None, end=None) -> dict[int, UsageSummary]:
    """Resource id → its summary over [start, end) (all it has when unbounded)."""
    resource_ids = list(resource_ids)
    if not resource_ids:
        return {}
    hours = Hour.objects.filter(resource_id__in=resource_ids)
    if start is not None:
        hours = hours.filter(hour__gte=start)
    if end is not None:
        hours = hours.filter(hour__lt=end)
    rows = hours.values("resource_id").annotate(
        n_hours=Count("hour"),
        n=Sum("samples"),
        readings=Sum("readings"),
        util=Sum("util_sum"),
        util_top=Max("util_max"),
        mem_top=Max("mem_max"),
        busy=Sum("busy_gpus_sum"),
        busy_top=Max("busy_gpus_max"),
    )
    return {
        row["resource_id"]: UsageSummary(
            hours=row["n_hours"],
            samples=row["n"],
            util_mean=row["util"] / row["readings"] if row["readings"] else 0.0,
            util_max=row["util_top"],
            memory_util_max=row["mem_top"],
            busy_gpus_mean=row["busy"] / row["n"] if row["n"] else 0.0,
            busy_gpus_max=row["busy_top"],
        )
        for row in rows
    }
