"""Cost estimates for provisioning requests: pure arithmetic on Decimal.

Units: GB = 10^9 bytes and MB = 10^6 bytes, as Runpod and the seeds use them (112 GB written
at 200 MB/s takes 560 s). Storage prices are $/GB/month and a month is
`LABGOV_HOURS_PER_MONTH` hours (730 by default).

Rounding: every figure keeps Decimal's full precision (28 significant digits), hours too, so
10 h + 60 min + 10 min is 11.1666… h, not 11.167 h. Only display rounds, to cents with
ROUND_HALF_EVEN (`labgov.core.money.to_cents`): 11.1666… h × $35.12 = $392.1733… → $392.17.

The figures are estimates; billing records are the truth (see README, "Configuration").
"""

from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings

from labgov.core.money import ZERO
from labgov.runpod.pricing import network_volume_monthly_usd, pod_storage_monthly_usd
from labgov.runpod.types import PodStatus

SECONDS_PER_HOUR = Decimal(3600)
MINUTES_PER_HOUR = Decimal(60)
MB_PER_GB = Decimal(1000)
# Keep checkpointing to about a tenth of run time: interval >= 10 x save time.
CHECKPOINT_INTERVAL_FACTOR = Decimal(10)
DEFAULT_RESTART_MINUTES = Decimal(10)


class Model:
    POD = "pod"
    SERVERLESS = "serverless"
    CLUSTER = "cluster"


@dataclass(frozen=True)
class CheckpointPlan:
    """What the requester knows about checkpoints. The size is given, or params x bytes each."""

    params_billion: Decimal | None = None
    bytes_per_param: Decimal | None = None
    size_gb: Decimal | None = None
    write_mb_per_s: Decimal | None = None
    interval_minutes: Decimal | None = None
    restart_minutes: Decimal = DEFAULT_RESTART_MINUTES


@dataclass(frozen=True)
class Checkpoint:
    size_gb: Decimal
    save_seconds: Decimal | None  # None without a write rate
    recommended_interval_minutes: Decimal | None
    interval_minutes: Decimal | None  # the plan's, else the recommended one

    @property
    def overhead_fraction(self) -> Decimal | None:
        """Share of run time spent saving at this interval."""
        if self.save_seconds is None or not self.interval_minutes:
            return None
        return self.save_seconds / (self.interval_minutes * 60)


@dataclass(frozen=True)
class Storage:
    container_disk_gb: int = 0
    volume_disk_gb: int = 0
    network_volume_gb: int = 0
    kept_days_after: Decimal = ZERO  # how long volume disk / network volume stay after the work


@dataclass(frozen=True)
class Stop:
    """One unplanned stop at the worst moment: just before a checkpoint (or, with none, just
    before the end), then the restart. The lost hours are billed again."""

    hours_lost: Decimal
    cost_usd: Decimal
    # hours_lost = redo_hours (work since the last checkpoint) + restart_hours
    redo_hours: Decimal = ZERO
    restart_hours: Decimal = ZERO


@dataclass(frozen=True)
class Estimate:
    model: str
    hourly_rate_usd: Decimal  # compute while running
    hours: Decimal  # compute hours (worker hours for Serverless)
    compute_usd: Decimal
    storage_running_usd: Decimal
    storage_after_usd: Decimal
    checkpoint: Checkpoint | None = None
    stop: Stop | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def storage_usd(self) -> Decimal:
        return self.storage_running_usd + self.storage_after_usd

    @property
    def total_usd(self) -> Decimal:
        """What approval commits: compute plus storage, without the cost of a stop."""
        return self.compute_usd + self.storage_usd

    @property
    def total_with_stop_usd(self) -> Decimal | None:
        return None if self.stop is None else self.total_usd + self.stop.cost_usd


def _hours_per_month() -> Decimal:
    return Decimal(settings.LABGOV_HOURS_PER_MONTH)


def _dec(value) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value or 0))


def checkpoint_figures(plan: CheckpointPlan | None) -> Checkpoint | None:
    if plan is None:
        return None
    size_gb = plan.size_gb
    if size_gb is None and plan.params_billion is not None and plan.bytes_per_param is not None:
        # params_billion x 10^9 params x bytes each / 10^9 bytes per GB
        size_gb = plan.params_billion * plan.bytes_per_param
    if size_gb is None or size_gb <= 0:
        if plan.interval_minutes:
            return Checkpoint(ZERO, None, None, plan.interval_minutes)
        return None
    save_seconds = recommended = None
    if plan.write_mb_per_s and plan.write_mb_per_s > 0:
        save_seconds = size_gb * MB_PER_GB / plan.write_mb_per_s
        recommended = CHECKPOINT_INTERVAL_FACTOR * save_seconds / 60
    return Checkpoint(
        size_gb=size_gb,
        save_seconds=save_seconds,
        recommended_interval_minutes=recommended,
        interval_minutes=plan.interval_minutes or recommended,
    )


def unplanned_stop(
    *, hourly_rate_usd: Decimal, hours: Decimal, checkpoint: Checkpoint | None, restart_minutes
) -> Stop:
    """Without checkpoints a stop just before the end redoes the whole run."""
    redo_hours = hours
    if checkpoint is not None and checkpoint.interval_minutes:
        redo_hours = min(hours, checkpoint.interval_minutes / MINUTES_PER_HOUR)
    restart_hours = _dec(restart_minutes) / MINUTES_PER_HOUR
    lost = redo_hours + restart_hours
    return Stop(
        hours_lost=lost,
        cost_usd=lost * hourly_rate_usd,
        redo_hours=redo_hours,
        restart_hours=restart_hours,
    )


def _network_monthly(gb: int) -> Decimal:
    if gb <= 0:
        return ZERO
    return network_volume_monthly_usd(size_gb=gb, volume_type="STANDARD")


def _storage(storage: Storage, *, running_hours: Decimal, copies: int = 1):
    """Storage while running and after the work: container and volume disk per machine
    (`copies`), the network volume once. A stopped pod pays double for its volume disk and
    nothing for its container disk."""
    per_month = _hours_per_month()
    disk_running = copies * pod_storage_monthly_usd(
        status=PodStatus.RUNNING,
        container_disk_gb=storage.container_disk_gb,
        volume_disk_gb=storage.volume_disk_gb,
    )
    disk_after = copies * pod_storage_monthly_usd(
        status=PodStatus.EXITED, container_disk_gb=0, volume_disk_gb=storage.volume_disk_gb
    )
    network = _network_monthly(storage.network_volume_gb)
    kept_hours = _dec(storage.kept_days_after) * 24
    running = (disk_running + network) * running_hours / per_month
    after = (disk_after + network) * kept_hours / per_month
    return running, after


def pod_estimate(
    *,
    gpu_price_per_hr_usd: Decimal,
    gpu_count: int,
    hours: Decimal,
    storage: Storage = Storage(),  # noqa: B008 - frozen
    checkpoint_plan: CheckpointPlan | None = None,
) -> Estimate:
    """Expected active hours x GPU rate x GPUs, plus storage while running and after."""
    hours = _dec(hours)
    rate = gpu_count * gpu_price_per_hr_usd
    running, after = _storage(storage, running_hours=hours)
    checkpoint = checkpoint_figures(checkpoint_plan)
    restart = checkpoint_plan.restart_minutes if checkpoint_plan else DEFAULT_RESTART_MINUTES
    return Estimate(
        model=Model.POD,
        hourly_rate_usd=rate,
        hours=hours,
        compute_usd=hours * rate,
        storage_running_usd=running,
        storage_after_usd=after,
        checkpoint=checkpoint,
        stop=unplanned_stop(
            hourly_rate_usd=rate, hours=hours, checkpoint=checkpoint, restart_minutes=restart
        ),
    )


def cluster_estimate(
    *,
    gpu_price_per_hr_usd: Decimal,
    nodes: int,
    gpus_per_node: int,
    hours: Decimal,
    storage: Storage = Storage(),  # noqa: B008 - frozen
    checkpoint_plan: CheckpointPlan | None = None,
) -> Estimate:
    """Nodes x GPUs x hours x rate, plus each node's disks and the shared network volume. A
    stop of one node stops the coordinated run, so the whole cluster redoes the lost time."""
    hours = _dec(hours)
    rate = nodes * gpus_per_node * gpu_price_per_hr_usd
    running, after = _storage(storage, running_hours=hours, copies=nodes)
    checkpoint = checkpoint_figures(checkpoint_plan)
    restart = checkpoint_plan.restart_minutes if checkpoint_plan else DEFAULT_RESTART_MINUTES
    return Estimate(
        model=Model.CLUSTER,
        hourly_rate_usd=rate,
        hours=hours,
        compute_usd=hours * rate,
        storage_running_usd=running,
        storage_after_usd=after,
        checkpoint=checkpoint,
        stop=unplanned_stop(
            hourly_rate_usd=rate, hours=hours, checkpoint=checkpoint, restart_minutes=restart
        ),
    )


def serverless_estimate(
    *,
    gpu_price_per_hr_usd: Decimal,
    gpus_per_worker: int,
    requests_per_day: Decimal,
    seconds_per_request: Decimal,
    days: Decimal,
    idle_workers: int = 0,
    network_volume_gb: int = 0,
    kept_days_after: Decimal = ZERO,
) -> Estimate:
    """Requests per day x seconds per request -> worker seconds x rate, plus workers kept
    running all the time. An upper bound: it assumes requests run on workers that scale up for
    them, not on the always-on ones."""
    days = _dec(days)
    rate = gpus_per_worker * gpu_price_per_hr_usd
    request_hours = _dec(requests_per_day) * _dec(seconds_per_request) * days / SECONDS_PER_HOUR
    idle_hours = idle_workers * days * 24
    worker_hours = request_hours + idle_hours
    running, after = _storage(
        Storage(network_volume_gb=network_volume_gb, kept_days_after=kept_days_after),
        running_hours=days * 24,
    )
    notes = ()
    if idle_workers:
        notes = (
            f"{idle_workers} always-on worker(s) bill {idle_hours:f} h whether or not requests "
            "arrive.",
        )
    return Estimate(
        model=Model.SERVERLESS,
        hourly_rate_usd=rate,
        hours=worker_hours,
        compute_usd=worker_hours * rate,
        storage_running_usd=running,
        storage_after_usd=after,
        notes=notes,
    )
