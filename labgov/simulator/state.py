"""The simulated account: resources, their histories, the clock and the balance.

Every method takes the lock, so the HTTP threads and a test's assertions see one consistent
state. Specs are immutable: an action replaces a pod's spec with one whose history is longer,
and billing meters are rebuilt from the new spec, so a billing response already being written
keeps the meters it started with.
"""

import dataclasses
import datetime as dt
import hashlib
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from labgov.runpod import schema
from labgov.simulator import billing, meters, records, render, windows
from labgov.simulator.billing import AnyMeter, Meter, Product
from labgov.simulator.scenario import (
    ClusterSpec,
    PodSpec,
    Scenario,
    UtilizationSpec,
    VolumeSpec,
    epoch,
    from_epoch,
)

BOOT_SECONDS_CREATE = 60  # a created pod is STARTING for this long, then RUNNING
BOOT_SECONDS_START = 30  # likewise after start or restart
DEFAULT_DATA_CENTER = {"SECURE": "US-KS-2", "COMMUNITY": "CA-MTL-1"}


class ApiError(Exception):
    """An answer the API gives as problem+json."""

    def __init__(self, status: int, detail: str, errors: list[str] | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors


class Clock:
    """Simulated time in whole seconds: fixed (moves only when told) or following the wall."""

    def __init__(self, now: int | None):
        self._fixed = now
        self._offset = 0

    @property
    def wall(self) -> bool:
        return self._fixed is None

    def now(self) -> int:
        if self._fixed is not None:
            return self._fixed
        return int(time.time()) + self._offset

    def set(self, t: int) -> None:
        if self._fixed is not None:
            self._fixed = t
        else:
            self._offset = t - int(time.time())

    def advance(self, seconds: int) -> None:
        self.set(self.now() + seconds)


class SimState:
    def __init__(self, scenario: Scenario, now: dt.datetime | str | None = None):
        self.scenario = scenario
        self.prices = scenario.prices
        self.catalog = {g.id: g for g in scenario.gpu_types}
        self.templates = {t.id: t for t in scenario.templates}
        self._lock = threading.RLock()
        if now == "wall":
            self._clock = Clock(None)
        else:
            self._clock = Clock(epoch(now if isinstance(now, dt.datetime) else scenario.now))
        self._balance = scenario.balance_usd
        self._pods: dict[str, PodSpec] = {p.id: p for p in scenario.pods}
        self._volumes: dict[str, VolumeSpec] = {v.id: v for v in scenario.network_volumes}
        self._endpoints = {e.id: e for e in scenario.endpoints}
        self._clusters = {c.id: c for c in scenario.clusters}
        self._cluster_pods = {
            c.id: _cluster_members(
                c, c.gpu_price_per_hr or self.catalog[c.gpu_type_id].price_secure
            )
            for c in scenario.clusters
        }
        self._created = 0
        self._pod_meters: dict[str, tuple[PodSpec, Meter | None]] = {}
        self._volume_meters: list[Meter] | None = None
        self._fixed_meters: dict[str, list[AnyMeter]] = {
            billing.SERVERLESS.kind: [
                meters.endpoint_meter(e, self.prices, self.catalog)
                for e in sorted(scenario.endpoints, key=lambda e: e.id)
            ],
            billing.CLUSTER.kind: [
                meters.cluster_meter(c, self.prices, self.catalog)
                for c in sorted(scenario.clusters, key=lambda c: c.id)
            ],
            billing.ENDPOINT.kind: [meters.public_endpoint_meter(scenario.public_endpoints)]
            if scenario.public_endpoints
            else [],
        }
        # Build the meters now rather than on the first billing request.
        self.meters(billing.POD)
        self.meters(billing.NETWORK_VOLUME)

    # The clock and the balance.

    def now_epoch(self) -> int:
        with self._lock:
            return self._clock.now()

    @property
    def now(self) -> dt.datetime:
        return from_epoch(self.now_epoch())

    @property
    def wall_clock(self) -> bool:
        return self._clock.wall

    def set_now(self, moment: dt.datetime) -> None:
        with self._lock:
            self._clock.set(epoch(moment))

    def advance(self, *, hours: float = 0, minutes: float = 0, seconds: float = 0) -> None:
        with self._lock:
            self._clock.advance(int(hours * 3600 + minutes * 60 + seconds))

    @property
    def balance_usd(self) -> Decimal:
        with self._lock:
            return self._balance

    def set_balance(self, amount: Decimal) -> None:
        with self._lock:
            self._balance = Decimal(amount)

    def spend_per_hr_usd(self) -> Decimal:
        """What the account's pods (cluster pods included) cost per hour now: GraphQL's
        `currentSpendPerHr`."""
        pods = self.list_pods(include_cluster_pods=True)
        return sum((Decimal(p["cost"]) for p in pods), Decimal(0))

    # Reads, as the API's JSON objects.

    def list_pods(self, *, include_cluster_pods: bool = False, at: int | None = None) -> list[dict]:
        """The pods as GET /v2/pods lists them now, or as it listed them at `at` (an epoch
        second in the past: the demo's utilization history, /_sim/pods-at)."""
        with self._lock:
            now = self._clock.now()
            if at is not None:
                if at > now:
                    raise ValueError("at is in the simulator's future")
                now = at
            pods = list(self._pods.values())
            if include_cluster_pods:
                pods += [p for members in self._cluster_pods.values() for p in members]
            return [
                self._pod_json(pod, status, now)
                for pod in pods
                if (status := pod.status_at(now)) not in (None, "TERMINATED")
            ]

    def get_pod(self, pod_id: str) -> dict:
        with self._lock:
            now = self._clock.now()
            pod = self._find_pod(pod_id)
            status = pod.status_at(now) if pod else None
            if pod is None or status in (None, "TERMINATED"):
                raise ApiError(404, f"pod {pod_id} not found")
            return self._pod_json(pod, status, now)

    def pod_spec(self, pod_id: str) -> PodSpec:
        with self._lock:
            pod = self._find_pod(pod_id)
            if pod is None:
                raise KeyError(pod_id)
            return pod

    def set_utilization(self, pod_id: str, pattern: str, idle_from: dt.datetime | None = None):
        """Change what a pod's GPUs report from now on (tests and the demo)."""
        with self._lock:
            pod = self._find_pod(pod_id)
            if pod is None or pod.id not in self._pods:
                raise KeyError(pod_id)
            spec = UtilizationSpec(pattern, epoch(idle_from) if idle_from else None)
            self._pods[pod_id] = dataclasses.replace(pod, utilization=spec)

    def pod_status(self, pod_id: str) -> str | None:
        """The pod's status now, TERMINATED included (None if unknown or not yet created)."""
        with self._lock:
            pod = self._find_pod(pod_id)
            return pod.status_at(self._clock.now()) if pod else None

    def list_volumes(self) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            return [render.volume_json(v) for v in self._volumes.values() if v.exists_at(now)]

    def get_volume(self, volume_id: str) -> dict:
        with self._lock:
            volume = self._volumes.get(volume_id)
            if volume is None or not volume.exists_at(self._clock.now()):
                raise ApiError(404, f"network volume {volume_id} not found")
            return render.volume_json(volume)

    def list_endpoints(self) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            return [
                render.endpoint_json(e, self.catalog)
                for e in self._endpoints.values()
                if e.exists_at(now)
            ]

    def get_endpoint(self, endpoint_id: str) -> dict:
        with self._lock:
            endpoint = self._endpoints.get(endpoint_id)
            if endpoint is None or not endpoint.exists_at(self._clock.now()):
                raise ApiError(404, f"endpoint {endpoint_id} not found")
            return render.endpoint_json(endpoint, self.catalog)

    def list_clusters(self) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            return [self._cluster_json(c, now) for c in self._clusters.values() if c.exists_at(now)]

    def get_cluster(self, cluster_id: str) -> dict:
        with self._lock:
            now = self._clock.now()
            return self._cluster_json(self._live_cluster(cluster_id, now), now)

    def cluster_pods(self, cluster_id: str) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            cluster = self._live_cluster(cluster_id, now)
            return [self._pod_json(p, "RUNNING", now) for p in self._cluster_pods[cluster.id]]

    def gpu_types(self) -> list[dict]:
        return [render.gpu_type_json(g) for g in self.scenario.gpu_types]

    def gpu_type(self, gpu_id: str) -> dict:
        gpu = self.catalog.get(gpu_id)
        if gpu is None:
            raise ApiError(404, f"GPU type {gpu_id} not found")
        return render.gpu_type_json(gpu)

    def summary(self) -> dict:
        """What GET /_sim/state shows: the clock, the balance and every resource's status."""
        with self._lock:
            now = self._clock.now()
            return {
                "now": from_epoch(now).isoformat(),
                "wallClock": self._clock.wall,
                "balanceUsd": self._balance,
                "pods": [
                    {"id": p.id, "name": p.name, "status": p.status_at(now)}
                    for p in self._pods.values()
                ],
                "networkVolumes": [
                    {"id": v.id, "name": v.name, "exists": v.exists_at(now)}
                    for v in self._volumes.values()
                ],
                "endpoints": [
                    {"id": e.id, "name": e.name, "exists": e.exists_at(now)}
                    for e in self._endpoints.values()
                ],
                "clusters": [
                    {"id": c.id, "name": c.name, "exists": c.exists_at(now)}
                    for c in self._clusters.values()
                ],
            }

    # Writes.

    def pod_action(self, pod_id: str, action: str) -> dict | None:
        """Apply start/stop/restart/terminate at the simulated now; None after terminate."""
        with self._lock:
            now = self._clock.now()
            pod = self._find_pod(pod_id)
            status = pod.status_at(now) if pod else None
            if pod is None or status is None:
                raise ApiError(404, f"pod {pod_id} not found")
            if pod.cluster_id:
                raise ApiError(409, f"pod {pod_id} belongs to cluster {pod.cluster_id}")
            if action not in render.POD_ACTIONS[status]:
                allowed = ", ".join(render.POD_ACTIONS[status]) or "none"
                raise ApiError(409, f"cannot {action} a pod that is {status} (allowed: {allowed})")
            events = {
                "stop": [(now, "EXITED")],
                "terminate": [(now, "TERMINATED")],
                "start": [(now, "STARTING"), (now + BOOT_SECONDS_START, "RUNNING")],
                "restart": [(now, "STARTING"), (now + BOOT_SECONDS_START, "RUNNING")],
            }[action]
            # Transitions scheduled after now (a boot in progress) are overtaken by this one.
            past = tuple(event for event in pod.history if event[0] <= now)
            pod = dataclasses.replace(pod, history=past + tuple(events))
            self._pods[pod.id] = pod
            if action == "terminate":
                return None
            return self._pod_json(pod, pod.status_at(now), now)

    def create_pod(self, body: Any) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        problems = schema.errors("CreatePodRequest", body, integers_strict=True)
        if problems:
            raise ApiError(422, "request validation failed", problems)
        # Rules across fields are the handler's, not the contract's: the spec answers 400.
        if ("gpu" in body) == ("cpu" in body):
            raise ApiError(400, "supply exactly one of gpu or cpu", ["$: gpu xor cpu"])
        mounts = body.get("mounts") or {}
        if mounts.get("persistent") and mounts.get("network"):
            raise ApiError(400, "mounts holds a persistent or a network volume, not both")
        with self._lock:
            now = self._clock.now()
            pod = self._new_pod(body, now)
            cost = meters.pod_cost_per_hr(pod, self.prices, self.catalog)
            if self._balance < cost:
                raise ApiError(
                    402,
                    f"insufficient balance: ${self._balance} does not cover one hour "
                    f"of this pod (${cost})",
                )
            self._pods[pod.id] = pod
            return self._pod_json(pod, pod.status_at(now), now)

    def create_volume(self, body: Any) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        problems = schema.errors("CreateNetworkVolumeRequest", body, integers_strict=True)
        if problems:
            raise ApiError(422, "request validation failed", problems)
        with self._lock:
            now = self._clock.now()
            self._created += 1
            seed = f"{self.scenario.name}/volume/{self._created}".encode()
            volume = VolumeSpec(
                id=hashlib.blake2s(seed, digest_size=5).hexdigest(),
                name=body["name"],
                size=body["size"],
                data_center_id=body["dataCenter"],
                type=body.get("type", "STANDARD"),
                history=((now, "CREATED"),),
            )
            self._volumes[volume.id] = volume
            self._volume_meters = None
            return render.volume_json(volume)

    def delete_volume(self, volume_id: str) -> None:
        with self._lock:
            now = self._clock.now()
            volume = self._volumes.get(volume_id)
            if volume is None or not volume.exists_at(now):
                raise ApiError(404, f"network volume {volume_id} not found")
            users = [
                p.id
                for p in self._pods.values()
                if p.network_volume_id == volume_id and p.status_at(now) not in (None, "TERMINATED")
            ]
            users += [
                e.id
                for e in self._endpoints.values()
                if volume_id in e.network_volume_ids and e.exists_at(now)
            ]
            if users:
                raise ApiError(409, f"network volume {volume_id} is in use by {', '.join(users)}")
            history = tuple(e for e in volume.history if e[0] <= now) + ((now, "DELETED"),)
            self._volumes[volume_id] = dataclasses.replace(volume, history=history)
            self._volume_meters = None

    # Billing.

    def meters(self, product: Product) -> list[AnyMeter]:
        with self._lock:
            if product is billing.POD:
                return self._pod_meter_list()
            if product is billing.NETWORK_VOLUME:
                if self._volume_meters is None:
                    volumes = sorted(self._volumes.values(), key=lambda v: v.id)
                    self._volume_meters = meters.volume_meters(volumes, self.prices)
                return list(self._volume_meters)
            return list(self._fixed_meters[product.kind])

    def warm_up(self) -> None:
        """Work out every hour cut by an edge up to now, so no billing request has to.

        Those hours are the costly part of a first request over history; the server does this
        in a background thread while the first client is busy with what it received.
        """
        now = self.now_epoch()
        for product in (billing.POD, billing.NETWORK_VOLUME):
            for meter in self.meters(product):
                meter.runs(meter.start - meter.start % 3600, now, now)

    def billing_body(self, product: Product | None, params: dict[str, str]) -> Iterator[bytes]:
        """The JSON body of a billing route, in pieces; `product` None is the whole account.

        Raises windows.QueryError for a query the API answers with 400.
        """
        with self._lock:
            now = self._clock.now()
            window = windows.resolve_window(params, now)
            if product is None:
                every = [m for p in billing.PRODUCTS for m in self.meters(p)]
                return records.account_billing(every, window, now)
            found = self.meters(product)
        id_filter = params.get(product.id_field) if product.id_field else None
        return records.resource_billing(product, found, window, now, id_filter)

    # Helpers (called with the lock held).

    def _find_pod(self, pod_id: str) -> PodSpec | None:
        pod = self._pods.get(pod_id)
        if pod is None:
            pod = next(
                (p for members in self._cluster_pods.values() for p in members if p.id == pod_id),
                None,
            )
        return pod

    def _pod_json(self, pod: PodSpec, status: str, now: int) -> dict:
        cost = meters.pod_cost_per_hr(pod, self.prices, self.catalog)
        return render.pod_json(pod, status, now, cost)

    def _live_cluster(self, cluster_id: str, now: int) -> ClusterSpec:
        cluster = self._clusters.get(cluster_id)
        if cluster is None or not cluster.exists_at(now):
            raise ApiError(404, f"cluster {cluster_id} not found")
        return cluster

    def _cluster_json(self, cluster: ClusterSpec, now: int) -> dict:
        return render.cluster_json(cluster, self._cluster_pods[cluster.id], "RUNNING")

    def _pod_meter_list(self) -> list[AnyMeter]:
        found = []
        for pod_id in sorted(self._pods):
            pod = self._pods[pod_id]
            cached = self._pod_meters.get(pod_id)
            if cached is None or cached[0] is not pod:
                cached = (pod, meters.pod_meter(pod, self.prices, self.catalog))
                self._pod_meters[pod_id] = cached
            if cached[1] is not None:
                found.append(cached[1])
        return found

    def _new_pod(self, body: dict, now: int) -> PodSpec:
        template = None
        if "templateId" in body:
            template = self.templates.get(body["templateId"])
            if template is None:
                raise ApiError(400, f"unknown template {body['templateId']}")
        cloud = body.get("cloud", "SECURE")
        gpu_id = gpu_count = None
        if "gpu" in body:
            gpu_id, gpu_count = body["gpu"]["id"], body["gpu"].get("count", 1)
            gpu = self.catalog.get(gpu_id)
            if gpu is None:
                raise ApiError(400, f"unknown GPU type {gpu_id}")
            if not gpu.available(cloud):
                raise ApiError(400, f"{gpu_id} is not offered in {cloud} cloud")
            if gpu_count > gpu.max_count(cloud):
                limit = gpu.max_count(cloud)
                raise ApiError(400, f"at most {limit} x {gpu_id} on one pod in {cloud} cloud")
        mounts = body.get("mounts") or {}
        persistent = mounts.get("persistent")
        network = (mounts.get("network") or [None])[0]
        data_center = (body.get("dataCenterIds") or [None])[0]
        if network:
            volume = self._volumes.get(network["volumeId"])
            if volume is None or not volume.exists_at(now):
                raise ApiError(400, f"unknown network volume {network['volumeId']}")
            if cloud != "SECURE":
                raise ApiError(400, "network volumes exist only in SECURE cloud")
            if data_center and data_center != volume.data_center_id:
                raise ApiError(400, f"network volume {volume.id} is in {volume.data_center_id}")
            data_center = volume.data_center_id
        image = body.get("image") or (template.image if template else "")
        return PodSpec(
            id=self._next_pod_id(),
            name=body["name"],
            image=image,
            env={**(template.env if template else {}), **body.get("env", {})},
            disk=body.get("disk") or (template.disk if template else 50),
            ports=tuple(body.get("ports") or (template.ports if template else ())),
            cloud=cloud,
            data_center_id=data_center or DEFAULT_DATA_CENTER[cloud],
            history=((now, "STARTING"), (now + BOOT_SECONDS_CREATE, "RUNNING")),
            gpu_type_id=gpu_id,
            gpu_count=gpu_count or 0,
            cpu_id=body["cpu"]["id"] if "cpu" in body else None,
            vcpu_count=body["cpu"]["vcpuCount"] if "cpu" in body else 0,
            memory_gb=2 * body["cpu"]["vcpuCount"] if "cpu" in body else 0,
            template_id=template.id if template else None,
            volume_gb=persistent["size"] if persistent else 0,
            volume_path=persistent["path"] if persistent else "/workspace",
            network_volume_id=network["volumeId"] if network else None,
            network_path=network["path"] if network else "/workspace",
            args=body.get("args", ""),
        )

    def _next_pod_id(self) -> str:
        while True:
            self._created += 1
            seed = f"{self.scenario.name}/created/{self._created}".encode()
            pod_id = hashlib.blake2s(seed, digest_size=7).hexdigest()
            if self._find_pod(pod_id) is None:
                return pod_id


def _cluster_members(cluster: ClusterSpec, gpu_price: Decimal) -> list[PodSpec]:
    roles = {"SLURM": ("SLURM_CONTROLLER", "SLURM_COMPUTE"), "RAY": ("RAY_HEAD", "RAY_WORKER")}
    history = tuple(
        (t, "RUNNING" if state == "RUNNING" else "TERMINATED") for t, state in cluster.history
    )
    members = []
    for rank in range(cluster.pod_count):
        role = roles.get(cluster.type)
        pod_id = hashlib.blake2s(f"{cluster.id}/{rank}".encode(), digest_size=7).hexdigest()
        members.append(
            PodSpec(
                id=pod_id,
                name=f"{cluster.name}-{rank}",
                image=cluster.image,
                env={},
                disk=cluster.disk,
                ports=("22/tcp",),
                cloud="SECURE",
                data_center_id=cluster.data_center_id,
                history=history,
                gpu_type_id=cluster.gpu_type_id,
                gpu_count=cluster.gpu_count_per_pod,
                template_id=cluster.template_id,
                # Shown on the pod; billing goes through the cluster, never the member pods.
                cost_per_hr=gpu_price * cluster.gpu_count_per_pod,
                cluster_id=cluster.id,
                cluster_rank=rank,
                cluster_role=role and role[0 if rank == 0 else 1],
            )
        )
    return members
