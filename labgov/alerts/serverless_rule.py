"""Always-on workers serving nothing: a serverless endpoint that keeps a minimum of workers
(`workers.min` > 0) bills them every second, whether requests come or not. When no reading of
its workers (Runpod's worker summary, read by each sync) has seen one running a job for longer
than the lab's running-idle grace period, that is waste of the same kind as an idle GPU: the
alert gives the dollars billed so far while it served nothing (the endpoint's billing records
of those hours) and per day, and suggests `workers.min = 0` or a shorter idle timeout, which a
lab admin can set from labgov (labgov/idle/endpoints.py). It clears itself when a worker runs a
job again or the minimum is 0.

Reads, for the institution's endpoints with always-on workers, one aggregate of their readings
over the raw window and one sum of their billing since each went idle.
"""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Max, Min, Q, Sum

from labgov.alerts.findings import (
    Context,
    Finding,
    _lab_and_owner,
    _resource_finding,
    _resources,
    usd,
)
from labgov.alerts.models import Kind
from labgov.core.money import ZERO
from labgov.runpod.models import BillingRecord, GpuType, Resource, ResourceKind
from labgov.utilization.models import WorkerReading

HOUR = dt.timedelta(hours=1)
HOURS_PER_DAY = 24


def readings_stale_after() -> dt.timedelta:
    """Readings come with each sync: two sync intervals without one and the endpoint is not
    judged (unknown is not idle)."""
    return dt.timedelta(minutes=2 * settings.LABGOV_SYNC_INTERVAL_MINUTES + 1)


@dataclass(frozen=True)
class IdleEndpoint:
    endpoint: Resource
    workers_min: int
    idle_since: dt.datetime  # the last reading that saw a worker run a job, or the first one
    since_bound: bool  # no reading held ever saw one: idle since at least then
    billed_usd: Decimal  # its billing records from the first whole hour since, so far
    billed_hours: int  # of them, the hours already over (the rate is theirs)
    per_hour_usd: Decimal

    @property
    def per_day_usd(self) -> Decimal:
        return self.per_hour_usd * HOURS_PER_DAY

    @property
    def idle_timeout_seconds(self) -> int | None:
        return (self.endpoint.details or {}).get("idle_timeout_seconds")


def workers_min_of(endpoint: Resource) -> int:
    return int((endpoint.details or {}).get("workers_min") or 0)


def always_on_endpoints(ctx_or_queryset):
    return [e for e in ctx_or_queryset if workers_min_of(e) > 0]


def catalog_worker_rate(endpoint: Resource, prices: dict[str, Decimal]) -> Decimal:
    """What one always-on worker costs per hour at the catalog's serverless price: the
    cheapest of its GPU types × its GPUs per worker (0 when the catalog does not say, as for
    a pool id labgov's catalog does not hold; the endpoint's billing then tells)."""
    pools = [p for p in (endpoint.gpu_type_id or "").split(",") if p]
    known = [prices[p] for p in pools if p in prices]
    return min(known) * max(endpoint.gpu_count, 1) if known else ZERO


def _pool_prices() -> dict[str, Decimal]:
    return dict(
        GpuType.objects.filter(serverless_price_per_hr_usd__isnull=False).values_list(
            "gpu_id", "serverless_price_per_hr_usd"
        )
    )


def idle_endpoints(ctx: Context, endpoints, *, grace_for) -> list[IdleEndpoint]:
    """Of `endpoints` (with always-on workers), those no reading has seen serve for longer
    than `grace_for(endpoint)`, whose latest reading is fresh and still shows its minimum."""
    endpoints = {e.pk: e for e in endpoints if workers_min_of(e) > 0}
    if not endpoints:
        return []
    raw_from = ctx.now - dt.timedelta(days=settings.LABGOV_UTILIZATION_RAW_DAYS)
    rows = (
        WorkerReading.objects.filter(
            resource_id__in=list(endpoints), at__gte=raw_from, at__lte=ctx.now
        )
        .values("resource_id")
        .annotate(
            first=Min("at"),
            last=Max("at"),
            last_busy=Max("at", filter=Q(running__gt=0)),
            n=Count("at"),
        )
    )
    latest_q = Q()
    candidates = {}
    fresh_from = ctx.now - readings_stale_after()
    for row in rows:
        endpoint = endpoints[row["resource_id"]]
        if row["last"] < fresh_from:
            continue
        since = row["last_busy"] or row["first"]
        bound = row["last_busy"] is None and row["first"] <= raw_from + readings_stale_after()
        if ctx.now - since < grace_for(endpoint):
            continue
        candidates[endpoint.pk] = (since, bound, row["last"])
        latest_q |= Q(resource_id=endpoint.pk, at=row["last"])
    if not candidates:
        return []
    # Their latest reading: a minimum of 0 (changed since) or no idle worker is no waste.
    still_on = set(
        WorkerReading.objects.filter(latest_q, workers_min__gt=0, idle__gt=0).values_list(
            "resource_id", flat=True
        )
    )
    billed = _billed_since(
        {pk: c[0] for pk, c in candidates.items() if pk in still_on}, now=ctx.now
    )
    prices = _pool_prices()
    found = []
    for pk, (since, bound, _last) in candidates.items():
        if pk not in still_on:
            continue
        endpoint = endpoints[pk]
        amount, complete_usd, hours = billed.get(pk, (ZERO, ZERO, 0))
        rate = (
            complete_usd / hours
            if hours
            else workers_min_of(endpoint) * catalog_worker_rate(endpoint, prices)
        )
        found.append(
            IdleEndpoint(endpoint, workers_min_of(endpoint), since, bound, amount, hours, rate)
        )
    return found


def _next_hour(moment: dt.datetime) -> dt.datetime:
    floor = moment.replace(minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + HOUR


def _billed_since(
    since: dict[int, dt.datetime], *, now: dt.datetime
) -> dict[int, tuple[Decimal, Decimal, int]]:
    """Resource id → (its billing of the whole hours from `since` on, so far; the part of it
    in hours already over; how many of those). The hour under way is billed only in part:
    counted as a whole one, it would understate the rate per hour."""
    if not since:
        return {}
    window = Q()
    for pk, moment in since.items():
        window |= Q(resource_id=pk, bucket_start__gte=_next_hour(moment))
    over = Q(bucket_end__lte=now)
    rows = (
        BillingRecord.objects.filter(window)
        .values("resource_id")
        .annotate(
            total=Sum("total_usd"),
            complete=Sum("total_usd", filter=over),
            hours=Count("bucket_start", filter=over),
        )
    )
    return {r["resource_id"]: (r["total"] or ZERO, r["complete"] or ZERO, r["hours"]) for r in rows}


def _endpoints(ctx: Context):
    return _resources(ctx).filter(kind=ResourceKind.SERVERLESS).defer(None).defer("env")


def idle_workers_findings(ctx: Context) -> list[Finding]:
    def config(endpoint):
        return ctx.settings.for_lab(_lab_and_owner(endpoint)[0])

    endpoints = [e for e in _endpoints(ctx) if config(e).enabled(Kind.IDLE_ENDPOINT_WORKERS)]
    return [
        endpoint_finding(ctx, idle)
        for idle in idle_endpoints(
            ctx, endpoints, grace_for=lambda e: dt.timedelta(hours=config(e).idle_grace_hours)
        )
    ]


def idle_words(idle: IdleEndpoint, now: dt.datetime) -> str:
    hours = (now - idle.idle_since).total_seconds() / 3600
    span = f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:.1f} days"
    return f"at least {span}" if idle.since_bound else span


def endpoint_finding(ctx: Context, idle: IdleEndpoint) -> Finding:
    endpoint = idle.endpoint
    name = endpoint.label
    workers = f"{idle.workers_min} always-on worker" + ("s" if idle.workers_min != 1 else "")
    timeout = idle.idle_timeout_seconds
    timeout_words = f" (now {timeout} s)" if timeout else ""
    seen = (
        "since the oldest reading labgov keeps"
        if idle.since_bound
        else f"since {idle.idle_since:%Y-%m-%d %H:%M} UTC"
    )
    billed = (
        f"{usd(idle.billed_usd)} billed so far, {usd(idle.per_hour_usd)}/hour over the "
        f"{idle.billed_hours} whole hours already over"
        if idle.billed_hours
        else f"no hour billed in full yet, {usd(idle.per_hour_usd)}/hour at the catalog's price"
    )
    return _resource_finding(
        Kind.IDLE_ENDPOINT_WORKERS,
        endpoint,
        f"Endpoint {name}",
        title=f"Endpoint {name} keeps {workers} serving nothing for "
        f"{idle_words(idle, ctx.now)}: {usd(idle.billed_usd)} so far, "
        f"{usd(idle.per_day_usd)}/day",
        detail=f"No worker of it has run a job {seen} (Runpod's worker summary at each sync), "
        f"while its minimum of {workers} bills all the time: {billed}. Set workers.min to 0 "
        f"(requests then wait for a cold start) or shorten the idle timeout{timeout_words} "
        "so workers scale down sooner; a lab admin can change both from labgov. This alert "
        "clears itself when a worker runs a job again or the minimum is 0.",
        monthly_cost_usd=idle.per_hour_usd * settings.LABGOV_HOURS_PER_MONTH,
        facts={
            "runpod_id": endpoint.runpod_id,
            "workers_min": idle.workers_min,
            "idle_timeout_seconds": timeout,
            "idle_since": idle.idle_since.isoformat(),
            "idle_since_bound": idle.since_bound,
            "billed_usd": str(idle.billed_usd.quantize(Decimal("0.01"))),
            "billed_hours": idle.billed_hours,
            "per_hour_usd": str(idle.per_hour_usd.quantize(Decimal("0.0001"))),
            "per_day_usd": str(idle.per_day_usd.quantize(Decimal("0.01"))),
        },
    )
