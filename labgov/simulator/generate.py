"""Generated scenarios: a big account, built deterministically from a seed.

For benchmarks and tests at scale: `generate_scenario(pods=500, volumes=200, days=90)` has
about a million hourly pod records. Prices, the GPU catalog and templates come from the
default scenario, so generated and hand-written accounts bill alike.
"""

import dataclasses
import datetime as dt
import random
import string
from decimal import Decimal

from labgov.simulator.scenario import (
    HOUR,
    ClusterSpec,
    EndpointSpec,
    PodSpec,
    PublicEndpointUsage,
    Scenario,
    UtilizationSpec,
    VolumeSpec,
    check_scenario,
    epoch,
    read_scenario,
)

DAY = 24 * HOUR
PREFIXES = ("vision-", "nlp-", "dl101-", "robotics-", "bio-", "")  # "" is a pod with no hint
WORDS = ("train", "eval", "sweep", "notebook", "serve", "ablation", "finetune", "debug", "data")
DATA_CENTERS = {
    "SECURE": ("US-KS-2", "EU-RO-1", "US-TX-3", "EU-SE-1"),
    "COMMUNITY": ("CA-MTL-1", "US-TX-3", "EU-CZ-1"),
}
GPU_WEIGHTS = {
    "NVIDIA GeForce RTX 4090": 30,
    "NVIDIA RTX A6000": 12,
    "NVIDIA A40": 10,
    "NVIDIA L40S": 12,
    "NVIDIA A100 80GB PCIe": 8,
    "NVIDIA A100-SXM4-80GB": 8,
    "NVIDIA H100 80GB HBM3": 10,
    "NVIDIA H100 PCIe": 5,
    "NVIDIA RTX A5000": 5,
}


def generate_scenario(
    pods: int = 500,
    volumes: int = 200,
    endpoints: int = 12,
    clusters: int = 3,
    days: int = 90,
    seed: int = 1,
    now: dt.datetime | None = None,
) -> Scenario:
    base = _without_demo_tags(read_scenario("default"))
    rng = random.Random(seed)  # noqa: S311 - made-up accounts, not secrets
    t_now = epoch(now or base.now)
    t0 = t_now - days * DAY
    ids = _Ids(rng)
    volume_specs = [_volume(rng, ids.make(10), t0, t_now, i) for i in range(volumes)]
    pod_specs = [_pod(rng, ids.make(14), base, volume_specs, t0, t_now, i) for i in range(pods)]
    mounted = {p.network_volume_id for p in pod_specs}
    volume_specs = [_maybe_deleted(rng, v, t_now, mounted) for v in volume_specs]
    gpus = [g for g in base.gpu_types if g.price_serverless is not None]
    endpoint_specs = [_endpoint(rng, ids.make(14), gpus, t0, t_now, i) for i in range(endpoints)]
    cluster_specs = [_cluster(rng, ids.make(14), t0, t_now, i) for i in range(clusters)]
    public = PublicEndpointUsage(
        since=t0 - 30 * DAY,
        usd_per_hour=tuple(Decimal(rng.randint(0, 40)) / 100 for _ in range(24)),
    )
    scenario = dataclasses.replace(
        base,
        name=f"generated-p{pods}-v{volumes}-d{days}-s{seed}",
        now=now or base.now,
        balance_usd=Decimal("25000.00"),
        pods=tuple(pod_specs),
        network_volumes=tuple(volume_specs),
        endpoints=tuple(endpoint_specs),
        clusters=tuple(cluster_specs),
        public_endpoints=public,
    )
    check_scenario(scenario)
    return scenario


def _without_demo_tags(base: Scenario) -> Scenario:
    """The default scenario's templates carry the demo institution's allocation tags
    (`LABGOV_ALLOCATION=lga-demo-<n>`): a second account built from them would charge the
    demo's people. A generated scenario's pods and templates carry none of them."""
    templates = tuple(
        dataclasses.replace(t, env={k: v for k, v in t.env.items() if k != "LABGOV_ALLOCATION"})
        for t in base.templates
    )
    return dataclasses.replace(base, templates=templates)


class _Ids:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.seen: set[str] = set()

    def make(self, length: int) -> str:
        while True:
            new = "".join(self.rng.choices(string.ascii_lowercase + string.digits, k=length))
            if new not in self.seen:
                self.seen.add(new)
                return new


def _created(rng: random.Random, t0: int, t_now: int, before_share: float) -> int:
    """Most resources predate the window, so the window is full; the rest appear in it."""
    if rng.random() < before_share:
        return t0 - rng.randint(HOUR, 20 * DAY)
    return rng.randint(t0, t_now - HOUR)


def _volume(rng: random.Random, volume_id: str, t0: int, t_now: int, i: int) -> VolumeSpec:
    kind = "HIGH_PERFORMANCE" if rng.random() < 0.2 else "STANDARD"
    size = rng.choice((10, 20, 50, 50, 100, 100, 200, 250, 500, 1000, 2000))
    return VolumeSpec(
        id=volume_id,
        name=f"{rng.choice(PREFIXES)}volume-{i}",
        size=size,
        data_center_id=rng.choice(DATA_CENTERS["SECURE"]),
        type=kind,
        history=((_created(rng, t0, t_now, 0.8), "CREATED"),),
    )


def _maybe_deleted(
    rng: random.Random, volume: VolumeSpec, t_now: int, mounted: set[str | None]
) -> VolumeSpec:
    if volume.id in mounted or rng.random() > 0.1 or volume.created >= t_now - 2 * HOUR:
        return volume
    deleted = rng.randint(volume.created + HOUR, t_now - HOUR)
    return dataclasses.replace(volume, history=(*volume.history, (deleted, "DELETED")))


def _pod(
    rng: random.Random,
    pod_id: str,
    base: Scenario,
    volumes: list[VolumeSpec],
    t0: int,
    t_now: int,
    i: int,
) -> PodSpec:
    cloud = "SECURE" if rng.random() < 0.65 else "COMMUNITY"
    gpu_ids = [g.id for g in base.gpu_types if g.id in GPU_WEIGHTS and g.available(cloud)]
    gpu_id = rng.choices(gpu_ids, weights=[GPU_WEIGHTS[g] for g in gpu_ids])[0]
    created = _created(rng, t0, t_now, 0.8)
    template = rng.choice(base.templates) if rng.random() < 0.25 else None
    env = dict(template.env) if template else {}
    if rng.random() < 0.5:
        env["LABGOV_ALLOCATION"] = str(rng.randint(1, 6))
    volume_gb, network = 0, None
    choice = rng.random()
    if choice < 0.45:
        volume_gb = rng.choice((20, 50, 100, 200, 500))
    elif choice < 0.65 and cloud == "SECURE":
        candidates = [v for v in volumes if v.created <= created]
        network = rng.choice(candidates) if candidates else None
    return PodSpec(
        id=pod_id,
        name=f"{rng.choice(PREFIXES)}{rng.choice(WORDS)}-{i}",
        image=template.image if template else "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404",
        env=env,
        disk=template.disk if template else rng.choice((20, 30, 50, 80)),
        ports=template.ports if template else ("22/tcp",),
        cloud=cloud,
        data_center_id=network.data_center_id if network else rng.choice(DATA_CENTERS[cloud]),
        history=_pod_history(rng, created, t_now),
        gpu_type_id=gpu_id,
        gpu_count=rng.choices((1, 2, 4, 8), weights=(70, 15, 10, 5))[0],
        template_id=template.id if template else None,
        volume_gb=volume_gb,
        network_volume_id=network.id if network else None,
        utilization=_utilization(pod_id, t_now),
    )


def _utilization(pod_id: str, t_now: int) -> UtilizationSpec:
    """Most pods work; a fifth fell idle within the last three days, some are bursty, some use
    one GPU of several. Drawn from the pod's id, not the scenario's generator, so adding this
    changed nothing else a seed produces."""
    draw = random.Random(pod_id)  # noqa: S311 - made-up accounts, not secrets
    roll = draw.random()
    if roll < 0.6:
        return UtilizationSpec("busy")
    if roll < 0.8:
        return UtilizationSpec("idle_from", t_now - draw.randint(1, 72) * HOUR)
    return UtilizationSpec("bursty" if roll < 0.9 else "one_gpu_busy")


def _pod_history(rng: random.Random, created: int, t_now: int) -> tuple[tuple[int, str], ...]:
    """Runs of about half a day, stops of about a day, until now; some end badly."""
    history = []
    t = created
    while t < t_now:
        history += [(t, "STARTING"), (t + rng.randint(30, 150), "RUNNING")]
        t += int(rng.expovariate(1 / (12 * HOUR))) + 5 * 60
        if t >= t_now:
            break
        history.append((t, "ERROR" if rng.random() < 0.03 else "EXITED"))
        t += int(rng.expovariate(1 / (24 * HOUR))) + 5 * 60
    history = [event for event in history if event[0] < t_now]
    if rng.random() < 0.08 and history[-1][0] < t_now - HOUR:
        history.append((rng.randint(history[-1][0] + 60, t_now - 60), "TERMINATED"))
    return tuple(history)


def _endpoint(
    rng: random.Random, endpoint_id: str, gpus: list, t0: int, t_now: int, i: int
) -> EndpointSpec:
    gpu = rng.choice(gpus) if rng.random() < 0.85 else None
    peak = rng.randint(5, 300)
    pattern = tuple(
        int(peak * max(0.02, 1 - abs(h - 15) / 9) * rng.uniform(0.7, 1.0)) for h in range(24)
    )
    created = _created(rng, t0, t_now, 0.7)
    history: tuple = ((created, "CREATED"),)
    if rng.random() < 0.15 and created < t_now - DAY:
        history += ((rng.randint(created + HOUR, t_now - HOUR), "DELETED"),)
    return EndpointSpec(
        id=endpoint_id,
        name=f"{rng.choice(PREFIXES)}endpoint-{i}",
        image="ghcr.io/northfield/serve:1.0",
        env={"LABGOV_ALLOCATION": str(rng.randint(1, 6))} if rng.random() < 0.5 else {},
        disk=rng.choice((10, 20, 40)),
        workers_min=rng.choices((0, 1, 2), weights=(70, 20, 10))[0],
        workers_max=rng.randint(2, 10),
        data_center_ids=(),
        network_volume_ids=(),
        seconds_per_request=Decimal(rng.randint(2, 300)) / 10,
        requests_per_hour=pattern,
        history=history,
        gpu_type_id=gpu.id if gpu else None,
        gpu_count=1 if gpu else 0,
        vcpu_count=0 if gpu else rng.choice((2, 4, 8)),
    )


def _cluster(rng: random.Random, cluster_id: str, t0: int, t_now: int, i: int) -> ClusterSpec:
    created = rng.randint(t0, t_now - 6 * HOUR)
    history: tuple = ((created, "RUNNING"),)
    if rng.random() < 0.6:
        history += ((min(created + rng.randint(4 * HOUR, 5 * DAY), t_now - HOUR), "TERMINATED"),)
    return ClusterSpec(
        id=cluster_id,
        name=f"{rng.choice(PREFIXES)}cluster-{i}",
        type=rng.choice(("TRAINING", "SLURM", "RAY")),
        gpu_type_id=rng.choice(("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")),
        gpu_count_per_pod=8,
        pod_count=rng.choice((2, 2, 4)),
        disk=rng.choice((100, 200)),
        data_center_id=rng.choice(DATA_CENTERS["SECURE"]),
        image="ghcr.io/northfield/ddp:1.0",
        history=history,
    )
