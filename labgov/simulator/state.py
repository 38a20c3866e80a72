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
    EndpointSpec,
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
        # Each endpoint's versions, oldest first, each billing from its hour (see update).
        self._endpoint_versions: dict[str, list[EndpointSpec]] = {
            e.id: [e] for e in scenario.endpoints
        }
        self._fixed_meters: dict[str, list[AnyMeter]] = {
            billing.SERVERLESS.kind: [],
            billing.CLUSTER.kind: [],
            billing.ENDPOINT.kind: [meters.public_endpoint_meter(scenario.public_endpoints)]
            if scenario.public_endpoints
            else [],
        }
        self._rebuild_endpoint_meters()
        self._rebuild_cluster_meters()
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
            return render.volume_json(self._live("network volume", volume_id, self._clock.now()))

    def list_endpoints(self) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            return [self._endpoint_json(e) for e in self._endpoints.values() if e.exists_at(now)]

    def get_endpoint(self, endpoint_id: str) -> dict:
        with self._lock:
            return self._endpoint_json(self._live("endpoint", endpoint_id, self._clock.now()))

    def endpoint_workers(self, endpoint_id: str) -> dict:
        with self._lock:
            now = self._clock.now()
            endpoint = self._live("endpoint", endpoint_id, now)
            return render.endpoint_workers_json(endpoint, (now // 3600) % 24)

    def endpoint_workers_at(self, at: int) -> dict[str, dict]:
        """Every endpoint's workers as GET /v2/serverless/{id}/workers gave them at `at` (an
        epoch second in the past: the demo's history, /_sim/endpoint-workers-at)."""
        with self._lock:
            if at > self._clock.now():
                raise ValueError("at is in the simulator's future")
            return {
                e.id: render.endpoint_workers_json(e, (at // 3600) % 24)
                for e in self._endpoints.values()
                if e.exists_at(at)
            }

    def _live(self, kind: str, item_id: str, now: int):
        """The endpoint, cluster or network volume of that id that exists at `now`, else the
        404 Runpod answers."""
        items = {
            "endpoint": self._endpoints,
            "cluster": self._clusters,
            "network volume": self._volumes,
        }[kind]
        item = items.get(item_id)
        if item is None or not item.exists_at(now):
            raise ApiError(404, f"{kind} {item_id} not found")
        return item

    def _endpoint_json(self, endpoint: EndpointSpec) -> dict:
        return render.endpoint_json(endpoint, self.catalog)

    def list_clusters(self) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            return [self._cluster_json(c, now) for c in self._clusters.values() if c.exists_at(now)]

    def get_cluster(self, cluster_id: str) -> dict:
        with self._lock:
            now = self._clock.now()
            return self._cluster_json(self._live("cluster", cluster_id, now), now)

    def cluster_pods(self, cluster_id: str) -> list[dict]:
        with self._lock:
            now = self._clock.now()
            cluster = self._live("cluster", cluster_id, now)
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
        _validated("CreatePodRequest", body)
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
        _validated("CreateNetworkVolumeRequest", body)
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
            volume = self._live("network volume", volume_id, now)
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

    # Serverless endpoints and clusters: create, update, delete.

    def create_endpoint(self, body: Any) -> dict:
        _validated("CreateEndpointRequest", body)
        if ("gpu" in body) == ("cpu" in body):
            raise ApiError(400, "supply exactly one of gpu or cpu", ["$: gpu xor cpu"])
        if "cpu" in body:
            raise ApiError(400, "the simulator creates GPU endpoints only")
        with self._lock:
            now = self._clock.now()
            template = self._template(body)
            gpu = self._pool_gpu(body["gpu"]["pools"])
            count = body["gpu"].get("count", 1)
            if count > gpu.max_count("SECURE"):
                raise ApiError(400, f"at most {gpu.max_count('SECURE')} x {gpu.id} per worker")
            data_centers = tuple(body.get("dataCenterIds") or ())
            volumes = tuple(body.get("networkVolumes") or ())
            for volume_id in volumes:
                volume = self._live_volume(volume_id, now)
                if data_centers and volume.data_center_id not in data_centers:
                    raise ApiError(
                        400,
                        f"network volume {volume_id} is in {volume.data_center_id}, not in "
                        f"the endpoint's data centers ({', '.join(data_centers)})",
                    )
            workers = body.get("workers") or {}
            minimum, maximum = workers.get("min", 0), workers.get("max", 3)
            if minimum > maximum:
                raise ApiError(400, f"workers.min ({minimum}) is more than workers.max ({maximum})")
            scaling = _scaling(body["scaling"])
            _idle_timeout_applies(scaling, workers)
            endpoint = EndpointSpec(
                id=self._next_id("endpoint", 6),
                name=body["name"],
                image=body.get("image") or (template.image if template else ""),
                env={**(template.env if template else {}), **body.get("env", {})},
                disk=body.get("disk") or (template.disk if template else 10),
                workers_min=minimum,
                workers_max=maximum,
                data_center_ids=data_centers,
                network_volume_ids=volumes,
                seconds_per_request=Decimal(0),
                requests_per_hour=(0,) * 24,
                history=((now, "CREATED"),),
                gpu_type_id=gpu.id,
                gpu_count=count,
                idle_timeout=workers.get("idleTimeout", 5),
                scaling=scaling,
                template_id=template.id if template else None,
            )
            self._require_balance(
                self._endpoint_hourly(endpoint), "this endpoint's minimum workers"
            )
            self._endpoints[endpoint.id] = endpoint
            self._endpoint_versions[endpoint.id] = [endpoint]
            self._rebuild_endpoint_meters()
            return render.endpoint_json(endpoint, self.catalog)

    def update_endpoint(self, endpoint_id: str, body: Any) -> dict:
        """PATCH: a change of what bills (workers, GPUs) bills from the next whole hour, so
        no hour is billed by two versions at once (the simulator's simplification)."""
        _validated("UpdateEndpointRequest", body)
        with self._lock:
            now = self._clock.now()
            endpoint = self._live("endpoint", endpoint_id, now)
            changes: dict[str, Any] = {}
            if "name" in body:
                changes["name"] = body["name"]
            if "image" in body:
                changes["image"] = body["image"]
            if "workers" in body:
                workers = body["workers"]
                changes["workers_min"] = workers.get("min", endpoint.workers_min)
                changes["workers_max"] = workers.get("max", endpoint.workers_max)
                changes["idle_timeout"] = workers.get("idleTimeout", endpoint.idle_timeout)
                low, high = changes["workers_min"], changes["workers_max"]
                if low > high:
                    raise ApiError(400, f"workers.min ({low}) is above workers.max ({high})")
            if "scaling" in body:
                changes["scaling"] = _scaling(body["scaling"])
            _idle_timeout_applies(
                changes.get("scaling", endpoint.scaling), body.get("workers") or {}
            )
            if "networkVolumes" in body:
                for volume_id in body["networkVolumes"]:
                    self._live_volume(volume_id, now)
                changes["network_volume_ids"] = tuple(body["networkVolumes"])
            if "dataCenterIds" in body:
                changes["data_center_ids"] = tuple(body["dataCenterIds"])
            if "gpu" in body:
                gpu = body["gpu"]
                if "pools" in gpu:
                    changes["gpu_type_id"] = self._pool_gpu(gpu["pools"]).id
                if "count" in gpu:
                    changes["gpu_count"] = gpu["count"]
            updated = dataclasses.replace(endpoint, **changes)
            self._endpoints[endpoint_id] = updated
            versions = self._endpoint_versions[endpoint_id]
            from_hour = now - now % 3600 + 3600
            # The new version bills from the next hour; earlier versions keep their hours.
            versions.append(dataclasses.replace(updated, history=((from_hour, "CREATED"),)))
            self._rebuild_endpoint_meters()
            return render.endpoint_json(updated, self.catalog)

    def delete_endpoint(self, endpoint_id: str) -> None:
        with self._lock:
            now = self._clock.now()
            endpoint = self._live("endpoint", endpoint_id, now)
            self._endpoints[endpoint_id] = _ended(endpoint, now, "DELETED")
            # A change waiting for the next hour never bills.
            started = [v for v in self._endpoint_versions[endpoint_id] if v.created <= now]
            self._endpoint_versions[endpoint_id] = [_ended(v, now, "DELETED") for v in started]
            self._rebuild_endpoint_meters()

    def create_cluster(self, body: Any) -> dict:
        _validated("CreateClusterRequest", body)
        compute = body["compute"]
        with self._lock:
            now = self._clock.now()
            gpu = self.catalog.get(compute["gpuTypeId"])
            if gpu is None:
                raise ApiError(400, f"unknown GPU type {compute['gpuTypeId']}")
            if not gpu.available("SECURE"):
                raise ApiError(400, f"{gpu.id} is not offered in SECURE cloud")
            if compute["gpuCountPerPod"] > gpu.max_count("SECURE"):
                raise ApiError(
                    400, f"at most {gpu.max_count('SECURE')} x {gpu.id} on one pod of a cluster"
                )
            data_center = (body.get("dataCenterIds") or [None])[0]
            network = ((body.get("mounts") or {}).get("network") or [None])[0]
            if network:
                volume = self._live_volume(network["volumeId"], now)
                if data_center and data_center != volume.data_center_id:
                    raise ApiError(
                        400,
                        f"network volume {volume.id} is in {volume.data_center_id}, not in "
                        f"{data_center}: a cluster mounts a volume of its own data center",
                    )
                data_center = volume.data_center_id
            cluster = ClusterSpec(
                id=self._next_id("cluster", 6),
                name=body["name"],
                type=body["type"],
                gpu_type_id=gpu.id,
                gpu_count_per_pod=compute["gpuCountPerPod"],
                pod_count=compute["podCount"],
                disk=body.get("disk") or 50,
                data_center_id=data_center or DEFAULT_DATA_CENTER["SECURE"],
                image=body.get("image", ""),
                history=((now, "RUNNING"),),
                network_volume_id=network["volumeId"] if network else None,
            )
            hourly = cluster.pod_count * cluster.gpu_count_per_pod * gpu.price_secure
            self._require_balance(hourly, "this cluster")
            self._clusters[cluster.id] = cluster
            self._cluster_pods[cluster.id] = _cluster_members(cluster, gpu.price_secure)
            self._rebuild_cluster_meters()
            return self._cluster_json(cluster, now)

    def update_cluster(self, cluster_id: str, body: Any) -> dict:
        _validated("UpdateClusterRequest", body)
        with self._lock:
            now = self._clock.now()
            cluster = dataclasses.replace(self._live("cluster", cluster_id, now), name=body["name"])
            self._clusters[cluster_id] = cluster
            return self._cluster_json(cluster, now)

    def delete_cluster(self, cluster_id: str) -> None:
        with self._lock:
            now = self._clock.now()
            cluster = _ended(self._live("cluster", cluster_id, now), now, "TERMINATED")
            self._clusters[cluster_id] = cluster
            price = cluster.gpu_price_per_hr or self.catalog[cluster.gpu_type_id].price_secure
            self._cluster_pods[cluster_id] = _cluster_members(cluster, price)
            self._rebuild_cluster_meters()

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

    def _template(self, body: dict):
        if "templateId" not in body:
            return None
        template = self.templates.get(body["templateId"])
        if template is None:
            raise ApiError(400, f"unknown template {body['templateId']}")
        return template

    def _pool_gpu(self, pools: list[str]):
        for pool in pools:
            for gpu in self.catalog.values():
                if pool in (gpu.pool, gpu.id) and gpu.price_serverless is not None:
                    return gpu
        raise ApiError(400, f"no serverless GPU in the pools {', '.join(pools)}")

    def _live_volume(self, volume_id: str, now: int) -> VolumeSpec:
        volume = self._volumes.get(volume_id)
        if volume is None or not volume.exists_at(now):
            raise ApiError(400, f"unknown network volume {volume_id}")
        return volume

    def _endpoint_hourly(self, endpoint: EndpointSpec) -> Decimal:
        gpu = self.catalog[endpoint.gpu_type_id]
        price = gpu.price_serverless or gpu.price_secure
        return price * endpoint.gpu_count * endpoint.workers_min

    def _require_balance(self, hourly: Decimal, what: str) -> None:
        if self._balance < hourly:
            raise ApiError(
                402,
                f"insufficient balance: ${self._balance} does not cover one hour of {what} "
                f"(${hourly})",
            )

    def _next_id(self, kind: str, size: int) -> str:
        while True:
            self._created += 1
            seed = f"{self.scenario.name}/{kind}/{self._created}".encode()
            new_id = hashlib.blake2s(seed, digest_size=size).hexdigest()
            if new_id not in self._endpoints and new_id not in self._clusters:
                return new_id

    def _rebuild_endpoint_meters(self) -> None:
        found: list[AnyMeter] = []
        for endpoint_id in sorted(self._endpoint_versions):
            versions = self._endpoint_versions[endpoint_id]
            pieces = []
            for i, version in enumerate(versions):
                following = versions[i + 1].created if i + 1 < len(versions) else None
                if following is not None:
                    ends = (following, version.deleted or following)
                    version = _ended(version, min(ends), "DELETED")
                pieces.append(meters.endpoint_meter(version, self.prices, self.catalog))
            found.append(pieces[0] if len(pieces) == 1 else meters.ChainedMeter(pieces))
        self._fixed_meters[billing.SERVERLESS.kind] = found

    def _rebuild_cluster_meters(self) -> None:
        self._fixed_meters[billing.CLUSTER.kind] = [
            meters.cluster_meter(c, self.prices, self.catalog)
            for c in sorted(self._clusters.values(), key=lambda c: c.id)
        ]

    def _next_pod_id(self) -> str:
        while True:
            self._created += 1
            seed = f"{self.scenario.name}/created/{self._created}".encode()
            pod_id = hashlib.blake2s(seed, digest_size=7).hexdigest()
            if self._find_pod(pod_id) is None:
                return pod_id


def _validated(request_schema: str, body: Any) -> None:
    """A request body as the spec describes it: a JSON object (else 400) whose fields match
    `request_schema` (else 422, each problem named)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    problems = schema.errors(request_schema, body, integers_strict=True)
    if problems:
        raise ApiError(422, "request validation failed", problems)


def _idle_timeout_applies(scaling: tuple[str, Decimal], workers: dict) -> None:
    """The spec: a queue endpoint scaling on request count has no idle timeout; one sent for
    it is refused (on create and update), and none is listed."""
    if scaling[0] == "REQUEST_COUNT" and "idleTimeout" in workers:
        raise ApiError(
            400, "workers.idleTimeout does not apply to an endpoint scaling on requestCount"
        )


def _scaling(body: dict) -> tuple[str, Decimal]:
    if body["type"] == "REQUEST_COUNT":
        return ("REQUEST_COUNT", Decimal(body["requestCount"]))
    return ("QUEUE_DELAY", Decimal(str(body["queueDelay"])))


def _ended(spec, t: int, state: str):
    """The spec with its history cut at `t` and ended there (DELETED or TERMINATED)."""
    if any(s == state for _, s in spec.history):
        return spec
    past = tuple(e for e in spec.history if e[0] <= t)
    return dataclasses.replace(spec, history=(*past, (t, state)))


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
