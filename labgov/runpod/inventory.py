"""Upserting the account's pods, network volumes, serverless endpoints, clusters and the GPU
catalog. Nothing is deleted: what vanished from Runpod's lists is marked gone."""

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils.module_loading import import_string

from labgov.core.errors import DomainError
from labgov.runpod.errors import RunpodError
from labgov.runpod.locks import account_lock
from labgov.runpod.models import GpuType as GpuTypeRow
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.redaction import redacted_env
from labgov.runpod.types import Cluster, Endpoint, GpuType, NetworkVolume, Pod, PodStatus

log = logging.getLogger(__name__)

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
            "idle_timeout_seconds": endpoint.idle_timeout_seconds,
            "scaling_type": endpoint.scaling_type,
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


def _worker_summary(client, endpoint: Endpoint):
    """The workers of an endpoint that keeps always-on ones (whether they serve anything),
    or None when Runpod would not say: unknown is not idle, and the sync goes on."""
    try:
        return client.endpoint_workers(endpoint.id)
    except RunpodError as exc:
        log.warning("workers of endpoint %s not read: %s", endpoint.id, exc)
        return None


def inventory_sync(*, account, client, now: dt.datetime) -> dict:
    """Fetch every list first, then write them in one transaction: a failed fetch changes
    nothing, and a vanished resource is only marked gone when all lists came back whole."""
    fetched: dict[tuple[str, str], dict] = {}
    pods = client.list_pods(include_cluster_pods=True)
    for pod in pods:
        fetched[(ResourceKind.POD, pod.id)] = _pod_fields(pod)
    for volume in client.list_network_volumes():
        fetched[(ResourceKind.NETWORK_VOLUME, volume.id)] = _volume_fields(volume)
    workers = {}
    for endpoint in client.list_endpoints():
        fetched[(ResourceKind.SERVERLESS, endpoint.id)] = _endpoint_fields(endpoint)
        if endpoint.workers_min > 0:
            workers[endpoint.id] = _worker_summary(client, endpoint)
    for cluster in client.list_clusters():
        fetched[(ResourceKind.CLUSTER, cluster.id)] = _cluster_fields(cluster)
    gpus = client.list_gpu_types()

    with transaction.atomic():
        account_lock(account.pk)  # first, as every writer of the account's data (sync.py)
        counts = _resources_upsert(account, fetched, now)
        _catalog_upsert(gpus, now)
        # Consumers of what was listed (utilization samples from `Pod.runtime`), named in
        # settings so the inventory imports none of them.
        for path in settings.LABGOV_AFTER_INVENTORY:
            step = import_string(path)
            counts.update(
                step(
                    account=account,
                    pods=pods,
                    now=now,
                    endpoint_workers={k: v for k, v in workers.items() if v is not None},
                )
                or {}
            )
    counts["gpu_types"] = len(gpus)
    return counts


class ConnectionConflict(DomainError):
    """The sync met resources another connection holds: the same Runpod account twice."""


# Serialises first sightings across connections (PostgreSQL), so two connections of the same
# Runpod account syncing at the same moment cannot both claim its resources.
_CLAIM_LOCK = 0x6C6162676F76  # "labgov"


def _ids_q(keys: Iterable[tuple[str, str]]) -> Q | None:
    wanted: dict[str, set[str]] = defaultdict(set)
    for kind, runpod_id in keys:
        if kind != ResourceKind.ENDPOINT:  # the per-account stub of endpoint billing
            wanted[kind].add(runpod_id)
    query = None
    for kind, ids in wanted.items():
        part = Q(kind=kind, runpod_id__in=sorted(ids))
        query = part if query is None else query | part
    return query


def refuse_ids_owned_elsewhere(
    account, keys: Iterable[tuple[str, str]], held: Iterable[tuple[str, str]] = ()
) -> None:
    """Raise ConnectionConflict, naming the other connection, when any new (kind, Runpod id)
    in `keys` is held by another connection, or any in `held` (ids this connection holds
    already) by an older one. Runpod ids are global: one resource, one connection, or every
    dollar of it would be counted twice. (The second rule finds doubles recorded before this
    check existed: the younger connection stops, the older keeps syncing.)"""
    new_q, held_q = _ids_q(keys), _ids_q(held)
    if held_q is not None:
        held_q &= Q(account_id__lt=account.pk)
    query = new_q if held_q is None else held_q if new_q is None else new_q | held_q
    if query is None:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CLAIM_LOCK])
    other = (
        Resource.objects.filter(query)
        .exclude(account_id=account.pk)
        .select_related("account")
        .order_by("pk")
        .first()
    )
    if other is None:
        return
    owner = other.account
    if owner.institution_id == account.institution_id:
        holder = f"the connection “{owner.name}”" + ("" if owner.is_active else " (deactivated)")
    else:
        holder = "a connection of another institution"
    raise ConnectionConflict(
        f"Refused: {other.get_kind_display().lower()} {other.runpod_id} and perhaps more of"
        f" what this key sees are already synced by {holder}. This looks like the same Runpod"
        " account connected twice; nothing was recorded, so nothing is counted twice. Remove"
        " this connection, or keep one connection and put both keys in it."
    )


def _resources_upsert(account, fetched: dict, now: dt.datetime) -> dict:
    # The account's resources that this sync may change: those listed now, and those not yet
    # gone (which become gone if not listed). An account keeps every resource it ever had:
    # reading the gone ones too, each sync, cost 2.0 s and 204 MB of memory at 50,000.
    wanted = Q(gone_at__isnull=True)
    listed = _ids_q(fetched)
    if listed is not None:
        wanted |= listed
    existing = {
        (r.kind, r.runpod_id): r
        for r in Resource.objects.filter(wanted, account=account).exclude(
            kind=ResourceKind.ENDPOINT
        )
    }
    refuse_ids_owned_elsewhere(
        account,
        [key for key in fetched if key not in existing],
        held=[key for key in fetched if key in existing],
    )
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
                pool=g.pool or "",
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
            "pool",
            "updated_at",
        ],
    )
