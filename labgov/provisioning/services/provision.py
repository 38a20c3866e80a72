"""Creating an approved request's resources on Runpod, and recording them.

The Runpod calls run outside any database transaction (in a Celery task); their outcome is
then written in one. Creating a pod is not idempotent on Runpod's side, so every attempt first
looks for what an earlier attempt may have created: each resource labgov creates carries the
request's marker in its name (`labgov-r<id>-…`) and, for pods, `LABGOV_REQUEST=<id>` in its env.
"""

import datetime as dt
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.text import slugify

from labgov.core.errors import DomainError
from labgov.provisioning.models import DeploymentModel, ProvisioningRequest
from labgov.provisioning.selectors import runpod_account_for_lab, runpod_accounts_for_lab
from labgov.provisioning.services.commitments import (
    commitment_post,
    commitment_release_to,
    lock_allocation,
    lock_request,
)
from labgov.provisioning.services.events import record
from labgov.provisioning.services.requests import _require, _require_reviewer, _save
from labgov.runpod.attribution import BEGINNING
from labgov.runpod.errors import (
    RunpodAuthError,
    RunpodError,
    RunpodInsufficientBalance,
    RunpodRequestInvalid,
    RunpodUnavailable,
)
from labgov.runpod.inventory import _pod_fields, _volume_fields
from labgov.runpod.models import Assignment, Resource, ResourceKind, RunpodAccount
from labgov.runpod.services import resource_assign

log = logging.getLogger(__name__)
S = ProvisioningRequest.State
WORKSPACE = "/workspace"


def provisioning_start(*, actor, req: ProvisioningRequest) -> None:
    """Approved Pod → provisioning; the task runs after the transaction commits. The caller
    holds the request's lock."""
    before = req.state
    _save(req, state=S.PROVISIONING, provision_claimed_until=None)
    record(
        actor=actor,
        req=req,
        event="provision" if before == S.APPROVED else "retry",
        before_state=before,
        body="labgov is creating the pod on Runpod now.",
    )
    from labgov.provisioning.tasks import provision_request

    transaction.on_commit(lambda: provision_request.delay(req.pk))


@transaction.atomic
def provisioning_retry(*, actor, req: ProvisioningRequest) -> ProvisioningRequest:
    """Failed → provisioning again, committing the estimate again (the failure released it)."""
    allocation = lock_allocation(req.allocation_id)
    req = lock_request(req.pk)
    if actor.pk != req.requester_id:
        _require_reviewer(actor, req)
    _require(req, (S.FAILED,), "be retried (only failed requests can)")
    commitment_post(actor=actor, req=req, allocation=allocation)
    provisioning_start(actor=actor, req=req)
    return req


def provisioning_resume(*, now: dt.datetime | None = None) -> int:
    """Enqueue again the requests left provisioning with no live claim: a worker that died
    mid-attempt, or a task lost before it ran. Safe: a run claims the request first, and it
    looks for what an earlier attempt created before creating anything."""
    from labgov.provisioning.tasks import provision_request

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


def _what(req: ProvisioningRequest | None) -> str:
    if req is None:
        return "the pod"
    where = f" in {req.data_center_id}" if req.data_center_id else ""
    return f"{req.gpu_count} × {req.gpu_type_id} in {req.get_cloud_display()}{where}"


def explain(exc: RunpodError, req: ProvisioningRequest | None = None) -> str:
    """A Runpod failure in words for the requester and the approver."""
    if isinstance(exc, RunpodInsufficientBalance):
        return (
            "Runpod refused to start the pod because the Runpod account's balance is too low "
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
            f"The connected Runpod API key may not create pods ({exc.status}). An institution "
            "admin must give the key write access, then retry."
        )
    detail = (exc.detail or "").lower()
    if exc.status == 400 and any(words in detail for words in _NO_CAPACITY_WORDS):
        return (
            f"Runpod has no free capacity for {_what(req)} right now (400: {exc.detail}). "
            "Nothing was started and nothing is charged for the pod. Retry later, or cancel "
            "and submit the request with another GPU type, cloud or data center."
        )
    if isinstance(exc, RunpodRequestInvalid):
        detail = exc.detail or "; ".join(exc.errors) or exc.message
        return (
            f"Runpod refused the pod as invalid ({exc.status}): {detail}. If the request needs "
            "changing, cancel it and submit a corrected one; otherwise retry."
        )
    if isinstance(exc, RunpodUnavailable):
        return (
            f"Runpod did not answer in time ({exc.message}). The pod may or may not have been "
            "created: retrying looks for it first, so it is never created twice."
        )
    return f"Runpod answered with an error: {exc.message} Retry, or cancel the request."


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
        "env": {"LABGOV_ALLOCATION": str(req.allocation_id), "LABGOV_REQUEST": str(req.pk)},
    }
    if network_volume_id:
        body["mounts"] = {"network": [{"volumeId": network_volume_id, "path": WORKSPACE}]}
    elif req.volume_disk_gb:
        body["mounts"] = {"persistent": {"size": req.volume_disk_gb, "path": WORKSPACE}}
    if req.data_center_id:
        body["dataCenterIds"] = [req.data_center_id]
    return body


def _find_pod(pods, req: ProvisioningRequest):
    for pod in pods:
        if (pod.env or {}).get("LABGOV_REQUEST") == str(req.pk) or pod.name.startswith(req.marker):
            return pod
    return None


def _on_runpod(client, req: ProvisioningRequest):
    """Find or create the request's network volume (when asked for) and pod."""
    volume = None
    if req.network_volume_gb:
        name = f"{req.marker}volume"
        volume = next((v for v in client.list_network_volumes() if v.name == name), None)
        if volume is None:
            volume = client.create_network_volume(
                {"name": name, "size": req.network_volume_gb, "dataCenter": req.data_center_id}
            )
    pod = _find_pod(client.list_pods(), req)
    if pod is None:
        pod = client.create_pod(pod_body(req, network_volume_id=volume.id if volume else None))
    return pod, volume


def provisioning_run(
    *, request_id: int, client_factory: Callable | None = None
) -> ProvisioningRequest:
    """Create the request's resources on Runpod (the task's body). Safe to run twice: only
    one worker holds the claim, and a second attempt finds what the first created."""
    from labgov.runpod.services import client_for_account

    client_factory = client_factory or client_for_account
    if not _claim(request_id):
        return ProvisioningRequest.objects.get(pk=request_id)
    req = ProvisioningRequest.objects.select_related("lab").get(pk=request_id)
    account = runpod_account_for_lab(req.lab)
    if account is None:
        return provisioning_fail(
            request_id=request_id,
            message=f"No Runpod account is connected for {req.lab}: an institution admin must "
            "connect one, then retry.",
        )
    try:
        with client_factory(account) as client:
            pod, volume = _on_runpod(client, req)
    except RunpodError as exc:
        log.warning("provisioning request %s failed: %s", request_id, exc.message)
        return provisioning_fail(request_id=request_id, message=explain(exc, req), account=account)
    return provisioning_succeed(request_id=request_id, account=account, pod=pod, volume=volume)


@transaction.atomic
def provisioning_fail(
    *, request_id: int, message: str, account: RunpodAccount | None = None
) -> ProvisioningRequest:
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


def _attribute(req: ProvisioningRequest, resource: Resource) -> None:
    """Pay the resource from the request's allocation, from its first second. A resource the
    sync already attributed to the same allocation (by its LABGOV_ALLOCATION env) is left."""
    req.resources.add(resource)
    latest = Assignment.objects.filter(resource=resource).order_by("-starts_at", "-id").first()
    if latest is not None and latest.allocation_id == req.allocation_id:
        return
    resource_assign(
        actor=None,
        resource=resource,
        allocation=req.allocation,
        starts_at=BEGINNING if latest is None else None,
        source=Assignment.Source.PROVISIONED,
        note=f"Provisioned by labgov for request #{req.pk}",
    )


@transaction.atomic
def provisioning_succeed(*, request_id: int, account, pod, volume=None) -> ProvisioningRequest:
    req = ProvisioningRequest.objects.get(pk=request_id)
    lock_allocation(req.allocation_id)
    req = lock_request(request_id)
    if req.state != S.PROVISIONING:
        return req
    if volume is not None:
        _attribute(
            req,
            _resource_upsert(
                account, ResourceKind.NETWORK_VOLUME, volume.id, _volume_fields(volume)
            ),
        )
    _attribute(req, _resource_upsert(account, ResourceKind.POD, pod.id, _pod_fields(pod)))
    _save(
        req,
        state=S.PROVISIONED,
        runpod_account=account,
        runpod_id=pod.id,
        provisioned_at=timezone.now(),
        provision_claimed_until=None,
        last_error="",
    )
    record(
        actor=None,
        req=req,
        event="provisioned",
        before_state=S.PROVISIONING,
        body=f"Pod {pod.name} ({pod.id}) was created on Runpod and is paid by "
        f"{req.allocation} from its first second.",
    )
    return req


MANUAL_KINDS = {
    DeploymentModel.SERVERLESS: ResourceKind.SERVERLESS,
    DeploymentModel.CLUSTER: ResourceKind.CLUSTER,
}


@transaction.atomic
def request_mark_provisioned(
    *, actor, req: ProvisioningRequest, account: RunpodAccount, runpod_id: str
) -> ProvisioningRequest:
    """A Serverless endpoint or Cluster that someone created on Runpod by hand: record its id,
    and attach attribution as labgov does for the pods it creates."""
    runpod_id = (runpod_id or "").strip()
    if not runpod_id:
        raise DomainError("Give the Runpod id of the endpoint or cluster.", field="runpod_id")
    lock_allocation(req.allocation_id)
    req = lock_request(req.pk)
    _require_reviewer(actor, req)
    _require(req, (S.APPROVED,), "be marked provisioned (only approved requests can)")
    kind = MANUAL_KINDS.get(req.deployment_model)
    if kind is None:
        raise DomainError("labgov creates pods itself; only endpoints and clusters are marked.")
    if not runpod_accounts_for_lab(req.lab).filter(pk=account.pk).exists():
        raise DomainError("That Runpod account does not serve this lab.", field="account")
    resource = Resource.objects.filter(account=account, kind=kind, runpod_id=runpod_id).first()
    if resource is None:
        now = timezone.now()
        resource = Resource.objects.create(
            account=account,
            kind=kind,
            runpod_id=runpod_id,
            name=req.title,
            first_seen_at=now,
            status_changed_at=now,
        )
    _attribute(req, resource)
    before = req.state
    _save(
        req,
        state=S.PROVISIONED,
        runpod_account=account,
        runpod_id=runpod_id,
        provisioned_at=timezone.now(),
    )
    record(
        actor=actor,
        req=req,
        event="provisioned",
        before_state=before,
        body=f"{resource.get_kind_display()} {runpod_id} is paid by {req.allocation}.",
    )
    return req
