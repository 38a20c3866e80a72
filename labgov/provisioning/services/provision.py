"""Creating an approved request's resources on Runpod, and recording them.

The Runpod calls run outside any database transaction (in a Celery task); their outcome is
then written in one. Creating a pod is not idempotent on Runpod's side, so an attempt whose
outcome is unknown (a timeout, an unreadable answer, a worker that died) is followed by one
that looks for what it may have created. Nothing else is ever adopted: each attempt names what
it creates with a random token of its own (`labgov-r<id>-<token>-…`, see
`ProvisioningRequest.marker`), written before Runpod is called; a retry of an unknown outcome
adopts a pod only if it carries that token, was created after the attempt began, and has the
request's GPU type and count, image and disks (a network volume: the token, the size and data
center, and no sign that it existed before). What labgov adopts or creates is paid by the
request's allocation from its creation on, never before.
"""

import datetime as dt
import logging
import secrets
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.text import slugify

from labgov.core import dataversion
from labgov.core.errors import DomainError
from labgov.core.periods import hour_floor
from labgov.provisioning.models import DeploymentModel, ProvisioningRequest
from labgov.provisioning.selectors import gpu_for, runpod_account_for_lab, runpod_accounts_for_lab
from labgov.provisioning.services.commitments import (
    commitment_post,
    commitment_release_to,
    lock_allocation,
    lock_request,
)
from labgov.provisioning.services.events import record
from labgov.provisioning.services.requests import (
    _require,
    _require_current_member,
    _require_reviewer,
    _save,
    provisioning_start,
)
from labgov.runpod.errors import (
    RunpodAuthError,
    RunpodConflict,
    RunpodError,
    RunpodInsufficientBalance,
    RunpodNotFound,
    RunpodRequestInvalid,
    RunpodUnavailable,
)
from labgov.runpod.inventory import _cluster_fields, _endpoint_fields, _pod_fields, _volume_fields
from labgov.runpod.locks import account_lock
from labgov.runpod.models import Assignment, Resource, ResourceKind, RunpodAccount
from labgov.runpod.services import resource_assign
from labgov.usage.periods import closed_until

log = logging.getLogger(__name__)
S = ProvisioningRequest.State
WORKSPACE = "/workspace"
# Runpod's clock and ours may disagree a little (and it reports whole seconds). The slack
# cannot let in anything prepared ahead: the token it would need exists only from the attempt.
CLOCK_SLACK = dt.timedelta(minutes=5)
# Answers after which Runpod surely created nothing; after any other failure it may have.
KNOWN_REFUSALS = (
    RunpodAuthError,
    RunpodConflict,
    RunpodInsufficientBalance,
    RunpodNotFound,
    RunpodRequestInvalid,
)


@transaction.atomic
def provisioning_retry(*, actor, req: ProvisioningRequest) -> ProvisioningRequest:
    """Failed → provisioning again, committing the estimate again (the failure released it)."""
    allocation = lock_allocation(req.allocation_id)
    req = lock_request(req.pk)
    if actor.pk != req.requester_id:
        _require_reviewer(actor, req)
    _require(req, (S.FAILED,), "be retried (only failed requests can)")
    _require_current_member(req.requester_id, req.lab_id, requester=req.requester)
    commitment_post(actor=actor, req=req, allocation=allocation)
    provisioning_start(actor=actor, req=req)
    return req


def provisioning_resume(*, now: dt.datetime | None = None) -> int:
    """Enqueue again the requests left provisioning with no live claim: a worker that died
    mid-attempt, or a task lost before it ran. Safe: a run claims the request first, and it
    looks for what an earlier attempt created before creating anything."""
    # By name, as core/queue.py does: the tasks module imports these services.
    provision_request = import_string("labgov.provisioning.tasks.provision_request")
    now = now or timezone.now()
    grace = now - dt.timedelta(seconds=settings.LABGOV_PROVISION_CLAIM_SECONDS)
    stuck = list(
        ProvisioningRequest.objects.filter(state=S.PROVISIONING)
        .filter(
            Q(provision_claimed_until__lt=now)
            | Q(provision_claimed_until__isnull=True, updated_at__lt=grace)
        )
        .values_list("pk", flat=True)
    )
    for pk in stuck:
        provision_request.delay(pk)
    return len(stuck)


# Runpod's 400 for "this GPU and data center could not be placed" has no code of its own, only
# a detail in words (see the spec's createPod); these are the words that say so.
_NO_CAPACITY_WORDS = ("could not be placed", "capacity", "no available", "not available")


NOUNS = {
    DeploymentModel.POD: "pod",
    DeploymentModel.SERVERLESS: "serverless endpoint",
    DeploymentModel.CLUSTER: "cluster",
}


def noun(req: ProvisioningRequest | None) -> str:
    """What labgov creates for the request, in words: pod, serverless endpoint, cluster."""
    return NOUNS.get(req.deployment_model, "pod") if req is not None else "pod"


def _what(req: ProvisioningRequest | None) -> str:
    if req is None:
        return "the pod"
    where = f" in {req.data_center_id}" if req.data_center_id else ""
    if req.deployment_model == DeploymentModel.CLUSTER:
        return (
            f"a cluster of {req.node_count} pods × {req.gpu_count} × {req.gpu_type_id}"
            f" in {req.get_cloud_display()}{where}"
        )
    if req.deployment_model == DeploymentModel.SERVERLESS:
        return f"a serverless endpoint of {req.gpu_count} × {req.gpu_type_id} per worker{where}"
    return f"{req.gpu_count} × {req.gpu_type_id} in {req.get_cloud_display()}{where}"


def explain(exc: RunpodError, req: ProvisioningRequest | None = None) -> str:
    """A Runpod failure in words for the requester and the approver."""
    thing = noun(req)
    if isinstance(exc, RunpodInsufficientBalance):
        return (
            f"Runpod refused to start the {thing} because the Runpod account's balance is too low "
            "(402; deploying needs at least one hour of credit). Add credit to the Runpod "
            "account, then retry."
        )
    if isinstance(exc, RunpodAuthError) and exc.status == 403:
        return (
            f"Runpod refused to create {_what(req)} (403{_colon(exc.detail)}): either the "
            "connected API key lacks write access (an institution admin must give it write "
            "access, then retry) or the Runpod account may not use this GPU type or cloud "
            "(cancel, and submit a request for another)."
        )
    if isinstance(exc, RunpodAuthError):
        return (
            f"The connected Runpod API key may not create {thing}s ({exc.status}). An institution "
            "admin must give the key write access, then retry."
        )
    detail = (exc.detail or "").lower()
    if exc.status == 400 and any(words in detail for words in _NO_CAPACITY_WORDS):
        return (
            f"Runpod has no free capacity for {_what(req)} right now (400: {exc.detail}). "
            f"Nothing was started and nothing is charged for the {thing}. Retry later, or cancel "
            "and submit the request with another GPU type, cloud or data center."
        )
    if isinstance(exc, RunpodRequestInvalid):
        # Runpod's words may end in a full stop of their own.
        detail = (exc.detail or "; ".join(exc.errors) or exc.message).rstrip(". ")
        return (
            f"Runpod refused the {thing} as invalid ({exc.status}): {detail}. If the request needs "
            "changing, cancel it and submit a corrected one; otherwise retry."
        )
    if isinstance(exc, RunpodUnavailable):
        return (
            f"Runpod did not answer in time ({exc.message}). The {thing} may or may not have been "
            "created: retrying looks for it first, so it is never created twice."
        )
    said = (exc.message or "").rstrip(". ")
    return f"Runpod answered with an error: {said}. Retry, or cancel the request."


def _colon(detail: str) -> str:
    return f": {detail}" if detail else ""


def _claim(request_id: int) -> bool:
    now = timezone.now()
    return (
        ProvisioningRequest.objects.filter(pk=request_id, state=S.PROVISIONING)
        .filter(Q(provision_claimed_until__isnull=True) | Q(provision_claimed_until__lt=now))
        .update(
            provision_claimed_until=now
            + dt.timedelta(seconds=settings.LABGOV_PROVISION_CLAIM_SECONDS),
            provision_attempts=F("provision_attempts") + 1,
        )
        == 1
    )


def pod_body(req: ProvisioningRequest, *, network_volume_id: str | None) -> dict:
    body = {
        "name": f"{req.marker}{slugify(req.title)[:40]}".rstrip("-"),
        "image": req.image,
        "cloud": req.cloud,
        "gpu": {"id": req.gpu_type_id, "count": req.gpu_count},
        "disk": max(1, req.container_disk_gb),
        # For people looking at Runpod's console. The allocation's tag is not written here:
        # every member of the Runpod team can read a pod's environment.
        "env": {"LABGOV_REQUEST": str(req.pk)},
    }
    if network_volume_id:
        body["mounts"] = {"network": [{"volumeId": network_volume_id, "path": WORKSPACE}]}
    elif req.volume_disk_gb:
        body["mounts"] = {"persistent": {"size": req.volume_disk_gb, "path": WORKSPACE}}
    if req.data_center_id:
        body["dataCenterIds"] = [req.data_center_id]
    return body


def _name(req: ProvisioningRequest) -> str:
    return f"{req.marker}{slugify(req.title)[:40]}".rstrip("-")


def gpu_pool(req: ProvisioningRequest) -> str:
    """The serverless pool of the request's GPU type (from the synced catalog), else the type."""
    gpu = gpu_for(req.gpu_type_id)
    return (gpu.pool if gpu is not None else "") or req.gpu_type_id


def endpoint_body(req: ProvisioningRequest, *, network_volume_id: str | None, pool: str) -> dict:
    """A CreateEndpointRequest: the template or image, the GPU pool and count per worker, the
    workers (min = the always-on workers the estimate counts), scaling, volume, data center."""
    workers = {"min": req.idle_workers, "max": max(req.workers_max, req.idle_workers, 1)}
    if req.scaling_type == "REQUEST_COUNT":
        # Runpod refuses an idle timeout for a queue endpoint scaling on request count.
        scaling = {"type": "REQUEST_COUNT", "requestCount": max(1, req.scaling_value)}
    else:
        scaling = {"type": "QUEUE_DELAY", "queueDelay": max(1, req.scaling_value)}
        workers["idleTimeout"] = min(max(1, req.idle_timeout_seconds), 3600)
    body = {
        "name": _name(req),
        "type": "QUEUE",
        "gpu": {"pools": [pool], "count": req.gpu_count},
        "workers": workers,
        "scaling": scaling,
        "env": {"LABGOV_REQUEST": str(req.pk)},
    }
    if req.template_id:
        body["templateId"] = req.template_id
    if req.image:
        body["image"] = req.image
    if req.container_disk_gb:
        body["disk"] = req.container_disk_gb
    if network_volume_id:
        body["networkVolumes"] = [network_volume_id]
    if req.data_center_id:
        body["dataCenterIds"] = [req.data_center_id]
    return body


def cluster_body(req: ProvisioningRequest, *, network_volume_id: str | None) -> dict:
    """A CreateClusterRequest: the GPU type, GPUs per pod, pod count, image, network volume
    (in the cluster's data center) or volume disk."""
    body = {
        "name": _name(req),
        "type": req.cluster_type or "TRAINING",
        "compute": {
            "gpuTypeId": req.gpu_type_id,
            "gpuCountPerPod": req.gpu_count,
            "podCount": req.node_count,
        },
        "image": req.image,
        "disk": max(1, req.container_disk_gb),
        "env": {"LABGOV_REQUEST": str(req.pk)},
    }
    if network_volume_id:
        body["mounts"] = {"network": [{"volumeId": network_volume_id, "path": WORKSPACE}]}
    elif req.volume_disk_gb:
        body["mounts"] = {"persistent": {"size": req.volume_disk_gb, "path": WORKSPACE}}
    if req.data_center_id:
        body["dataCenterIds"] = [req.data_center_id]
    return body


def _attempt_begin(req: ProvisioningRequest) -> bool:
    """Start an attempt; True when it retries one whose outcome is unknown (and so may adopt
    what that one created). A fresh attempt gets a new token, saved before Runpod is called."""
    if req.provision_outcome_unknown and req.provision_token and req.provision_started_at:
        return True
    req.provision_token = secrets.token_hex(8)
    req.provision_started_at = timezone.now()
    req.provision_outcome_unknown = True
    ProvisioningRequest.objects.filter(pk=req.pk).update(
        provision_token=req.provision_token,
        provision_started_at=req.provision_started_at,
        provision_outcome_unknown=True,
    )
    return False


def _created_in_attempt(moment: dt.datetime | None, req: ProvisioningRequest) -> bool:
    return moment is not None and moment >= req.provision_started_at - CLOCK_SLACK


def adoptable_pod(pods, req: ProvisioningRequest, volume):
    """The pod the unknown attempt created, if Runpod holds one: carrying the attempt's token,
    created after the attempt began, and configured as the request asks."""
    for pod in pods:
        if (
            pod.name.startswith(req.marker)
            and _created_in_attempt(pod.created_at, req)
            and pod.gpu_type_id == req.gpu_type_id
            and pod.gpu_count == req.gpu_count
            and pod.image == req.image
            and pod.container_disk_gb == max(1, req.container_disk_gb)
            and pod.volume_disk_gb == (0 if volume else req.volume_disk_gb)
            and (pod.network_volume_id or None) == (volume.id if volume else None)
        ):
            return pod
    return None


def adoptable_endpoint(endpoints, req: ProvisioningRequest, volume_id: str | None, pool: str):
    """The endpoint the unknown attempt created, if Runpod holds one: the attempt's token,
    created after the attempt began, and the shape asked for (pool and GPUs per worker,
    workers, image or template, volume and data center)."""
    body = endpoint_body(req, network_volume_id=volume_id, pool=pool)
    for endpoint in endpoints:
        if (
            endpoint.name.startswith(req.marker)
            and _created_in_attempt(endpoint.created_at, req)
            and endpoint.gpu_pool_ids == [pool]
            and endpoint.gpu_count == req.gpu_count
            and endpoint.workers_min == body["workers"]["min"]
            and endpoint.workers_max == body["workers"]["max"]
            and (not req.image or endpoint.image == req.image)
            and (not req.template_id or endpoint.template_id in (None, req.template_id))
            and endpoint.network_volume_ids == ([volume_id] if volume_id else [])
            and endpoint.data_center_ids == body.get("dataCenterIds", [])
        ):
            return endpoint
    return None


def adoptable_cluster(clusters, req: ProvisioningRequest):
    """The cluster the unknown attempt created, if Runpod holds one: the attempt's token,
    created after the attempt began, and the GPU type, GPUs per pod, pod count, type and data
    center asked for."""
    for cluster in clusters:
        if (
            cluster.name.startswith(req.marker)
            and _created_in_attempt(cluster.created_at, req)
            and cluster.gpu_type_id == req.gpu_type_id
            and cluster.gpu_count_per_pod == req.gpu_count
            and cluster.pod_count == req.node_count
            and cluster.cluster_type == (req.cluster_type or "TRAINING")
            and (not req.data_center_id or cluster.data_center_id == req.data_center_id)
        ):
            return cluster
    return None


def adoptable_volume(volumes, req: ProvisioningRequest, account):
    """The network volume the unknown attempt created, if Runpod holds one. Runpod reports no
    creation time for volumes: one labgov saw before the attempt began is not it."""
    name = f"{req.marker}volume"
    candidates = [
        v
        for v in volumes
        if v.name == name
        and v.size_gb == req.network_volume_gb
        and (not req.data_center_id or v.data_center_id == req.data_center_id)
    ]
    if not candidates:
        return None
    seen_before = set(
        Resource.objects.filter(
            account=account,
            kind=ResourceKind.NETWORK_VOLUME,
            runpod_id__in=[v.id for v in candidates],
            first_seen_at__lt=req.provision_started_at - CLOCK_SLACK,
        ).values_list("runpod_id", flat=True)
    )
    return next((v for v in candidates if v.id not in seen_before), None)


def _on_runpod(client, req: ProvisioningRequest, *, account, adopt: bool, created: list):
    """Create the request's network volume (when asked for) and its pod, endpoint or cluster,
    or, retrying an attempt whose outcome is unknown, adopt what it created. `created`
    collects what this call made. Returns (kind, what was made, the new volume or None)."""
    volume = None
    if req.network_volume_gb and not _existing_volume_id(req):
        if adopt:
            volume = adoptable_volume(client.list_network_volumes(), req, account)
        if volume is None:
            volume = client.create_network_volume(
                {
                    "name": f"{req.marker}volume",
                    "size": req.network_volume_gb,
                    "dataCenter": req.data_center_id,
                }
            )
            created.append(volume)
    volume_id = volume.id if volume else _existing_volume_id(req)
    if req.deployment_model == DeploymentModel.SERVERLESS:
        pool = gpu_pool(req)
        made = adoptable_endpoint(client.list_endpoints(), req, volume_id, pool) if adopt else None
        if made is None:
            made = client.create_endpoint(
                endpoint_body(req, network_volume_id=volume_id, pool=pool)
            )
        return ResourceKind.SERVERLESS, made, volume
    if req.deployment_model == DeploymentModel.CLUSTER:
        made = adoptable_cluster(client.list_clusters(), req) if adopt else None
        if made is None:
            made = client.create_cluster(cluster_body(req, network_volume_id=volume_id))
        return ResourceKind.CLUSTER, made, volume
    pod = adoptable_pod(client.list_pods(), req, volume) if adopt else None
    if pod is None:
        pod = client.create_pod(pod_body(req, network_volume_id=volume.id if volume else None))
    return ResourceKind.POD, pod, volume


def _existing_volume_id(req: ProvisioningRequest) -> str | None:
    """An existing network volume an endpoint or cluster mounts instead of a new one."""
    if req.deployment_model == DeploymentModel.POD:
        return None
    return (req.network_volume_id or "").strip() or None


def _institution_of_request(*, request_id: int, **_):
    return ProvisioningRequest.objects.filter(pk=request_id).values_list(
        "lab__institution_id", flat=True
    )


@dataversion.scoped(_institution_of_request)
def provisioning_run(
    *, request_id: int, client_factory: Callable | None = None
) -> ProvisioningRequest:
    """Create the request's resources on Runpod (the task's body). Safe to run twice: only
    one worker holds the claim, and a retry after an unknown outcome finds what was created."""
    from labgov.runpod.services import write_client_for_account

    client_factory = client_factory or write_client_for_account
    if not _claim(request_id):
        return ProvisioningRequest.objects.get(pk=request_id)
    req = ProvisioningRequest.objects.select_related("lab").get(pk=request_id)
    account = runpod_account_for_lab(req.lab)
    if account is None:
        return provisioning_fail(
            request_id=request_id,
            message=f"No Runpod account is connected for {req.lab}: an institution admin must "
            "connect one, then retry.",
            outcome_unknown=req.provision_outcome_unknown,
        )
    adopt = _attempt_begin(req)
    created: list = []
    try:
        with client_factory(account) as client:
            kind, made, volume = _on_runpod(
                client, req, account=account, adopt=adopt, created=created
            )
    except RunpodError as exc:
        log.warning("provisioning request %s failed: %s", request_id, exc.message)
        return provisioning_fail(
            request_id=request_id,
            message=explain(exc, req),
            account=account,
            # A volume this attempt created stays its own: the retry mounts it.
            outcome_unknown=not isinstance(exc, KNOWN_REFUSALS) or bool(created),
        )
    return provisioning_succeed(
        request_id=request_id, account=account, made=made, kind=kind, volume=volume
    )


@transaction.atomic
def provisioning_fail(
    *,
    request_id: int,
    message: str,
    account: RunpodAccount | None = None,
    outcome_unknown: bool = False,
) -> ProvisioningRequest:
    """The attempt failed. `outcome_unknown`: Runpod may hold what it created, so the next
    attempt keeps its token and looks for it; otherwise the next one starts afresh."""
    req = ProvisioningRequest.objects.get(pk=request_id)
    lock_allocation(req.allocation_id)
    req = lock_request(request_id)
    if req.state != S.PROVISIONING:
        return req
    commitment_release_to(actor=None, req=req, target=0, why="provisioning failed")
    _save(
        req,
        state=S.FAILED,
        last_error=message,
        runpod_account=account or req.runpod_account,
        provision_claimed_until=None,
        provision_outcome_unknown=outcome_unknown,
    )
    record(actor=None, req=req, event="fail", before_state=S.PROVISIONING, body=message)
    return req


def _resource_upsert(account, kind: str, runpod_id: str, fields: dict) -> Resource:
    now = timezone.now()
    resource, created = Resource.objects.get_or_create(
        account=account,
        kind=kind,
        runpod_id=runpod_id,
        defaults={**fields, "first_seen_at": now, "last_seen_at": now, "status_changed_at": now},
    )
    if not created:
        for name, value in fields.items():
            setattr(resource, name, value)
        resource.last_seen_at = now
        resource.gone_at = None
        resource.save()
    return resource


def _attribute(req: ProvisioningRequest, resource: Resource, *, since: dt.datetime) -> None:
    """Pay the resource from the request's allocation from `since` (the hour it was created
    in), never inside a closed period and never before its current assignment. A resource
    already paid by the same allocation is left as it is."""
    req.resources.add(resource)
    if not resource.requested_name and resource.name.startswith(req.marker):
        # What labgov made for it: shown under the request's title, Runpod's name beside it.
        volume = " (volume)" if resource.kind == ResourceKind.NETWORK_VOLUME else ""
        resource.requested_name = f"{req.title[: 120 - len(volume)]}{volume}"
        resource.save(update_fields=["requested_name"])
    latest = Assignment.objects.filter(resource=resource).order_by("-starts_at", "-id").first()
    if latest is not None and latest.allocation_id == req.allocation_id:
        return
    starts_at = since
    closed = closed_until(resource.account.institution_id)
    if closed is not None and starts_at < closed:
        starts_at = closed
    if latest is not None and starts_at < latest.starts_at:
        starts_at = latest.starts_at
    resource_assign(
        actor=None,
        resource=resource,
        allocation=req.allocation,
        starts_at=starts_at,
        source=Assignment.Source.PROVISIONED,
        note=f"Provisioned by labgov for request #{req.pk}",
    )


FIELDS = {
    ResourceKind.POD: _pod_fields,
    ResourceKind.SERVERLESS: _endpoint_fields,
    ResourceKind.CLUSTER: _cluster_fields,
}


@transaction.atomic
def provisioning_succeed(
    *, request_id: int, account, made=None, kind: str = ResourceKind.POD, volume=None, pod=None
) -> ProvisioningRequest:
    """Record what the attempt made (`made`, of `kind`; `pod=` for a pod, as before)."""
    made = made if made is not None else pod
    req = ProvisioningRequest.objects.get(pk=request_id)
    # The account before the allocation: the pod's attribution writes synced spend, whose
    # writers all lock the account first (labgov/runpod/sync.py).
    account_lock(account.pk)
    lock_allocation(req.allocation_id)
    req = lock_request(request_id)
    if req.state != S.PROVISIONING:
        return req
    # Runpod reports no creation time for volumes; this attempt made (or adopted) it.
    attempt_hour = hour_floor(req.provision_started_at or timezone.now())
    if volume is not None:
        _attribute(
            req,
            _resource_upsert(
                account, ResourceKind.NETWORK_VOLUME, volume.id, _volume_fields(volume)
            ),
            since=attempt_hour,
        )
    _attribute(
        req,
        _resource_upsert(account, kind, made.id, FIELDS[kind](made)),
        since=hour_floor(made.created_at) if made.created_at else attempt_hour,
    )
    _save(
        req,
        state=S.PROVISIONED,
        runpod_account=account,
        runpod_id=made.id,
        provisioned_at=timezone.now(),
        provision_claimed_until=None,
        provision_outcome_unknown=False,
        last_error="",
    )
    record(
        actor=None,
        req=req,
        event="provisioned",
        before_state=S.PROVISIONING,
        body=f"{NOUNS[req.deployment_model].capitalize()} {made.name} ({made.id}) was created "
        f"on Runpod and is paid by {req.allocation} from its creation on.",
    )
    return req


def _require_unclaimed(resource: Resource, req: ProvisioningRequest) -> None:
    """Marking a request provisioned never takes a resource from the allocation paying it."""
    paying = resource.current_allocation
    if paying is None or paying.pk == req.allocation_id:
        return
    lab = paying.funding_source.lab
    raise DomainError(
        f"{resource.get_kind_display()} {resource.runpod_id} is already paid by another "
        f"allocation (of {lab}). Only an institution admin or a lab admin of {lab} can "
        "reassign it.",
        field="runpod_id",
    )


MANUAL_KINDS = {
    DeploymentModel.SERVERLESS: ResourceKind.SERVERLESS,
    DeploymentModel.CLUSTER: ResourceKind.CLUSTER,
}


LISTS = {
    ResourceKind.SERVERLESS: ("list_endpoints", _endpoint_fields),
    ResourceKind.CLUSTER: ("list_clusters", _cluster_fields),
}


def _listed_on_runpod(account: RunpodAccount, kind: str, runpod_id: str, client_factory):
    """What Runpod lists under that id for that kind, asked with the account's sync key;
    a refusal in words when it lists none (a pod's, a volume's or another kind's id, a typo)."""
    from labgov.runpod.services import client_for_account

    method, _fields = LISTS[kind]
    noun_ = dict(ResourceKind.choices)[kind].lower()
    try:
        with (client_factory or client_for_account)(account) as client:
            listed = getattr(client, method)()
    except RunpodError as exc:
        raise DomainError(
            f"labgov could not ask Runpod ({account.name}) for its {noun_}s: {exc.message} "
            "Try again when Runpod answers.",
            field="runpod_id",
        ) from None
    found = next((item for item in listed if item.id == runpod_id), None)
    if found is None:
        raise DomainError(
            f"Runpod ({account.name}) lists no {noun_} with the id {runpod_id}: give the id of "
            f"the {noun_} that was made for this request (a pod's, a volume's or another "
            "kind's id is not one).",
            field="runpod_id",
        )
    return found


def request_mark_provisioned(
    *,
    actor,
    req: ProvisioningRequest,
    account: RunpodAccount,
    runpod_id: str,
    client_factory: Callable | None = None,
) -> ProvisioningRequest:
    """A Serverless endpoint or Cluster that someone created on Runpod by hand: record its id,
    and attach attribution as labgov does for what it creates. Runpod is asked first (outside
    the transaction) whether it lists that id for the request's kind."""
    runpod_id = (runpod_id or "").strip()
    if not runpod_id:
        raise DomainError("Give the Runpod id of the endpoint or cluster.", field="runpod_id")
    _require_reviewer(actor, req)
    _require(req, MARKABLE, "be marked provisioned (only approved or failed requests can)")
    kind = MANUAL_KINDS.get(req.deployment_model)
    if kind is None:
        raise DomainError("labgov creates pods itself; only endpoints and clusters are marked.")
    if not runpod_accounts_for_lab(req.lab).filter(pk=account.pk).exists():
        raise DomainError("That Runpod account does not serve this lab.", field="account")
    listed = _listed_on_runpod(account, kind, runpod_id, client_factory)
    return _mark_provisioned(actor=actor, req=req, account=account, kind=kind, listed=listed)


MARKABLE = (S.APPROVED, S.FAILED)


@transaction.atomic
def _mark_provisioned(*, actor, req, account, kind, listed) -> ProvisioningRequest:
    runpod_id = listed.id
    account_lock(account.pk)
    allocation = lock_allocation(req.allocation_id)
    req = lock_request(req.pk)
    _require_reviewer(actor, req)
    _require(req, MARKABLE, "be marked provisioned (only approved or failed requests can)")
    elsewhere = (
        Resource.objects.filter(runpod_id=runpod_id)
        .exclude(account=account, kind=kind)
        .select_related("account")
        .first()
    )
    if elsewhere is not None:
        raise DomainError(
            f"{runpod_id} is already known to labgov as a {elsewhere.get_kind_display().lower()}"
            f" of {elsewhere.account.name}, not as a {dict(ResourceKind.choices)[kind].lower()}"
            f" of {account.name}.",
            field="runpod_id",
        )
    taken = (
        ProvisioningRequest.objects.filter(resources__runpod_id=runpod_id)
        .exclude(pk=req.pk)
        .first()
    )
    if taken is not None:
        raise DomainError(
            f"{runpod_id} is request #{taken.pk}'s already: one resource is one request's.",
            field="runpod_id",
        )
    resource = (
        Resource.objects.filter(account=account, kind=kind, runpod_id=runpod_id)
        .select_related("current_allocation__funding_source__lab")
        .first()
    )
    if resource is not None:
        _require_unclaimed(resource, req)
    resource = _resource_upsert(account, kind, runpod_id, LISTS[kind][1](listed))
    before = req.state
    if before == S.FAILED:
        # The failure released the estimate: the resource made by hand commits it again.
        commitment_post(actor=actor, req=req, allocation=allocation)
    # Its spend before the approval (or its creation, when later) is not the request's.
    now = timezone.now()
    since = hour_floor(req.decided_at or now)
    if resource.created_at_runpod is not None and resource.created_at_runpod > since:
        since = hour_floor(resource.created_at_runpod)
    _attribute(req, resource, since=since)
    _save(
        req,
        state=S.PROVISIONED,
        runpod_account=account,
        runpod_id=runpod_id,
        provisioned_at=timezone.now(),
        provision_claimed_until=None,
        provision_outcome_unknown=False,
        last_error="",
    )
    record(
        actor=actor,
        req=req,
        event="provisioned",
        before_state=before,
        body=f"{resource.get_kind_display()} {runpod_id} (made outside labgov, listed by "
        f"Runpod) is paid by {req.allocation}.",
    )
    return req
