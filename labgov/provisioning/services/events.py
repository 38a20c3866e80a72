"""Audit and notify: every transition of a request writes its audit event and tells the
requester and the lab's approvers, in the transaction of the change."""

from django.urls import reverse

from labgov.accounts.models import Membership, Role, User
from labgov.audit.services import audit_record
from labgov.notifications.services import notify
from labgov.provisioning.models import ProvisioningRequest

SUBJECTS = {
    "submit": "Request #{id} submitted: {title}",
    "auto_approve": "Request #{id} approved automatically: {title}",
    "first_approval": "Request #{id} needs a second approver: {title}",
    "approve": "Request #{id} approved: {title}",
    "deny": "Request #{id} denied: {title}",
    "cancel": "Request #{id} cancelled: {title}",
    "expire": "Request #{id} expired: {title}",
    "provision": "Request #{id} is being created on Runpod: {title}",
    "provisioned": "Request #{id} is running on Runpod: {title}",
    "fail": "Request #{id} could not be created on Runpod: {title}",
    "retry": "Request #{id} is being retried: {title}",
}


def approvers_of(lab) -> list[User]:
    """Who reviews the lab's requests: its lab admins; when it has none, the institution's
    admins."""
    admins = list(
        User.objects.filter(
            pk__in=Membership.objects.active()
            .filter(lab=lab, role=Role.LAB_ADMIN)
            .values("user_id")
        )
    )
    if admins:
        return admins
    return list(
        User.objects.filter(
            pk__in=Membership.objects.active()
            .filter(institution_id=lab.institution_id, role=Role.INSTITUTION_ADMIN)
            .values("user_id")
        )
    )


def record(
    *,
    actor,
    req: ProvisioningRequest,
    event: str,
    before_state: str,
    body: str = "",
    note: str = "",
    notify_requester: bool = True,
    notify_approvers: bool = True,
):
    audit = audit_record(
        actor=actor,
        action=f"provisioning_request.{event}",
        target=req,
        institution_id=req.lab.institution_id,
        before={"state": before_state},
        after={
            "state": req.state,
            "estimate_total_usd": str(req.estimate_total_usd),
            "commitment_usd": str(req.commitment_usd),
        },
        note=note,
    )
    recipients = []
    if notify_requester:
        recipients.append(req.requester)
    if notify_approvers:
        recipients += approvers_of(req.lab)
    actor_pk = getattr(actor, "pk", None)
    recipients = [r for r in recipients if r.pk != actor_pk]
    # A request, from its submission to a running pod (or its failure and retries), is one
    # story: each person gets one notification of it, updated as it goes, not one per step.
    notify(
        recipients=recipients,
        kind=f"provisioning.{event}",
        subject=SUBJECTS[event].format(id=req.pk, title=req.title),
        body=body or note,
        url=reverse("provisioning:detail", args=[req.pk]),
        dedupe_key=f"provisioning_request:{req.pk}:{event}:{audit.pk}",
        lab=req.lab,
        thread_key=f"provisioning_request:{req.pk}",
    )
    return audit
