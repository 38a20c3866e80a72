"""A provisioning request's life: save, submit, approve, deny, cancel, expire.

Every transition locks the allocation row, then the request row (that order everywhere),
checks the current state, and writes its audit event and notifications in the same
transaction.
"""

import datetime as dt
from decimal import InvalidOperation

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from labgov.accounts import access
from labgov.core import dataversion
from labgov.core.bounds import MAX_AMOUNT, check_values
from labgov.core.errors import DomainError
from labgov.core.money import ZERO, to_cents
from labgov.core.periods import hour_floor
from labgov.funding.models import Allocation
from labgov.provisioning.assessment import (
    RunpodFacts,
    apply_estimate,
    auto_approvable,
    estimate_request,
    findings,
    needs_second_approval,
)
from labgov.provisioning.models import DeploymentModel, ProvisioningRequest
from labgov.provisioning.selectors import gpu_for, policy_for_lab, runpod_account_for_lab
from labgov.provisioning.services.commitments import (
    commitment_post,
    commitment_release_to,
    lock_allocation,
    lock_request,
)
from labgov.provisioning.services.events import record
from labgov.runpod.models import Resource, ResourceKind

S = ProvisioningRequest.State

# What a requester fills in; everything else on the request is labgov's.
REQUEST_FIELDS = (
    "title",
    "deployment_model",
    "gpu_type_id",
    "gpu_count",
    "node_count",
    "cloud",
    "interruptible",
    "image",
    "data_center_id",
    "expected_hours",
    "requests_per_day",
    "seconds_per_request",
    "idle_workers",
    "duration_days",
    "template_id",
    "workers_max",
    "idle_timeout_seconds",
    "scaling_type",
    "scaling_value",
    "cluster_type",
    "network_volume_id",
    "container_disk_gb",
    "volume_disk_gb",
    "network_volume_gb",
    "storage_kept_days",
    "model_params_billion",
    "bytes_per_param",
    "checkpoint_size_gb",
    "write_mb_per_s",
    "checkpoint_interval_minutes",
    "restart_minutes",
    "runs_distributed",
    "data_exchange",
    "shared_files_location",
    "gpu_memory_needed_gb",
    "spending_limit_raised",
    "check_image_starts",
    "check_model_fits",
    "checkpoint_location",
    "interruption_tolerance",
    "cost_measurement",
    "justification",
)


class RequestBlocked(DomainError):
    """The request breaks one or more rules; `reasons` lists each in words."""

    def __init__(self, reasons: list[str]):
        super().__init__(" ".join(reasons))
        self.reasons = reasons


def _require(req: ProvisioningRequest, states, verb: str) -> None:
    if req.state not in states:
        state = req.get_state_display().lower()
        raise DomainError(f"Request #{req.pk} is {state}: it cannot {verb}.")


def _require_reviewer(actor, req: ProvisioningRequest) -> None:
    if actor is None or not access.can_review_requests(actor, req.lab_id):
        raise DomainError("Only the lab's admins can decide on its requests.")


def _require_current_member(user_id: int, lab_id: int, *, requester=None) -> None:
    """A membership that has ended grants no spending: not to request, and not to have a
    request approved."""
    if access.is_active_in_lab(user_id, lab_id):
        return
    if requester is None:
        raise DomainError("Your membership of this lab has ended: you cannot request capacity.")
    raise DomainError(
        f"{requester}'s membership of this lab has ended: their request cannot go ahead."
    )


def _own_allocation(actor, req: ProvisioningRequest) -> bool:
    return actor is not None and req.allocation.user_id == actor.pk


def auto_approval_applies(policy, req: ProvisioningRequest) -> bool:
    """Approval on submission: under the lab's amount, under the institution's ceiling as it is
    now (it may have been lowered since the policy was set), and never when the requester could
    approve requests of the lab themselves: their own rule would approve their own spending."""
    total = req.estimate_total_usd
    ceiling = req.lab.institution.auto_approve_ceiling_usd
    return (
        auto_approvable(policy, total)
        and total < ceiling
        and not access.can_review_requests(req.requester, req.lab_id)
    )


def _locked(req: ProvisioningRequest):
    allocation = lock_allocation(req.allocation_id)
    locked = lock_request(req.pk)
    locked.allocation = allocation
    return allocation, locked


def _save(req: ProvisioningRequest, **fields) -> None:
    for name, value in fields.items():
        setattr(req, name, value)
    req.updated_at = timezone.now()
    req.save()


@transaction.atomic
def request_save(
    *, actor, allocation: Allocation, values: dict, req: ProvisioningRequest | None = None
) -> ProvisioningRequest:
    """Create a draft, or change one. Only the requester edits, and only drafts."""
    access.require_person(actor, "Making a provisioning request")
    unknown = set(values) - set(REQUEST_FIELDS)
    if unknown:
        raise TypeError(f"request_save got unknown fields {sorted(unknown)}")
    if req is None:
        req = ProvisioningRequest(requester=actor)
    else:
        req = lock_request(req.pk)
        if req.requester_id != actor.pk:
            raise DomainError("Only the requester can change a request.")
        _require(req, (S.DRAFT,), "be changed (only drafts can)")
    if allocation.user_id != actor.pk:
        raise DomainError("You can only request against your own allocations.", field="allocation")
    _require_current_member(actor.pk, allocation.funding_source.lab_id)
    for name, value in values.items():
        setattr(req, name, value.strip() if isinstance(value, str) else value)
    if not req.title:
        raise DomainError("Give the request a short title.", field="title")
    req.allocation = allocation
    req.lab_id = allocation.funding_source.lab_id
    gpu = gpu_for(req.gpu_type_id)
    _apply_bounded_estimate(req, gpu)
    # A draft is not a governance change: it is audited from its submission on.
    _save(req)
    return req


ESTIMATE_FIELDS = (
    "gpu_price_per_hr_usd",
    "hourly_rate_usd",
    "estimate_compute_usd",
    "estimate_storage_running_usd",
    "estimate_storage_after_usd",
    "estimate_total_usd",
    "estimate_stop_usd",
)
TOO_LARGE = (
    "The estimate is larger than labgov can record (at most ${:,}); "
    "check the hours, counts and sizes."
)


def _apply_bounded_estimate(req: ProvisioningRequest, gpu) -> None:
    """The estimate onto the request, refused when a figure would not fit its column (the
    commitment made from it must fit the ledger's too)."""
    try:
        apply_estimate(req, gpu, estimate_request(req, gpu))
        check_values(ProvisioningRequest, {f: getattr(req, f) for f in ESTIMATE_FIELDS})
    except (DomainError, InvalidOperation, OverflowError):
        raise DomainError(TOO_LARGE.format(MAX_AMOUNT)) from None


def assess(req: ProvisioningRequest, *, allocation=None, price=None, approval: bool = False):
    """The request's estimate and findings against its lab's current policy (and, for
    endpoints and clusters, the lab's Runpod account: the confirmed spending limit, the
    volume it names; `approval`: the findings of the approval, where more blocks)."""
    policy = policy_for_lab(req.lab)
    gpu = gpu_for(req.gpu_type_id)
    estimate = estimate_request(req, gpu, price=price)
    found = findings(
        req,
        policy=policy,
        gpu=gpu,
        estimate=estimate,
        allocation=allocation,
        today=timezone.now().date(),
        runpod=runpod_facts(req, approval=approval),
    )
    return policy, gpu, estimate, found


def runpod_facts(req: ProvisioningRequest, *, approval: bool = False) -> RunpodFacts | None:
    """What the findings need of the lab's Runpod account; None for pods (no queries)."""
    if req.deployment_model == DeploymentModel.POD or not req.lab_id:
        return None
    account = runpod_account_for_lab(req.lab)
    volume_id = (req.network_volume_id or "").strip()
    volume = None
    if volume_id and account is not None:
        volume = Resource.objects.filter(
            account=account, kind=ResourceKind.NETWORK_VOLUME, runpod_id=volume_id
        ).first()
    return RunpodFacts(
        account_name=account.name if account else "",
        limit_confirmed=bool(account and account.cluster_limit_confirmed_at),
        volume_named=bool(volume_id),
        volume=volume,
        approval=approval,
    )


def _raise_if_blocked(found) -> None:
    reasons = [f.message for f in found if f.blocking]
    if reasons:
        raise RequestBlocked(reasons)


@transaction.atomic
def request_submit(*, actor, req: ProvisioningRequest) -> ProvisioningRequest:
    """Submit a draft for review; approve it at once when the policy's auto-approval covers
    it."""
    access.require_person(actor, "Submitting a provisioning request")
    allocation, req = _locked(req)
    if req.requester_id != actor.pk:
        raise DomainError("Only the requester can submit a request.")
    _require(req, (S.DRAFT,), "be submitted")
    _require_current_member(actor.pk, req.lab_id)
    policy, gpu, estimate, found = assess(req, allocation=allocation)
    _raise_if_blocked(found)
    apply_estimate(req, gpu, estimate)
    now = timezone.now()
    _save(req, state=S.SUBMITTED, submitted_at=now)
    record(actor=actor, req=req, event="submit", before_state=S.DRAFT, body=req.justification)
    if auto_approval_applies(policy, req):
        _approve(
            actor=None,
            req=req,
            allocation=allocation,
            event="auto_approve",
            note=f"Estimate under the lab's auto-approval amount "
            f"(${to_cents(policy.auto_approve_under_usd):,.2f}).",
        )
    return req


@transaction.atomic
def request_approve(*, actor, req: ProvisioningRequest) -> ProvisioningRequest:
    """Approve a submitted request; above the policy's second-approval amount the first
    approval only records the approver and a second, different one completes it."""
    allocation, req = _locked(req)
    _require(req, (S.SUBMITTED,), "be approved")
    _require_reviewer(actor, req)
    # Judge it at the price it was submitted with: the approver approves what they saw.
    policy, _gpu, _estimate, found = assess(
        req, allocation=allocation, price=req.gpu_price_per_hr_usd, approval=True
    )
    total = req.estimate_total_usd
    if actor.pk == req.requester_id or _own_allocation(actor, req):
        raise DomainError(
            "You cannot approve a request charged to your own allocation; another lab admin "
            "or an institution admin must."
        )
    _require_current_member(req.requester_id, req.lab_id, requester=req.requester)
    _raise_if_blocked(found)
    if needs_second_approval(policy, total):
        if req.first_approved_by_id is None:
            _save(req, first_approved_by=actor, first_approved_at=timezone.now())
            record(
                actor=actor,
                req=req,
                event="first_approval",
                before_state=S.SUBMITTED,
                note=f"Over ${to_cents(policy.second_approval_over_usd):,.2f}: a second "
                "approver is needed.",
            )
            return req
        if req.first_approved_by_id == actor.pk:
            raise DomainError("You approved this already; a second, different approver must.")
    _approve(actor=actor, req=req, allocation=allocation, event="approve")
    return req


MADE_BY_LABGOV = {
    DeploymentModel.POD: "pod",
    DeploymentModel.SERVERLESS: "serverless endpoint",
    DeploymentModel.CLUSTER: "cluster",
}


def provisioning_start(*, actor, req: ProvisioningRequest) -> None:
    """Approved → provisioning; the task runs after the transaction commits. The caller
    holds the request's lock."""
    before = req.state
    _save(req, state=S.PROVISIONING, provision_claimed_until=None)
    thing = MADE_BY_LABGOV.get(req.deployment_model, "pod")
    record(
        actor=actor,
        req=req,
        event="provision" if before == S.APPROVED else "retry",
        before_state=before,
        body=f"labgov is creating the {thing} on Runpod now.",
    )
    # The task by its name, as core/queue.py does (the tasks module imports these services);
    # unlike task_enqueue_on_commit, not robust, as before.
    transaction.on_commit(
        lambda: import_string("labgov.provisioning.tasks.provision_request").delay(req.pk)
    )


def _approve(*, actor, req, allocation, event: str, note: str = "") -> None:
    commitment_post(actor=actor, req=req, allocation=allocation)
    now = timezone.now()
    _save(
        req,
        state=S.APPROVED,
        decided_by=actor,
        decided_at=now,
        auto_approved=actor is None,
        spend_counted_from=hour_floor(now),
    )
    record(actor=actor, req=req, event=event, before_state=S.SUBMITTED, note=note)
    if req.deployment_model == DeploymentModel.POD or _labgov_can_create(req):
        provisioning_start(actor=actor, req=req)


def _labgov_can_create(req: ProvisioningRequest) -> bool:
    """An endpoint or cluster is created by labgov when the lab's Runpod account has a write
    key; without one it stays approved, to be made on Runpod by hand and marked provisioned."""
    account = runpod_account_for_lab(req.lab)
    return account is not None and bool(account.write_key_encrypted)


@transaction.atomic
def request_deny(*, actor, req: ProvisioningRequest, reason: str) -> ProvisioningRequest:
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("Say why the request is denied.", field="reason")
    allocation, req = _locked(req)
    _require(req, (S.SUBMITTED,), "be denied")
    _require_reviewer(actor, req)
    _end(actor=actor, req=req, state=S.DENIED, event="deny", reason=reason)
    return req


CANCELLABLE = (S.DRAFT, S.SUBMITTED, S.APPROVED, S.FAILED)


@transaction.atomic
def request_cancel(*, actor, req: ProvisioningRequest, reason: str = "") -> ProvisioningRequest:
    """The requester withdraws, or a lab admin calls it off, before anything runs."""
    allocation, req = _locked(req)
    if actor.pk != req.requester_id:
        _require_reviewer(actor, req)
    if req.state == S.PROVISIONING:
        raise DomainError(
            "labgov is creating this on Runpod right now; wait until it succeeds or fails."
        )
    _require(req, CANCELLABLE, "be cancelled")
    _end(actor=actor, req=req, state=S.CANCELLED, event="cancel", reason=reason.strip())
    return req


def _end(*, actor, req, state: str, event: str, reason: str = "") -> None:
    before = req.state
    commitment_release_to(actor=actor, req=req, target=ZERO, why=f"request {state}")
    now = timezone.now()
    fields = {"state": state, "ended_at": now}
    if event == "deny":
        fields.update(decided_by=actor, decided_at=now)
    if reason:
        fields["decision_reason"] = reason
    _save(req, **fields)
    record(actor=actor, req=req, event=event, before_state=before, body=reason, note=reason)


def requests_expire(*, now: dt.datetime | None = None) -> int:
    """Expire requests left waiting: submitted and never decided, approved and never
    provisioned, or failed and never retried, for LABGOV_REQUEST_EXPIRE_DAYS."""
    now = now or timezone.now()
    cutoff = now - dt.timedelta(days=settings.LABGOV_REQUEST_EXPIRE_DAYS)
    stale = (
        Q(state=S.SUBMITTED, submitted_at__lt=cutoff)
        | Q(state=S.APPROVED, decided_at__lt=cutoff)
        | Q(state=S.FAILED, updated_at__lt=cutoff)
    )
    expired = 0
    for req in (
        ProvisioningRequest.objects.filter(stale)
        .only("pk", "allocation_id", "lab__institution_id")
        .select_related("lab")
    ):
        with dataversion.scope([req.lab.institution_id]), transaction.atomic():
            _allocation, locked = _locked(req)
            if not ProvisioningRequest.objects.filter(stale, pk=locked.pk).exists():
                continue
            _end(
                actor=None,
                req=locked,
                state=S.EXPIRED,
                event="expire",
                reason=f"Nothing happened for {settings.LABGOV_REQUEST_EXPIRE_DAYS} days.",
            )
            expired += 1
    return expired
