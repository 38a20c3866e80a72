"""Writing utilization: raw samples from the pods Runpod listed, the hourly aggregates they
make, and pruning raw samples past their window.

Idempotent: a sample's key is (pod, time), and an hour's aggregate is recomputed from its raw
samples rather than incremented, so a pass repeated (a retried task, the sync and the poll in
the same second) writes the same rows again.
"""

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Sum

from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import Pod, PodStatus
from labgov.utilization.models import Hour, Sample, WorkerReading

# A GPU counts as busy from this utilization on (an idle CUDA context reads 0-2 %).
BUSY_GPU_UTIL = 10
HOUR = dt.timedelta(hours=1)


def reading(pod: Pod) -> dict | None:
    """The sample's figures from a running pod's runtime; None when it has no GPU reading
    (not running, a CPU pod, or Runpod left the GPUs out: unknown is not idle).

    Only GPUs that reported a utilization count; one without a memory reading is judged by its
    utilization alone (its memory counts as its utilization)."""
    if pod.status != PodStatus.RUNNING or pod.runtime is None:
        return None
    gpus = [g for g in pod.runtime.gpus if g.util is not None]
    if not gpus:
        return None
    utils = [g.util for g in gpus]
    mems = [g.memory_util if g.memory_util is not None else g.util for g in gpus]
    return {
        "gpus": len(gpus),
        "util_sum": sum(utils),
        "util_max": max(utils),
        "mem_sum": sum(mems),
        "mem_max": max(mems),
        "busy_gpus": sum(1 for u in utils if u >= BUSY_GPU_UTIL),
    }


def hour_of(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def samples_record(*, account, pods: list[Pod], now: dt.datetime) -> dict:
    """One sample per running GPU pod of `account` that Runpod reported utilization for, and
    the aggregate of the hour they fall in."""
    readings = {pod.id: r for pod in pods if (r := reading(pod)) is not None}
    if not readings:
        return {"utilization_samples": 0}
    ids = dict(
        Resource.objects.filter(
            account=account, kind=ResourceKind.POD, runpod_id__in=list(readings)
        ).values_list("runpod_id", "pk")
    )
    at = now.replace(microsecond=0)
    samples = [
        Sample(resource_id=ids[runpod_id], at=at, **figures)
        for runpod_id, figures in readings.items()
        if runpod_id in ids
    ]
    with transaction.atomic():
        Sample.objects.bulk_create(samples, ignore_conflicts=True, batch_size=2000)
        hours_rebuild(resource_ids=[s.resource_id for s in samples], hour=hour_of(at))
    return {"utilization_samples": len(samples)}


def hours_rebuild(*, resource_ids: list[int], hour: dt.datetime) -> int:
    """Recompute the aggregates of `hour` for these pods from their raw samples."""
    rows = (
        Sample.objects.filter(resource_id__in=resource_ids, at__gte=hour, at__lt=hour + HOUR)
        .values("resource_id")
        .annotate(
            n=Count("at"),
            readings=Sum("gpus"),
            util=Sum("util_sum"),
            util_top=Max("util_max"),
            mem=Sum("mem_sum"),
            mem_top=Max("mem_max"),
            busy=Sum("busy_gpus"),
            busy_top=Max("busy_gpus"),
        )
    )
    hours = [
        Hour(
            resource_id=row["resource_id"],
            hour=hour,
            samples=row["n"],
            readings=row["readings"],
            util_sum=row["util"],
            util_max=row["util_top"],
            mem_sum=row["mem"],
            mem_max=row["mem_top"],
            busy_gpus_sum=row["busy"],
            busy_gpus_max=row["busy_top"],
        )
        for row in rows
    ]
    Hour.objects.bulk_create(
        hours,
        update_conflicts=True,
        unique_fields=["resource", "hour"],
        update_fields=[
            "samples",
            "readings",
            "util_sum",
            "util_max",
            "mem_sum",
            "mem_max",
            "busy_gpus_sum",
            "busy_gpus_max",
        ],
        batch_size=2000,
    )
    return len(hours)


def samples_after_inventory(
    *, account, pods: list[Pod], now: dt.datetime, endpoint_workers: dict | None = None
) -> dict:
    """Inventory step (settings.LABGOV_AFTER_INVENTORY): every sync samples its running pods
    and reads the workers of its endpoints that keep always-on ones."""
    counts = samples_record(account=account, pods=pods, now=now)
    counts.update(worker_readings_record(account=account, workers=endpoint_workers or {}, now=now))
    return counts


def worker_readings_record(*, account, workers: dict, now: dt.datetime) -> dict:
    """One reading per endpoint (Runpod id → its WorkerSummary), keyed (endpoint, time)."""
    if not workers:
        return {"worker_readings": 0}
    endpoints = Resource.objects.filter(
        account=account, kind=ResourceKind.SERVERLESS, runpod_id__in=list(workers)
    ).values_list("runpod_id", "pk", "details")
    at = now.replace(microsecond=0)
    rows = [
        WorkerReading(
            resource_id=pk,
            at=at,
            workers_min=(details or {}).get("workers_min") or 0,
            running=workers[runpod_id].running,
            idle=workers[runpod_id].idle,
            total=workers[runpod_id].total,
        )
        for runpod_id, pk, details in endpoints
    ]
    WorkerReading.objects.bulk_create(rows, ignore_conflicts=True)
    return {"worker_readings": len(rows)}


def samples_prune(*, now: dt.datetime) -> int:
    """Delete raw samples older than the window; the hourly aggregates stay."""
    cutoff = now - dt.timedelta(days=settings.LABGOV_UTILIZATION_RAW_DAYS)
    deleted, _ = Sample.objects.filter(at__lt=cutoff).delete()
    readings, _ = WorkerReading.objects.filter(at__lt=cutoff).delete()
    return deleted + readings
