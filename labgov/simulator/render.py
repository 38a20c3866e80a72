"""Resources as the API's JSON objects, and JSON text with exact decimal numbers."""

import hashlib
import json
import math
import os
import re
from decimal import Decimal
from http import HTTPStatus
from typing import Any

from labgov.simulator.scenario import (
    ClusterSpec,
    EndpointSpec,
    GpuTypeSpec,
    PodSpec,
    VolumeSpec,
    iso,
)

# Which actions each status allows (and the pod's `actions` field lists).
POD_ACTIONS = {
    "RUNNING": ("stop", "restart", "terminate"),
    "EXITED": ("start", "terminate"),
    "ERROR": ("start", "terminate"),
    "PROVISIONING": ("stop", "terminate"),
    "STARTING": ("stop", "terminate"),
    "TERMINATED": (),
}
BILLS_COMPUTE = frozenset({"PROVISIONING", "STARTING", "RUNNING"})  # `cost` is shown

# Decimals go through json.dumps as marked strings, then lose their quotes: the number text
# is exactly the Decimal's, never a float's. The mark is random so no name can forge it.
_MARK = "~" + os.urandom(6).hex() + "~"
_MARKED = re.compile('"' + re.escape(_MARK) + r"(-?[0-9]+(?:\.[0-9]+)?)" + re.escape(_MARK) + '"')


def _encode_decimal(value: Any) -> str:
    if isinstance(value, Decimal):
        return f"{_MARK}{value:f}{_MARK}"
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    text = json.dumps(value, default=_encode_decimal, separators=(",", ":"), ensure_ascii=False)
    return _MARKED.sub(r"\1", text).encode()


def problem(status: int, detail: str, errors: list[str] | None = None) -> dict:
    body: dict[str, Any] = {"title": HTTPStatus(status).phrase, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return body


def _noise(seed: str, low: int, high: int) -> int:
    """A stable pseudo-random number for values that only need to look alive."""
    digest = hashlib.blake2s(seed.encode(), digest_size=4).digest()
    return low + int.from_bytes(digest) % (high - low + 1)


def started_at(pod: PodSpec, now: int) -> int | None:
    """When the pod's latest run began (kept while stopped); None if it never ran."""
    started, previous = None, None
    for when, status in pod.history:
        if when > now:
            break
        if status == "STARTING" or (
            status == "RUNNING" and previous not in ("STARTING", "RUNNING")
        ):
            started = when
        previous = status
    return started


def pod_json(pod: PodSpec, status: str, now: int, cost_per_hr: Decimal) -> dict:
    started = started_at(pod, now)
    body: dict[str, Any] = {
        "id": pod.id,
        "name": pod.name,
        "status": status,
        "actions": [] if pod.cluster_id else list(POD_ACTIONS.get(status, ())),
        "image": pod.image,
        "args": pod.args,
        "disk": pod.disk,
        "env": dict(pod.env),
        "ports": list(pod.ports),
        "registry": None,
        "mounts": _mounts(pod),
        "cloud": pod.cloud,
        "dataCenterId": pod.data_center_id,
        "cudaVersion": "12.8" if pod.gpu_type_id else None,
        "ssh": _ssh(pod, status),
        "template": pod.template_id,
        "cost": cost_per_hr if status in BILLS_COMPUTE else Decimal(0),
        "locked": False,
        "globalNetworking": {"enabled": False},
        "runtime": _runtime(pod, now, now - started) if status == "RUNNING" and started else None,
        "createdAt": iso(pod.created),
        "startedAt": iso(started) if started is not None else None,
    }
    if pod.gpu_type_id:
        body["gpu"] = {"id": pod.gpu_type_id, "count": pod.gpu_count}
    else:
        body["cpu"] = {"id": pod.cpu_id, "vcpuCount": pod.vcpu_count, "memory": pod.memory_gb}
    if pod.cluster_id:
        body["cluster"] = {
            "id": pod.cluster_id,
            "rank": pod.cluster_rank,
            "ip": f"10.65.0.{(pod.cluster_rank or 0) + 2}",
        }
        if pod.cluster_role:
            body["cluster"]["role"] = pod.cluster_role
    return body


def _mounts(pod: PodSpec) -> dict:
    if pod.volume_gb:
        return {"persistent": {"size": pod.volume_gb, "path": pod.volume_path}}
    if pod.network_volume_id:
        return {"network": [{"volumeId": pod.network_volume_id, "path": pod.network_path}]}
    return {}


def _ssh(pod: PodSpec, status: str) -> dict:
    if status != "RUNNING":
        return {"proxy": None, "direct": None}
    user = f"{pod.id}-{_noise(pod.id, 0x10000000, 0xFFFFFFFF):08x}"
    return {
        "proxy": {
            "host": "ssh.runpod.io",
            "port": 22,
            "username": user,
            "command": f"ssh {user}@ssh.runpod.io -i ~/.ssh/id_ed25519",
        },
        "direct": None,
    }


# A GPU counts as idle at up to this utilization (what an idle CUDA context shows).
IDLE_UTIL_MAX = 2
BURST_SECONDS = 15 * 60  # bursty pods work the first quarter of every hour


def gpu_busy(pod: PodSpec, gpu: int, now: int) -> bool:
    """Whether the pod's scenario has GPU `gpu` working at second `now`."""
    spec = pod.utilization
    if spec.pattern == "idle_from":
        return spec.idle_from is None or now < spec.idle_from
    if spec.pattern == "bursty":
        return now % 3600 < BURST_SECONDS
    if spec.pattern == "one_gpu_busy":
        return gpu == 0
    return True


def _runtime(pod: PodSpec, now: int, uptime: int) -> dict:
    tick = now // 300  # readings change every five minutes, as Runpod's billing does
    gpus = []
    for i in range(pod.gpu_count):
        seed = f"{pod.id}/{i}/{tick}"
        if gpu_busy(pod, i, now):
            gpus.append({"util": _noise(seed, 35, 99), "memoryUtil": _noise(seed + "m", 20, 95)})
        else:
            gpus.append(
                {"util": _noise(seed, 0, IDLE_UTIL_MAX), "memoryUtil": _noise(seed + "m", 0, 2)}
            )
    return {
        "uptime": uptime,
        "gpus": gpus,
        "cpu": {"util": _noise(pod.id + "cpu", 5, 90)},
        "memory": {"util": _noise(pod.id + "mem", 10, 80)},
        "ports": [],
    }


def volume_json(volume: VolumeSpec) -> dict:
    return {
        "id": volume.id,
        "name": volume.name,
        "size": volume.size,
        "dataCenter": volume.data_center_id,
        "type": volume.type,
    }


def endpoint_json(endpoint: EndpointSpec, catalog: dict[str, GpuTypeSpec]) -> dict:
    base = f"https://api.runpod.ai/v2/{endpoint.id}"
    body: dict[str, Any] = {
        "id": endpoint.id,
        "name": endpoint.name,
        "type": "QUEUE",
        "requestUrls": {
            "run": f"{base}/run",
            "runSync": f"{base}/runsync",
            "status": f"{base}/status",
            "stream": f"{base}/stream",
            "cancel": f"{base}/cancel",
            "retry": f"{base}/retry",
            "purgeQueue": f"{base}/purge-queue",
            "health": f"{base}/health",
        },
        "image": endpoint.image,
        "args": "",
        "disk": endpoint.disk,
        "env": dict(endpoint.env),
        "ports": [],
        "registry": None,
        "workers": {"min": endpoint.workers_min, "max": endpoint.workers_max},
        "scaling": _scaling_json(endpoint.scaling),
        "dataCenterIds": list(endpoint.data_center_ids),
        "networkVolumes": list(endpoint.network_volume_ids),
        "timeout": 600,
        "flashboot": "FLASHBOOT",
        "createdAt": iso(endpoint.created),
    }
    if endpoint.scaling[0] != "REQUEST_COUNT":  # omitted for that one, as the spec says
        body["workers"]["idleTimeout"] = endpoint.idle_timeout
    if endpoint.gpu_type_id:
        gpu = catalog[endpoint.gpu_type_id]
        body["gpu"] = {
            "pools": [gpu.pool or gpu.id],
            "count": endpoint.gpu_count,
            "allowedCudaVersions": [],
            "minCudaVersion": None,
        }
    else:
        body["gpu"] = None
        body["cpu"] = [
            {"id": "cpu5c", "vcpuCount": endpoint.vcpu_count, "memory": 2 * endpoint.vcpu_count}
        ]
    return body


def _scaling_json(scaling: tuple[str, Decimal]) -> dict:
    kind, value = scaling
    if kind == "REQUEST_COUNT":
        return {"type": kind, "requestCount": int(value)}
    return {"type": kind, "queueDelay": value}


def cluster_json(cluster: ClusterSpec, members: list[PodSpec], status: str) -> dict:
    body: dict[str, Any] = {
        "id": cluster.id,
        "name": cluster.name,
        "type": cluster.type,
        "compute": {
            "gpuTypeId": cluster.gpu_type_id,
            "gpuCountPerPod": cluster.gpu_count_per_pod,
            "podCount": cluster.pod_count,
        },
        "dataCenterId": cluster.data_center_id,
        "pods": {"total": len(members), "byStatus": {status: len(members)}},
        "network": {"cidr": "10.65.0.0/16"},
        "createdAt": iso(cluster.created),
    }
    if cluster.template_id:
        body["template"] = cluster.template_id
    if members:
        body["primary"] = {"podId": members[0].id, "status": status}
    return body


def gpu_type_json(gpu: GpuTypeSpec) -> dict:
    price: dict[str, Decimal] = {"secure": gpu.price_secure, "community": gpu.price_community}
    if gpu.price_serverless is not None:
        price["serverless"] = gpu.price_serverless
    return {
        "id": gpu.id,
        "name": gpu.name,
        "pool": gpu.pool,
        "manufacturer": gpu.manufacturer,
        "memory": gpu.memory,
        "secure": gpu.secure,
        "community": gpu.community,
        "price": price,
        "maxCount": {"secure": gpu.max_count_secure, "community": gpu.max_count_community},
    }


def endpoint_workers_json(endpoint: EndpointSpec, hour_of_day: int) -> dict:
    """The endpoint's workers now: as many running as its traffic of this UTC hour keeps busy
    on average (requests × seconds each ÷ 3600, rounded up), and its always-on minimum idle
    beside them."""
    busy = endpoint.requests_per_hour[hour_of_day] * endpoint.seconds_per_request / 3600
    running = min(math.ceil(busy), max(endpoint.workers_max, endpoint.workers_min))
    idle = max(0, endpoint.workers_min - running)
    gpus = endpoint.gpu_count if endpoint.gpu_type_id else 0
    workers = [
        {"id": f"{endpoint.id}-w{i}", "status": status, "isStale": False, "gpuCount": gpus}
        for i, status in enumerate(["RUNNING"] * running + ["IDLE"] * idle)
    ]
    summary = {
        "running": running,
        "idle": idle,
        "initializing": 0,
        "throttled": 0,
        "unhealthy": 0,
        "total": running + idle,
    }
    return {"workers": workers, "summary": summary, "endpointVersion": 1}
