"""Allocation tags on a shared Runpod account are claims a person confirms.

Everyone on a Runpod team can read every pod's environment (`GET /v2/pods`), so a tag code is
no secret there: a pod carrying someone else's `LABGOV_ALLOCATION` would charge their
allocation. On an account several labs share (one with no lab of its own) a tag therefore
only opens a claim (runpod/attribution.py `rules_apply`); the resource stays unattributed
until the allocation's holder or a lab admin of its lab confirms it, and is then paid by the
allocation from its first hour in open periods, as a tag on a lab's own account is at once.
"""

from django.db import transaction
from django.utils import timezone

from labgov.accounts import access
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.runpod.attribution import CLAIM_REFUSALS, tag_of, tag_verdicts
from labgov.runpod.models import Assignment, Resource, TagClaim


def may_decide(user, claim: TagClaim) -> bool:
    """The allocation's holder while active in its lab, or a lab admin of its lab (an
    institution admin counts as one)."""
    allocation = claim.allocation
    lab_id = allocation.funding_source.lab_id
    if access.can_manage_lab(user, lab_id):
        return True
    return (
        user is not None
        and user.pk is not None
        and allocation.user_id == user.pk
        and access.is_active_in_lab(user.pk, lab_id)
    )


def claims_for(user):
    """The pending claims the person may decide, newest first."""
    scope = access.scope_for(user)
    from django.db.models import Q

    return (
        TagClaim.objects.filter(status=TagClaim.Status.PENDING)
        .filter(
            Q(allocation__funding_source__lab_id__in=scope.managed_labs)
            | Q(
                allocation__user_id=user.pk,
                allocation__funding_source__lab_id__in=scope.member_labs,
            )
        )
        .select_related("resource", "resource__account", "allocation", "allocation__user")
        .select_related("allocation__funding_source")
        .order_by("-created_at", "pk")
    )


def _locked_pending(actor, claim: TagClaim) -> TagClaim:
    locked = (
        TagClaim.objects.select_for_update(of=("self",))
        .select_related("allocation__funding_source", "resource__account")
        .get(pk=claim.pk)
    )
    if not may_decide(actor, locked):
        raise DomainError(
            "Only the allocation's holder or a lab admin of its lab confirms or rejects its tag."
        )
    if locked.status != TagClaim.Status.PENDING:
        raise DomainError(f"This tag claim was {locked.get_status_display().lower()} already.")
    return locked


@transaction.atomic
def tag_claim_confirm(*, actor, claim: TagClaim) -> Assignment:
    """Charge the resource to the claimed allocation: its first assignment, covering its
    history in open periods, as a tag on a lab's own account does."""
    from labgov.runpod.services import resource_assign

    locked = _locked_pending(actor, claim)
    resource = locked.resource
    if Assignment.objects.filter(resource=resource).exists():
        raise DomainError("The resource is paid by an assignment already; the claim is moot.")
    if tag_of(resource) != locked.allocation.tag_code:
        raise DomainError("The resource no longer carries this allocation's tag.")
    allocation_id, why = tag_verdicts(
        resource.account, {locked.allocation.tag_code}, timezone.now().date()
    )[locked.allocation.tag_code]
    if allocation_id != locked.allocation_id:
        raise DomainError(f"The tag cannot be honoured: {why}.")
    now = timezone.now()
    locked.status, locked.decided_by, locked.decided_at = TagClaim.Status.CONFIRMED, actor, now
    locked.save(update_fields=["status", "decided_by", "decided_at"])
    Resource.objects.filter(pk=resource.pk).update(tag_refusal="")
    assignment = resource_assign(
        actor=actor,
        resource=resource,
        allocation=locked.allocation,
        source=Assignment.Source.RULE,
        note=f"LABGOV_ALLOCATION tag, confirmed by {actor}"[:300],
    )
    audit_record(
        actor=actor,
        action="tag_claim.confirm",
        target=locked,
        institution_id=resource.account.institution_id,
        after={
            "resource_id": resource.pk,
            "allocation_id": locked.allocation_id,
            "starts_at": assignment.starts_at.isoformat(),
        },
    )
    return assignment


@transaction.atomic
def tag_claim_reject(*, actor, claim: TagClaim) -> TagClaim:
    """Refuse the claim: the resource stays unattributed, and the tag is not claimed again."""
    locked = _locked_pending(actor, claim)
    locked.status, locked.decided_by = TagClaim.Status.REJECTED, actor
    locked.decided_at = timezone.now()
    locked.save(update_fields=["status", "decided_by", "decided_at"])
    Resource.objects.filter(pk=locked.resource_id).update(
        tag_refusal=CLAIM_REFUSALS[TagClaim.Status.REJECTED]
    )
    audit_record(
        actor=actor,
        action="tag_claim.reject",
        target=locked,
        institution_id=locked.resource.account.institution_id,
        after={"resource_id": locked.resource_id, "allocation_id": locked.allocation_id},
    )
    return locked
