"""Upserting the account's pods, network volumes, serverless endpoints, clusters and the GPU
catalog. Nothing is deleted: what vanished from Runpod's lists is marked gone."""

import datetime as dt

from django.db import transaction

from labgov.runpod.models import GpuType as GpuTypeRow
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import Cluster, Endpoint, GpuType, NetworkVolume, Pod, PodStatus

# Fields the sync owns on Resource; compared to decide whether a row changed.
SYNCED_FIELDS = (
    "name",
    "status",
    "cost_per_hr_usd",
    "gpu_type_id",
    "gpu_count",
    "cloud",
    "data_center_id",
    "template_id",
    "image",
    "env",
    "container_disk_gb",
    "volume_disk_gb",
    "network_volume_id",
    "cluster_id",
    "size_gb",
    "volume_type",
    "details",
    "created_at_runpod",
)


# Environment variables are kept for attribution rules, but values that look like secrets
# (a Jupyter password, a Hugging Face token) are never stored.
SECRET_MARKERS = ("PASS", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "AUTH")


def redacted_env(env: dict[str, str]) -> dict[str, str]:
    return {
        name: "[redacted]" if any(m in name.upper() for m in SECRET_MARKERS) else value
        for name, value in env.items()
    }


def _pod_fields(pod: Pod) -> dict:
    return {
        "name": pod.name,
        "status": pod.status,
        "cost_per_hr_usd": pod.cost_per_hr_usd,
        "gpu_type_id": pod.gpu_type_id or "",
        "gpu_count": pod.gpu_count,
        "cloud": pod.cloud or "",
        "data_center_id": pod.data_center_id or "",
        "template_id": pod.template_id or "",
        "image": pod.image or "",
        "env": redacted_env(pod.env),
        "container_disk_gb": pod.container_disk_gb,
        "volume_disk_gb": pod.volume_disk_gb,
        "network_volume_id": pod.network_volume_id or "",
        "cluster_id": pod.cluster_id or "",
        "created_at_runpod": pod.created_at,
        "details": {"started_at": pod.started_at.isoformat() if pod.started_at else None},
    }


def _volume_fields(volume: NetworkVolume) -> dict:
    return {
        "name": volume.name,
        "status": "AVAILABLE",
        "size_gb": volume.size_gb,
        "data_center_id": volume.data_center_id or "",
        "volume_type": volume.volume_type or "",
        "cloud": "SECURE",
    }


def _endpoint_fields(endpoint: Endpoint) -> dict:
    return {
        "name": endpoint.name,
        "status": "ACTIVE",
        "template_id": endpoint.template_id or "",
        "gpu_type_id": ",".join(endpoint.gpu_type_ids or endpoint.gpu_pool_ids),
        "gpu_count": endpoint.gpu_count,
        "env": redacted_env(endpoint.env),
        "created_at_runpod": endpoint.created_at,
        "network_volume_id": ",".join(endpoint.network_volume_ids),
        "details": {
            "workers_min": endpoint.workers_min,
            "workers_max": endpoint.workers_max,
            "data_center_ids": list(endpoint.data_center_ids),
        },
    }


def _cluster_fields(cluster: Cluster) -> dict:
    return {
        "name": cluster.name,
        "status": "ACTIVE",
        "gpu_type_id": cluster.gpu_type_id,
        "gpu_count": cluster.gpu_count_per_pod * cluster.pod_count,
        "data_center_id": cluster.data_center_id or "",
        "template_id": cluster.template_id or "",
        "created_at_runpod": cluster.created_at,
        "details": {
            "cluster_type": cluster.cluster_type,
            "pod_count": cluster.pod_count,
            "gpu_count_per_pod": cluster.gpu_count_per_pod,
        },
    }


def inventory_sync(*, account, client, now: dt.datetime) -> dict:
    """Fetch every list first, then write them in one transaction: a failed fetch changes
    nothing, and a vanished resource is only marked gone when all lists came back whole."""
    fetched: dict[tuple[str, str], dict] = {}
    for pod in client.list_pods(include_cluster_pods=True):
        fetched[(ResourceKind.POD, pod.id)] = _pod_fields(pod)
    for volume in client.list_network_volumes():
        fetched[(ResourceKind.NETWORK_VOLUME, volume.id)] = _volume_fields(volume)
    for endpoint in client.list_endpoints():
        fetched[(ResourceKind.SERVERLESS, endpoint.id)] = _endpoint_fields(endpoint)
    for cluster in client.list_clusters():
        fetched[(ResourceKind.CLUSTER, cluster.id)] = _cluster_fields(cluster)
    gpus = client.list_gpu_types()

    with transaction.atomic():
        counts = _resources_upsert(account, fetched, now)
        _catalog_upsert(gpus, now)
    counts["gpu_types"] = len(gpus)
    return counts


def _resources_upsert(account, fetched: dict, now: dt.datetime) -> dict:
    existing = {
        (r.kind, r.runpod_id): r
        for r in Resource.objects.filter(account=account).exclude(kind=ResourceKind.ENDPOINT)
    }
    to_create, to_update, seen_ids = [], [], []
    for key, fields in fetched.items():
        resource = existing.get(key)
        if resource is None:
            to_create.append(
                Resource(
                    account=account,
                    kind=key[0],
                    runpod_id=key[1],
                    first_seen_at=now,
                    last_seen_at=now,
                    status_changed_at=now,
                    **fields,
                )
            )
            continue
        seen_ids.append(resource.pk)
        changed = resource.gone_at is not None or any(
            getattr(resource, name) != value for name, value in fields.items()
        )
        if not changed:
            continue
        if resource.status != fields["status"] or resource.gone_at is not None:
            resource.status_changed_at = now
        for name, value in fields.items():
            setattr(resource, name, value)
        resource.gone_at = None
        to_update.append(resource)
    gone = []
    for key, resource in existing.items():
        if key not in fetched and resource.gone_at is None:
            # Terminated pods disappear from GET /v2/pods; the last sighting is the best
            # time of termination known. Its history stays.
            resource.gone_at = resource.last_seen_at or now
            if resource.kind == ResourceKind.POD:
                resource.status = PodStatus.TERMINATED
            resource.cost_per_hr_usd = 0
            resource.status_changed_at = resource.gone_at
            gone.append(resource)
    Resource.objects.bulk_create(to_create, batch_size=1000)
    Resource.objects.bulk_update(
        to_update,
        [*SYNCED_FIELDS, "last_seen_at", "gone_at", "status_changed_at"],
        batch_size=500,
    )
    Resource.objects.bulk_update(
        gone, ["gone_at", "status", "cost_per_hr_usd", "status_changed_at"], batch_size=500
    )
    # Everything listed was seen now, changed or not: a pod that later vanishes is gone from
    # its last sighting, not its first.
    Resource.objects.filter(pk__in=seen_ids).update(last_seen_at=now)
    return {
        "resources_new": len(to_create),
        "resources_changed": len(to_update),
        "resources_gone": len(gone),
    }


def _catalog_upsert(gpus: list[GpuType], now: dt.datetime) -> None:
    GpuTypeRow.objects.bulk_create(
        [
            GpuTypeRow(
                gpu_id=g.id,
                name=g.name,
                memory_gb=g.memory_gb,
                secure_price_per_hr_usd=g.secure_price_per_hr_usd,
                community_price_per_hr_usd=g.community_price_per_hr_usd,
                serverless_price_per_hr_usd=g.serverless_price_per_hr_usd,
                secure_available=g.secure_available,
                community_available=g.community_available,
                max_count_secure=g.max_count_secure,
                max_count_community=g.max_count_community,
                updated_at=now,
            )
            for g in gpus
        ],
        update_conflicts=True,
        unique_fields=["gpu_id"],
        update_fields=[
            "name",
            "memory_gb",
            "secure_price_per_hr_usd",
            "community_price_per_hr_usd",
            "serverless_price_per_hr_usd",
            "secure_available",
            "community_available",
            "max_count_secure",
            "max_count_community",
            "updated_at",
        ],
    )
