"""Scenarios: the Runpod account a simulator serves, as data.

A scenario file is one JSON object (see `scenarios/default.json`). Times are RFC 3339 in UTC,
money is decimal text ("2.69"), sizes are GB:

    format            1
    name, now         the scenario's own clock: what "now" is unless the server is told otherwise
    balanceUsd        account balance; creating a pod needs one hour of its cost
    prices            storage and other rates the catalog does not carry (keys of `Prices`,
                      camelCased); absent keys take the defaults below
    gpuTypes          the catalog: id, name, pool, manufacturer, memory, secure, community,
                      price {secure, community, serverless?}, maxCount {secure, community}
    templates         id, name, image, env, disk, ports
    pods              id, name, image | templateId, env, disk (container GB), ports,
                      gpu {id, count} | cpu {id, vcpuCount, memory}, cloud, dataCenterId,
                      mounts {persistent {size, path}} | {network [{volumeId, path}]},
                      costPerHr (optional; default: the catalog price for the cloud x count),
                      history [[time, PodStatus], ...]: the first entry creates the pod,
                      TERMINATED ends it,
                      utilization (optional) {pattern, idleFrom?}: what `runtime` reports
                      while it runs: busy (the default), idle_from (busy until idleFrom, then
                      every GPU near 0 %), bursty (busy 15 minutes of every hour, idle the
                      rest), one_gpu_busy (GPU 0 busy, every other GPU idle)
    networkVolumes    id, name, size, dataCenterId, type (STANDARD | HIGH_PERFORMANCE),
                      history [[time, "CREATED"], [time, "DELETED"]?]
    endpoints         serverless: id, name, image, env, disk, gpu {id, count} | cpu {vcpuCount},
                      workers {min, max}, dataCenterIds, networkVolumes, secondsPerRequest,
                      requestsPerHour (24 numbers, by UTC hour of day),
                      history [[time, "CREATED"], [time, "DELETED"]?]
    clusters          id, name, type, gpuTypeId, gpuCountPerPod, podCount, disk, dataCenterId,
                      templateId?, image, gpuPricePerHr?, history [[time, "RUNNING"],
                      [time, "TERMINATED"]?]; its member pods are derived from it
    publicEndpoints   {since, usdPerHour (24 amounts by UTC hour of day)}: Runpod's public
                      endpoints, billed as one aggregate

Billing is derived from the histories (see `billing.py`); nothing in a scenario is a bill.
Internally times are whole seconds since the epoch: billing is per second.
"""

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

UTC = dt.UTC
HOUR = 3600
SCENARIO_DIR = Path(__file__).with_name("scenarios")

POD_STATUSES = ("PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED")


@dataclass(frozen=True, slots=True)
class Prices:
    """Rates the GPU catalog does not carry. $/GB/month prices use `hours_per_month`."""

    hours_per_month: int = 730
    container_disk_gb_month: Decimal = Decimal("0.10")
    volume_disk_running_gb_month: Decimal = Decimal("0.10")
    volume_disk_stopped_gb_month: Decimal = Decimal("0.20")
    network_standard_gb_month: Decimal = Decimal("0.07")
    # The 1 TB (1,000 GB of 10^9 bytes) tier applies to the account's standard capacity, not
    # to each volume.
    network_standard_tier_gb: int = 1000
    network_standard_beyond_tier_gb_month: Decimal = Decimal("0.05")
    # Runpod publishes no price for high-performance volumes; twice standard is our pick.
    network_high_performance_gb_month: Decimal = Decimal("0.14")
    cpu_vcpu_hr: Decimal = Decimal("0.03")
    serverless_cpu_vcpu_hr: Decimal = Decimal("0.045")
    serverless_disk_gb_month: Decimal = Decimal("0.10")
    serverless_fee_per_request: Decimal = Decimal("0.00002")
    cluster_disk_gb_month: Decimal = Decimal("0.10")
    cluster_networking_node_hr: Decimal = Decimal("0.25")


@dataclass(frozen=True, slots=True)
class GpuTypeSpec:
    id: str
    name: str
    pool: str | None
    manufacturer: str
    memory: int
    secure: bool
    community: bool
    price_secure: Decimal
    price_community: Decimal
    price_serverless: Decimal | None
    max_count_secure: int
    max_count_community: int

    def price(self, cloud: str) -> Decimal:
        return self.price_secure if cloud == "SECURE" else self.price_community

    def available(self, cloud: str) -> bool:
        return self.secure if cloud == "SECURE" else self.community

    def max_count(self, cloud: str) -> int:
        return self.max_count_secure if cloud == "SECURE" else self.max_count_community


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    id: str
    name: str
    image: str
    env: dict[str, str]
    disk: int
    ports: tuple[str, ...]


History = tuple[tuple[int, str], ...]


UTILIZATION_PATTERNS = ("busy", "idle_from", "bursty", "one_gpu_busy")


@dataclass(frozen=True, slots=True)
class UtilizationSpec:
    pattern: str = "busy"
    idle_from: int | None = None  # idle_from: when its GPUs fall idle

    def shifted(self, secs: int) -> "UtilizationSpec":
        if self.idle_from is None:
            return self
        return dataclasses.replace(self, idle_from=self.idle_from + secs)


@dataclass(frozen=True, slots=True)
class PodSpec:
    id: str
    name: str
    image: str
    env: dict[str, str]
    disk: int
    ports: tuple[str, ...]
    cloud: str
    data_center_id: str
    history: History
    gpu_type_id: str | None = None
    gpu_count: int = 0
    cpu_id: str | None = None
    vcpu_count: int = 0
    memory_gb: int = 0
    template_id: str | None = None
    volume_gb: int = 0
    volume_path: str = "/workspace"
    network_volume_id: str | None = None
    network_path: str = "/workspace"
    cost_per_hr: Decimal | None = None
    args: str = ""
    cluster_id: str | None = None
    cluster_rank: int | None = None
    cluster_role: str | None = None
    utilization: UtilizationSpec = UtilizationSpec()

    def status_at(self, t: int) -> str | None:
        """The status at second `t`; None before the pod was created."""
        for when, status in reversed(self.history):
            if when <= t:
                return status
        return None

    @property
    def created(self) -> int:
        return self.history[0][0]


@dataclass(frozen=True, slots=True)
class VolumeSpec:
    id: str
    name: str
    size: int
    data_center_id: str
    type: str
    history: History

    @property
    def created(self) -> int:
        return self.history[0][0]

    @property
    def deleted(self) -> int | None:
        return next((t for t, state in self.history if state == "DELETED"), None)

    def exists_at(self, t: int) -> bool:
        return self.created <= t and (self.deleted is None or t < self.deleted)


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    id: str
    name: str
    image: str
    env: dict[str, str]
    disk: int
    workers_min: int
    workers_max: int
    data_center_ids: tuple[str, ...]
    network_volume_ids: tuple[str, ...]
    seconds_per_request: Decimal
    requests_per_hour: tuple[int, ...]  # 24, by UTC hour of day
    history: History
    gpu_type_id: str | None = None
    gpu_count: int = 1
    vcpu_count: int = 0
    # What a created endpoint was asked for (a scenario's endpoints keep the defaults).
    idle_timeout: int = 5
    scaling: tuple[str, Decimal] = ("QUEUE_DELAY", Decimal(4))
    template_id: str | None = None

    @property
    def created(self) -> int:
        return self.history[0][0]

    @property
    def deleted(self) -> int | None:
        return next((t for t, state in self.history if state == "DELETED"), None)

    def exists_at(self, t: int) -> bool:
        return self.created <= t and (self.deleted is None or t < self.deleted)


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    id: str
    name: str
    type: str
    gpu_type_id: str
    gpu_count_per_pod: int
    pod_count: int
    disk: int
    data_center_id: str
    image: str
    history: History
    template_id: str | None = None
    gpu_price_per_hr: Decimal | None = None
    network_volume_id: str | None = None

    @property
    def created(self) -> int:
        return self.history[0][0]

    @property
    def terminated(self) -> int | None:
        return next((t for t, state in self.history if state == "TERMINATED"), None)

    def exists_at(self, t: int) -> bool:
        return self.created <= t and (self.terminated is None or t < self.terminated)


@dataclass(frozen=True, slots=True)
class PublicEndpointUsage:
    since: int
    usd_per_hour: tuple[Decimal, ...]  # 24, by UTC hour of day


@dataclass(frozen=True)
class Scenario:
    name: str
    now: dt.datetime
    balance_usd: Decimal
    prices: Prices
    gpu_types: tuple[GpuTypeSpec, ...]
    templates: tuple[TemplateSpec, ...] = ()
    pods: tuple[PodSpec, ...] = ()
    network_volumes: tuple[VolumeSpec, ...] = ()
    endpoints: tuple[EndpointSpec, ...] = ()
    clusters: tuple[ClusterSpec, ...] = ()
    public_endpoints: PublicEndpointUsage | None = None

    def shifted(self, delta: dt.timedelta) -> "Scenario":
        """The same account with every time moved by `delta` (whole seconds)."""
        secs = int(delta.total_seconds())

        def move(history: History) -> History:
            return tuple((t + secs, state) for t, state in history)

        public = self.public_endpoints
        return dataclasses.replace(
            self,
            now=self.now + dt.timedelta(seconds=secs),
            pods=tuple(
                dataclasses.replace(
                    p, history=move(p.history), utilization=p.utilization.shifted(secs)
                )
                for p in self.pods
            ),
            network_volumes=tuple(
                dataclasses.replace(v, history=move(v.history)) for v in self.network_volumes
            ),
            endpoints=tuple(
                dataclasses.replace(e, history=move(e.history)) for e in self.endpoints
            ),
            clusters=tuple(dataclasses.replace(c, history=move(c.history)) for c in self.clusters),
            public_endpoints=public and dataclasses.replace(public, since=public.since + secs),
        )

    def anchored(self, now: dt.datetime) -> "Scenario":
        """Shifted by whole hours so that its `now` falls in the same hour as `now`.

        Whole hours keep every event at its minute within the hour, so hourly billing looks
        the same; the demo uses this to serve "the last 30 days" on the real clock.
        """
        delta_hours = (epoch(now) // HOUR) - (epoch(self.now) // HOUR)
        return self.shifted(dt.timedelta(hours=delta_hours))


def epoch(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone; the simulator works in UTC")
    return int(moment.timestamp() // 1)


def from_epoch(t: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, UTC)


def parse_time(text: str) -> int:
    moment = dt.datetime.fromisoformat(text)
    return epoch(moment)


def iso(t: int) -> str:
    # isoformat, unlike strftime's %Y, writes years before 1000 with four digits (0999-...).
    return from_epoch(t).isoformat()[:19] + "Z"


# Reading and writing the JSON format.


def _history(items: list, allowed: tuple[str, ...]) -> History:
    history = tuple((parse_time(when), state) for when, state in items)
    if not history:
        raise ValueError("a history needs at least one entry")
    for (earlier, _), (later, _) in zip(history, history[1:], strict=False):
        if later < earlier:
            raise ValueError(f"history out of order: {iso(later)} after {iso(earlier)}")
    unknown = {state for _, state in history} - set(allowed)
    if unknown:
        raise ValueError(f"unknown states {sorted(unknown)} (allowed: {', '.join(allowed)})")
    return history


def _prices(data: dict) -> Prices:
    values = {}
    for f in dataclasses.fields(Prices):
        key = _camel(f.name)
        if key in data:
            values[f.name] = int(data[key]) if f.type is int else Decimal(str(data[key]))
    return Prices(**values)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _gpu_type(data: dict) -> GpuTypeSpec:
    price = data["price"]
    serverless = price.get("serverless")
    return GpuTypeSpec(
        id=data["id"],
        name=data["name"],
        pool=data.get("pool"),
        manufacturer=data.get("manufacturer", "NVIDIA"),
        memory=int(data["memory"]),
        secure=bool(data["secure"]),
        community=bool(data["community"]),
        price_secure=Decimal(str(price["secure"])),
        price_community=Decimal(str(price["community"])),
        price_serverless=None if serverless is None else Decimal(str(serverless)),
        max_count_secure=int(data["maxCount"]["secure"]),
        max_count_community=int(data["maxCount"]["community"]),
    )


def _template(data: dict) -> TemplateSpec:
    return TemplateSpec(
        id=data["id"],
        name=data["name"],
        image=data["image"],
        env=dict(data.get("env", {})),
        disk=int(data.get("disk", 20)),
        ports=tuple(data.get("ports", ())),
    )


def _pod(data: dict, templates: dict[str, TemplateSpec]) -> PodSpec:
    template = templates.get(data.get("templateId") or "")
    if data.get("templateId") and template is None:
        raise ValueError(f"pod {data['id']}: unknown template {data['templateId']}")
    gpu, cpu = data.get("gpu"), data.get("cpu")
    if (gpu is None) == (cpu is None):
        raise ValueError(f"pod {data['id']}: needs exactly one of gpu or cpu")
    mounts = data.get("mounts") or {}
    persistent = mounts.get("persistent")
    network = (mounts.get("network") or [None])[0]
    cost = data.get("costPerHr")
    return PodSpec(
        id=data["id"],
        name=data["name"],
        image=data.get("image") or (template.image if template else ""),
        env={**(template.env if template else {}), **data.get("env", {})},
        disk=int(data.get("disk") or (template.disk if template else 20)),
        ports=tuple(data.get("ports") or (template.ports if template else ())),
        cloud=data.get("cloud", "SECURE"),
        data_center_id=data["dataCenterId"],
        history=_history(data["history"], POD_STATUSES),
        gpu_type_id=gpu and gpu["id"],
        gpu_count=int(gpu.get("count", 1)) if gpu else 0,
        cpu_id=cpu and cpu["id"],
        vcpu_count=int(cpu["vcpuCount"]) if cpu else 0,
        memory_gb=int(cpu.get("memory", 2 * int(cpu["vcpuCount"]))) if cpu else 0,
        template_id=template.id if template else None,
        volume_gb=int(persistent["size"]) if persistent else 0,
        volume_path=persistent["path"] if persistent else "/workspace",
        network_volume_id=network["volumeId"] if network else None,
        network_path=network["path"] if network else "/workspace",
        cost_per_hr=None if cost is None else Decimal(str(cost)),
        args=data.get("args", ""),
        utilization=_utilization(data),
    )


def _utilization(data: dict) -> UtilizationSpec:
    spec = data.get("utilization") or {}
    pattern = spec.get("pattern", "busy")
    if pattern not in UTILIZATION_PATTERNS:
        raise ValueError(f"pod {data['id']}: unknown utilization pattern {pattern!r}")
    idle_from = spec.get("idleFrom")
    if pattern == "idle_from" and idle_from is None:
        raise ValueError(f"pod {data['id']}: utilization idle_from needs idleFrom")
    return UtilizationSpec(pattern, parse_time(idle_from) if idle_from else None)


def _volume(data: dict) -> VolumeSpec:
    return VolumeSpec(
        id=data["id"],
        name=data["name"],
        size=int(data["size"]),
        data_center_id=data["dataCenterId"],
        type=data.get("type", "STANDARD"),
        history=_history(data["history"], ("CREATED", "DELETED")),
    )


def _endpoint(data: dict) -> EndpointSpec:
    gpu, cpu = data.get("gpu"), data.get("cpu")
    pattern = tuple(int(n) for n in data["requestsPerHour"])
    if len(pattern) != 24:
        raise ValueError(f"endpoint {data['id']}: requestsPerHour needs 24 numbers")
    return EndpointSpec(
        id=data["id"],
        name=data["name"],
        image=data["image"],
        env=dict(data.get("env", {})),
        disk=int(data.get("disk", 20)),
        workers_min=int(data["workers"]["min"]),
        workers_max=int(data["workers"]["max"]),
        data_center_ids=tuple(data.get("dataCenterIds", ())),
        network_volume_ids=tuple(data.get("networkVolumes", ())),
        seconds_per_request=Decimal(str(data["secondsPerRequest"])),
        requests_per_hour=pattern,
        history=_history(data["history"], ("CREATED", "DELETED")),
        gpu_type_id=gpu and gpu["id"],
        gpu_count=int(gpu.get("count", 1)) if gpu else 0,
        vcpu_count=int(cpu["vcpuCount"]) if cpu else 0,
    )


def _cluster(data: dict) -> ClusterSpec:
    price = data.get("gpuPricePerHr")
    return ClusterSpec(
        id=data["id"],
        name=data["name"],
        type=data["type"],
        gpu_type_id=data["gpuTypeId"],
        gpu_count_per_pod=int(data["gpuCountPerPod"]),
        pod_count=int(data["podCount"]),
        disk=int(data.get("disk", 100)),
        data_center_id=data["dataCenterId"],
        image=data["image"],
        history=_history(data["history"], ("RUNNING", "TERMINATED")),
        template_id=data.get("templateId"),
        gpu_price_per_hr=None if price is None else Decimal(str(price)),
    )


def scenario_from_dict(data: dict) -> Scenario:
    if data.get("format") != 1:
        raise ValueError(f"unsupported scenario format {data.get('format')!r} (expected 1)")
    templates = {t["id"]: _template(t) for t in data.get("templates", [])}
    public = data.get("publicEndpoints")
    scenario = Scenario(
        name=data["name"],
        now=dt.datetime.fromisoformat(data["now"]).astimezone(UTC),
        balance_usd=Decimal(str(data["balanceUsd"])),
        prices=_prices(data.get("prices", {})),
        gpu_types=tuple(_gpu_type(g) for g in data["gpuTypes"]),
        templates=tuple(templates.values()),
        pods=tuple(_pod(p, templates) for p in data.get("pods", [])),
        network_volumes=tuple(_volume(v) for v in data.get("networkVolumes", [])),
        endpoints=tuple(_endpoint(e) for e in data.get("endpoints", [])),
        clusters=tuple(_cluster(c) for c in data.get("clusters", [])),
        public_endpoints=public
        and PublicEndpointUsage(
            since=parse_time(public["since"]),
            usd_per_hour=tuple(Decimal(str(a)) for a in public["usdPerHour"]),
        ),
    )
    check_scenario(scenario)
    return scenario


def check_scenario(scenario: Scenario) -> None:
    """Refuse a scenario whose parts do not fit together, naming the first problem."""
    gpus = {g.id for g in scenario.gpu_types}
    volumes = {v.id: v for v in scenario.network_volumes}
    ids = [p.id for p in scenario.pods] + list(volumes) + [e.id for e in scenario.endpoints]
    ids += [c.id for c in scenario.clusters]
    if len(ids) != len(set(ids)):
        raise ValueError("scenario ids are not unique")
    for pod in scenario.pods:
        if pod.gpu_type_id and pod.gpu_type_id not in gpus and pod.cost_per_hr is None:
            raise ValueError(f"pod {pod.id}: unknown GPU type {pod.gpu_type_id}")
        if pod.network_volume_id and pod.network_volume_id not in volumes:
            raise ValueError(f"pod {pod.id}: unknown network volume {pod.network_volume_id}")
        if pod.network_volume_id and pod.volume_gb:
            raise ValueError(f"pod {pod.id}: a persistent volume and a network volume")
    for endpoint in scenario.endpoints:
        if endpoint.gpu_type_id and endpoint.gpu_type_id not in gpus:
            raise ValueError(f"endpoint {endpoint.id}: unknown GPU type {endpoint.gpu_type_id}")
    for cluster in scenario.clusters:
        if cluster.gpu_type_id not in gpus:
            raise ValueError(f"cluster {cluster.id}: unknown GPU type {cluster.gpu_type_id}")


def read_scenario(name_or_path: str | Path = "default") -> Scenario:
    """A scenario by name (a file in `scenarios/`) or by path (loader.load_scenario also makes
    generated ones)."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix != ".json" and "/" not in text:
        path = SCENARIO_DIR / f"{text}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SCENARIO_DIR.glob("*.json")))
        raise FileNotFoundError(f"no scenario {text!r} (built in: {known}, generated)")
    return scenario_from_dict(json.loads(path.read_text()))
