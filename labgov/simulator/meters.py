"""From a resource's history and the prices to its billing meter.

What bills in each pod status (Runpod's pricing page, as the simulator reads it):

    PROVISIONING              nothing: no machine yet
    STARTING, RUNNING         compute (`cost` $/h), container disk and volume disk at the
                              running rate ($0.10/GB/month)
    EXITED, ERROR             volume disk only, at the stopped rate ($0.20/GB/month); the
                              container disk is erased and compute is released
    TERMINATED                nothing, and the meter ends

Cluster member pods bill through their cluster (GET /v2/billing/clusters), not as pods.
"""

from decimal import Decimal

from labgov.simulator.billing import (
    CLUSTER,
    ENDPOINT,
    FOREVER,
    NETWORK_VOLUME,
    POD,
    SERVERLESS,
    Meter,
    PeriodicMeter,
)
from labgov.simulator.scenario import (
    HOUR,
    ClusterSpec,
    EndpointSpec,
    GpuTypeSpec,
    PodSpec,
    Prices,
    PublicEndpointUsage,
    VolumeSpec,
)

ZERO = Decimal(0)
COMPUTING = frozenset({"STARTING", "RUNNING"})
STOPPED = frozenset({"EXITED", "ERROR"})


def pod_cost_per_hr(pod: PodSpec, prices: Prices, catalog: dict[str, GpuTypeSpec]) -> Decimal:
    """What the pod costs per hour while it runs (its `cost` field when RUNNING)."""
    if pod.cost_per_hr is not None:
        return pod.cost_per_hr
    if pod.gpu_type_id:
        return catalog[pod.gpu_type_id].price(pod.cloud) * pod.gpu_count
    return prices.cpu_vcpu_hr * pod.vcpu_count


def pod_meter(pod: PodSpec, prices: Prices, catalog: dict[str, GpuTypeSpec]) -> Meter | None:
    month = prices.hours_per_month * HOUR
    cost = pod_cost_per_hr(pod, prices, catalog)
    gpu_cost, cpu_cost = (cost, ZERO) if pod.gpu_type_id else (ZERO, cost)
    running_disk = (
        pod.disk * prices.container_disk_gb_month
        + pod.volume_gb * prices.volume_disk_running_gb_month
    )
    rates = {
        "running": (gpu_cost, cpu_cost, running_disk),
        "stopped": (ZERO, ZERO, pod.volume_gb * prices.volume_disk_stopped_gb_month),
        "idle": (ZERO, ZERO, ZERO),
    }
    segments = []
    history = pod.history
    for i, (start, status) in enumerate(history):
        if status == "TERMINATED":
            break
        end = history[i + 1][0] if i + 1 < len(history) else FOREVER
        kind = "running" if status in COMPUTING else "stopped" if status in STOPPED else "idle"
        segments.append((start, end, rates[kind]))
    meter = Meter(POD, pod.id, (HOUR, HOUR, month), segments)
    return meter if meter.segments else None


def volume_meters(volumes: list[VolumeSpec], prices: Prices) -> list[Meter]:
    """Meters of every network volume, with the 1 TB standard tier shared by the account.

    Runpod does not say whether the tier is per volume or per account; we apply it to the
    account's standard capacity, filled oldest volume first (by creation time, then id). When
    a volume goes, the first-tier room it held passes to younger ones from that second on, so
    a volume's rate changes whenever the account's set of standard volumes changes.
    """
    month = prices.hours_per_month * HOUR
    denominators = (month, month)
    meters = []
    standard = sorted((v for v in volumes if v.type == "STANDARD"), key=lambda v: (v.created, v.id))
    ends = {v.id: v.deleted if v.deleted is not None else FOREVER for v in standard}
    edges = sorted({v.created for v in standard} | {e for e in ends.values() if e < FOREVER})
    segments: dict[str, list] = {v.id: [] for v in standard}
    for i, start in enumerate(edges):
        end = edges[i + 1] if i + 1 < len(edges) else FOREVER
        room = prices.network_standard_tier_gb
        for volume in standard:
            if not (volume.created <= start and ends[volume.id] >= end):
                continue
            in_tier = min(volume.size, room)
            room -= in_tier
            rate = (
                in_tier * prices.network_standard_gb_month
                + (volume.size - in_tier) * prices.network_standard_beyond_tier_gb_month
            )
            segments[volume.id].append((start, end, (rate, ZERO)))
    for volume in volumes:
        if volume.type == "STANDARD":
            meter = Meter(NETWORK_VOLUME, volume.id, denominators, segments[volume.id])
        else:
            end = volume.deleted if volume.deleted is not None else FOREVER
            rate = volume.size * prices.network_high_performance_gb_month
            meter = Meter(
                NETWORK_VOLUME, volume.id, denominators, [(volume.created, end, (ZERO, rate))]
            )
        if meter.segments:
            meters.append(meter)
    return meters


def endpoint_meter(
    endpoint: EndpointSpec, prices: Prices, catalog: dict[str, GpuTypeSpec]
) -> PeriodicMeter:
    """Serverless: worker seconds from the hourly traffic pattern, times the per-second rate.

    Worker seconds in an hour = requests x seconds per request, plus 3600 for each always-on
    (minimum) worker. GPU workers bill the catalog's serverless price x GPU count, CPU workers
    vCPUs x the serverless vCPU price; workers' container disk bills per worker second; the
    platform fee is per request. The simulator's simple model, not Runpod's formula.
    """
    month = prices.hours_per_month * HOUR
    if endpoint.gpu_type_id:
        gpu = catalog[endpoint.gpu_type_id]
        worker_hr, gpu_or_cpu = (gpu.price_serverless or gpu.price_secure) * endpoint.gpu_count, 0
    else:
        worker_hr, gpu_or_cpu = prices.serverless_cpu_vcpu_hr * endpoint.vcpu_count, 1
    day_rates = []
    for requests in endpoint.requests_per_hour:
        worker_seconds = requests * endpoint.seconds_per_request + endpoint.workers_min * HOUR
        compute = worker_seconds * worker_hr  # over HOUR x HOUR: USD per second of the hour
        rates = [ZERO, ZERO]
        rates[gpu_or_cpu] = compute
        disk = worker_seconds * endpoint.disk * prices.serverless_disk_gb_month
        fee = requests * prices.serverless_fee_per_request
        day_rates.append((*rates, disk, fee))
    end = endpoint.deleted if endpoint.deleted is not None else FOREVER
    denominators = (HOUR * HOUR, HOUR * HOUR, HOUR * month, HOUR)
    return PeriodicMeter(
        SERVERLESS, endpoint.id, denominators, endpoint.created, end, tuple(day_rates)
    )


def cluster_meter(cluster: ClusterSpec, prices: Prices, catalog: dict[str, GpuTypeSpec]) -> Meter:
    """Clusters: nodes x GPUs x rate, plus each node's disk and inter-node networking."""
    month = prices.hours_per_month * HOUR
    price = cluster.gpu_price_per_hr or catalog[cluster.gpu_type_id].price_secure
    nodes = cluster.pod_count
    rates = (
        nodes * cluster.gpu_count_per_pod * price,
        nodes * cluster.disk * prices.cluster_disk_gb_month,
        nodes * prices.cluster_networking_node_hr,
    )
    end = cluster.terminated if cluster.terminated is not None else FOREVER
    return Meter(CLUSTER, cluster.id, (HOUR, month, HOUR), [(cluster.created, end, rates)])


def public_endpoint_meter(usage: PublicEndpointUsage) -> PeriodicMeter:
    day_rates = tuple((amount,) for amount in usage.usd_per_hour)
    return PeriodicMeter(ENDPOINT, "", (HOUR,), usage.since, FOREVER, day_rates)


class ChainedMeter:
    """One endpoint billed by its versions one after the other (a PATCH that changed what
    bills starts a version at a whole hour), so no hour is billed twice."""

    __slots__ = ("product", "resource_id", "denominators", "start", "pieces")

    def __init__(self, pieces: list[PeriodicMeter]):
        self.pieces = pieces
        first = pieces[0]
        self.product, self.resource_id = first.product, first.resource_id
        self.denominators, self.start = first.denominators, first.start

    def runs(self, lo: int, hi: int, now: int):
        return [run for piece in self.pieces for run in piece.runs(lo, hi, now)]
