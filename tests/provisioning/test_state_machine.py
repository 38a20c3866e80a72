"""The request's life: every allowed transition, the forbidden ones, the money each moves, and
the audit event and notifications each leaves."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.funding.models import Allocation, LedgerEntry
from labgov.notifications.models import Notification
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import (
    RequestBlocked,
    policy_save,
    provisioning_retry,
    request_approve,
    request_cancel,
    request_deny,
    request_mark_provisioned,
    request_save,
    request_submit,
    requests_expire,
)
from labgov.provisioning.services.provision import provisioning_fail
from tests.factories import AllocationFactory, MembershipFactory, RunpodAccountFactory
from tests.provisioning.conftest import (
    CLUSTER_CHECKLIST,
    POD_VALUES,
    listed_cluster,
    listed_endpoint,
)

S = ProvisioningRequest.State
# An account labgov only reads: approved endpoints and clusters wait to be made by hand.
NO_WRITE_KEY = {"write_key_encrypted": "", "write_key_last4": ""}


def _figures(allocation):
    return Allocation.objects.with_figures().get(pk=allocation.pk)


def _policy(world, lab=None, **fields):
    values = {
        "allowed_models": ["pod", "serverless", "cluster"],
        "allowed_clouds": ["SECURE", "COMMUNITY"],
        "auto_approve_under_usd": D(0),
        **fields,
    }
    return policy_save(
        actor=world.inst_admin, institution=world.institution, lab=lab, values=values
    )


def _actions(req):
    return list(
        AuditEvent.objects.filter(
            target_type="provisioning.provisioningrequest", target_id=str(req.pk)
        )
        .order_by("id")
        .values_list("action", flat=True)
    )


def test_draft_keeps_the_estimate_and_moves_no_money(draft, world):
    req = draft()
    assert req.state == S.DRAFT
    assert req.estimate_total_usd == D("351.20")
    assert req.estimate_stop_usd.quantize(D("0.01")) == D("40.97")
    assert req.lab == world.lab
    assert not LedgerEntry.objects.exists()
    assert _actions(req) == []


def test_only_your_own_allocation(draft, world):
    with pytest.raises(DomainError, match="your own allocations"):
        draft(user=world.lab_admin)


def test_only_drafts_change_and_only_by_the_requester(draft, world):
    req = draft()
    with pytest.raises(DomainError, match="Only the requester"):
        request_save(actor=world.lab_admin, allocation=world.allocation, values=POD_VALUES, req=req)
    request_submit(actor=world.member, req=req)
    with pytest.raises(DomainError, match="only drafts can"):
        request_save(actor=world.member, allocation=world.allocation, values=POD_VALUES, req=req)


def test_submit_notifies_the_lab_admins_and_is_audited(submitted, world):
    req = submitted()
    assert req.state == S.SUBMITTED and req.submitted_at is not None
    assert _actions(req) == ["provisioning_request.submit"]
    notes = Notification.objects.filter(kind="provisioning.submit")
    assert {n.recipient for n in notes} == {world.lab_admin}  # not the requester who did it
    assert notes.get().url == f"/provisioning/{req.pk}/"
    assert not LedgerEntry.objects.exists()


def test_submit_refuses_with_every_reason(draft, world):
    req = draft(interruptible=True, image="")
    with pytest.raises(RequestBlocked) as info:
        request_submit(actor=world.member, req=req)
    assert len(info.value.reasons) == 2
    assert any("spot" in r for r in info.value.reasons)
    req.refresh_from_db()
    assert req.state == S.DRAFT


def test_approve_commits_the_estimate(submitted, world):
    req = submitted()
    req = request_approve(actor=world.lab_admin, req=req)
    assert req.state in (S.PROVISIONING,)  # a Pod goes straight on to Runpod
    entry = LedgerEntry.objects.get(kind="commitment")
    assert entry.idempotency_key == f"request:{req.pk}:commit"
    assert entry.amount_usd == D("351.20") and entry.allocation == world.allocation
    assert _figures(world.allocation).committed_usd == D("351.20")
    assert _actions(req) == [
        "provisioning_request.submit",
        "provisioning_request.approve",
        "provisioning_request.provision",
    ]
    # Approved and being created is one notification for the requester, saying the latest.
    note = Notification.objects.get(recipient=world.member)
    assert note.kind == "provisioning.provision"
    assert note.subject == f"Request #{req.pk} is being created on Runpod: {req.title}"


def test_one_notification_follows_a_request_from_approval_to_running(
    submitted, world, runpod_lists
):
    req = submitted(
        deployment_model="serverless",
        requests_per_day=D(1000),
        seconds_per_request=D("3.6"),
        duration_days=D(30),
        gpu_count=1,
        image="",
    )
    req = request_approve(actor=world.lab_admin, req=req)
    note = Notification.objects.get(recipient=world.member)
    assert note.kind == "provisioning.approve"
    Notification.objects.filter(pk=note.pk).update(
        read_at=timezone.now(), emailed_at=timezone.now()
    )
    account = RunpodAccountFactory(institution=world.institution)
    runpod_lists["endpoints"].append(listed_endpoint("ep-1"))
    request_mark_provisioned(actor=world.lab_admin, req=req, account=account, runpod_id="ep-1")
    assert Notification.objects.filter(recipient=world.member).count() == 1
    note.refresh_from_db()
    assert note.kind == "provisioning.provisioned"
    assert note.subject.startswith(f"Request #{req.pk} is running on Runpod")
    assert note.read_at is None and note.emailed_at is None  # news again, in the next digest


def test_serverless_approval_waits_to_be_marked_provisioned(submitted, world):
    req = submitted(
        deployment_model="serverless",
        requests_per_day=D(1000),
        seconds_per_request=D("3.6"),
        duration_days=D(30),
        gpu_count=1,
        image="",
    )
    req = request_approve(actor=world.lab_admin, req=req)
    assert req.state == S.APPROVED
    assert req.commitment_usd == D("150.00")  # 30 worker-hours x $5.00


@pytest.mark.parametrize("who", ["member", "other_member", "finance", "outsider"])
def test_who_cannot_approve(submitted, world, who):
    req = submitted()
    with pytest.raises(DomainError, match="Only the lab's admins"):
        request_approve(actor=getattr(world, who), req=req)


def test_lab_admin_of_another_lab_cannot_approve(submitted, world):
    other_admin = MembershipFactory(role="lab_admin", lab=world.other_lab).user
    with pytest.raises(DomainError):
        request_approve(actor=other_admin, req=submitted())


def test_institution_admin_can_approve(submitted, world):
    req = request_approve(actor=world.inst_admin, req=submitted())
    assert req.decided_by == world.inst_admin


def test_nobody_approves_their_own_request_above_the_auto_approval_amount(draft, world):
    own = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    req = draft(user=world.lab_admin, allocation=own)
    request_submit(actor=world.lab_admin, req=req)
    with pytest.raises(DomainError, match="charged to your own allocation"):
        request_approve(actor=world.lab_admin, req=req)
    assert request_approve(actor=world.inst_admin, req=req).state == S.PROVISIONING


def test_auto_approval_under_the_policy_amount(submitted, world):
    _policy(world, auto_approve_under_usd=D(400))
    req = submitted()
    assert req.state == S.PROVISIONING and req.auto_approved and req.decided_by is None
    assert req.commitment_usd == D("351.20")
    assert _actions(req)[1] == "provisioning_request.auto_approve"


def test_auto_approval_does_not_apply_at_or_above_the_amount(submitted, world):
    _policy(world, auto_approve_under_usd=D("351.20"))
    assert submitted().state == S.SUBMITTED


def test_second_approver_above_the_policy_amount(submitted, world):
    _policy(world, second_approval_over_usd=D(300))
    second = MembershipFactory(role="lab_admin", lab=world.lab).user
    req = submitted()
    req = request_approve(actor=world.lab_admin, req=req)
    assert req.state == S.SUBMITTED and req.first_approved_by == world.lab_admin
    assert not LedgerEntry.objects.exists()
    with pytest.raises(DomainError, match="second, different approver"):
        request_approve(actor=world.lab_admin, req=req)
    req = request_approve(actor=second, req=req)
    assert req.state == S.PROVISIONING and req.decided_by == second
    assert "provisioning_request.first_approval" in _actions(req)


def test_approval_refuses_more_than_the_allocation_has_left(submitted, world):
    first = submitted()
    second = submitted()
    third = submitted()
    request_approve(actor=world.lab_admin, req=first)
    request_approve(actor=world.lab_admin, req=second)
    with pytest.raises(RequestBlocked, match="more than the allocation has left"):
        request_approve(actor=world.lab_admin, req=third)
    third.refresh_from_db()
    assert third.state == S.SUBMITTED
    assert _figures(world.allocation).committed_usd == D("702.40")


def test_deny_needs_a_reason_and_tells_the_requester(submitted, world):
    req = submitted()
    with pytest.raises(DomainError, match="Say why"):
        request_deny(actor=world.lab_admin, req=req, reason="  ")
    req = request_deny(actor=world.lab_admin, req=req, reason="Use the A40s first.")
    assert req.state == S.DENIED and req.decision_reason == "Use the A40s first."
    note = Notification.objects.get(kind="provisioning.deny")
    assert note.recipient == world.member and "A40s" in note.body


@pytest.mark.parametrize(
    ("service", "kwargs"),
    [
        (request_approve, {}),
        (request_deny, {"reason": "no"}),
    ],
)
def test_decisions_only_on_submitted_requests(draft, world, service, kwargs):
    req = draft()
    with pytest.raises(DomainError, match="is draft: it cannot"):
        service(actor=world.lab_admin, req=req, **kwargs)


def test_approved_request_cannot_be_decided_again(submitted, world):
    req = request_approve(actor=world.lab_admin, req=submitted())
    with pytest.raises(DomainError, match="cannot be approved"):
        request_approve(actor=world.lab_admin, req=req)
    with pytest.raises(DomainError, match="cannot be denied"):
        request_deny(actor=world.lab_admin, req=req, reason="late")
    assert LedgerEntry.objects.filter(kind="commitment").count() == 1


def test_cancel_releases_the_commitment(submitted, world):
    req = submitted(
        deployment_model="cluster", node_count=2, runs_distributed=True, **CLUSTER_CHECKLIST
    )
    req = request_approve(actor=world.lab_admin, req=req)
    assert req.state == S.APPROVED
    committed = _figures(world.allocation).committed_usd
    assert committed == req.estimate_total_usd
    req = request_cancel(actor=world.member, req=req)
    assert req.state == S.CANCELLED and req.commitment_usd == 0
    assert _figures(world.allocation).committed_usd == 0
    release = LedgerEntry.objects.get(kind="release")
    assert release.amount_usd == -committed
    assert release.idempotency_key == f"request:{req.pk}:release:2"


def test_cancel_is_for_the_requester_or_a_reviewer(draft, world):
    req = draft()
    with pytest.raises(DomainError):
        request_cancel(actor=world.other_member, req=req)
    assert request_cancel(actor=world.lab_admin, req=req).state == S.CANCELLED


@pytest.mark.parametrize("state", [S.PROVISIONING, S.PROVISIONED, S.DENIED, S.CANCELLED, S.EXPIRED])
def test_cannot_cancel_from(draft, world, state):
    req = draft()
    ProvisioningRequest.objects.filter(pk=req.pk).update(state=state)
    with pytest.raises(DomainError):
        request_cancel(actor=world.member, req=req)


def test_failure_releases_and_retry_commits_again(submitted, world):
    req = request_approve(actor=world.lab_admin, req=submitted())
    req = provisioning_fail(request_id=req.pk, message="Runpod's balance is too low.")
    assert req.state == S.FAILED and req.commitment_usd == 0
    assert Notification.objects.filter(kind="provisioning.fail", recipient=world.member).exists()
    assert Notification.objects.filter(kind="provisioning.fail", recipient=world.lab_admin).exists()
    req = provisioning_retry(actor=world.member, req=req)
    assert req.state == S.PROVISIONING and req.commitment_usd == D("351.20")
    keys = list(LedgerEntry.objects.order_by("id").values_list("idempotency_key", flat=True))
    assert keys == [
        f"request:{req.pk}:commit",
        f"request:{req.pk}:release:2",
        f"request:{req.pk}:commit:3",
    ]
    assert _figures(world.allocation).committed_usd == D("351.20")


def test_retry_only_from_failed(submitted, world):
    req = submitted()
    with pytest.raises(DomainError, match="only failed requests"):
        provisioning_retry(actor=world.member, req=req)


def test_retry_by_someone_else_is_refused(submitted, world):
    req = request_approve(actor=world.lab_admin, req=submitted())
    provisioning_fail(request_id=req.pk, message="x")
    with pytest.raises(DomainError):
        provisioning_retry(actor=world.other_member, req=req)


def test_mark_provisioned_by_hand_attaches_attribution(submitted, world, runpod_lists):
    account = RunpodAccountFactory(institution=world.institution, **NO_WRITE_KEY)
    runpod_lists["clusters"].append(listed_cluster("c1"))
    req = submitted(
        deployment_model="cluster", node_count=2, runs_distributed=True, **CLUSTER_CHECKLIST
    )
    req = request_approve(actor=world.lab_admin, req=req)
    with pytest.raises(DomainError, match="Only the lab's admins"):
        request_mark_provisioned(actor=world.member, req=req, account=account, runpod_id="c1")
    req = request_mark_provisioned(actor=world.lab_admin, req=req, account=account, runpod_id="c1")
    assert req.state == S.PROVISIONED and req.runpod_id == "c1"
    resource = req.resources.get()
    assert resource.kind == "cluster" and resource.current_allocation == world.allocation
    assignment = resource.assignments.get()
    assert assignment.source == "provisioned"
    # From the hour it was approved in, never from 1970.
    assert assignment.starts_at == req.decided_at.replace(minute=0, second=0, microsecond=0)


CLUSTER = {
    "deployment_model": "cluster",
    "node_count": 2,
    "runs_distributed": True,
    **CLUSTER_CHECKLIST,
}


def test_marking_provisioned_never_takes_another_labs_resource(submitted, world, runpod_lists):
    """Issue 9, attack 5: a lab admin marked their request provisioned with another lab's
    endpoint or cluster id, and its spend moved to their allocation."""
    from labgov.runpod.services import resource_assign
    from tests.factories import ResourceFactory

    account = RunpodAccountFactory(institution=world.institution, **NO_WRITE_KEY)
    runpod_lists["clusters"].append(listed_cluster("nlp-cluster"))
    nlp = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    theirs = ResourceFactory(account=account, kind="cluster", runpod_id="nlp-cluster")
    resource_assign(actor=world.inst_admin, resource=theirs, allocation=nlp)
    req = request_approve(actor=world.lab_admin, req=submitted(**CLUSTER))
    with pytest.raises(DomainError) as refused:
        request_mark_provisioned(
            actor=world.lab_admin, req=req, account=account, runpod_id="nlp-cluster"
        )
    assert "already paid by another allocation (of NLP)" in refused.value.message
    assert "an institution admin or a lab admin of NLP can reassign it" in refused.value.message
    theirs.refresh_from_db()
    assert theirs.current_allocation == nlp and theirs.assignments.count() == 1
    req.refresh_from_db()
    assert req.state == S.APPROVED and not req.resources.exists()


def test_marking_provisioned_adopts_an_unattributed_resource_from_the_approval(
    submitted, world, runpod_lists
):
    from tests.factories import ResourceFactory

    account = RunpodAccountFactory(institution=world.institution, **NO_WRITE_KEY)
    runpod_lists["clusters"].append(listed_cluster("made-by-hand"))
    old = timezone.now() - dt.timedelta(days=40)
    cluster = ResourceFactory(
        account=account, kind="cluster", runpod_id="made-by-hand", created_at_runpod=old
    )
    req = request_approve(actor=world.lab_admin, req=submitted(**CLUSTER))
    req = request_mark_provisioned(
        actor=world.lab_admin, req=req, account=account, runpod_id="made-by-hand"
    )
    assert req.state == S.PROVISIONED
    start = cluster.assignments.get().starts_at
    assert start == req.decided_at.replace(minute=0, second=0, microsecond=0)


def test_mark_provisioned_refuses_pods_and_other_labs_accounts(submitted, world):
    lab_account = RunpodAccountFactory(institution=world.institution, lab=world.other_lab)
    req = submitted(
        deployment_model="serverless",
        requests_per_day=D(10),
        seconds_per_request=D(1),
        duration_days=D(1),
        gpu_count=1,
    )
    req = request_approve(actor=world.lab_admin, req=req)
    with pytest.raises(DomainError, match="does not serve this lab"):
        request_mark_provisioned(
            actor=world.lab_admin, req=req, account=lab_account, runpod_id="e1"
        )
    pod = request_approve(actor=world.lab_admin, req=submitted())
    with pytest.raises(DomainError):
        request_mark_provisioned(
            actor=world.lab_admin,
            req=pod,
            account=RunpodAccountFactory(institution=world.institution),
            runpod_id="p1",
        )


def test_expire_stale_requests_and_release(submitted, world, draft):
    waiting = submitted()
    cluster = request_approve(
        actor=world.lab_admin,
        req=submitted(
            deployment_model="cluster", node_count=2, runs_distributed=True, **CLUSTER_CHECKLIST
        ),
    )
    fresh_draft = draft()
    assert requests_expire() == 0
    later = timezone.now() + dt.timedelta(days=15)
    with time_machine.travel(later):
        assert requests_expire() == 2
        assert requests_expire() == 0
    for req in (waiting, cluster):
        req.refresh_from_db()
        assert req.state == S.EXPIRED and req.commitment_usd == 0
    fresh_draft.refresh_from_db()
    assert fresh_draft.state == S.DRAFT
    assert _figures(world.allocation).committed_usd == 0
    assert AuditEvent.objects.filter(action="provisioning_request.expire").count() == 2


def test_every_transition_is_audited_in_the_institution(submitted, world):
    req = request_deny(actor=world.lab_admin, req=submitted(), reason="no")
    events = AuditEvent.objects.filter(target_id=str(req.pk), action__startswith="provisioning")
    assert {e.institution_id for e in events} == {world.institution.pk}
    deny = events.get(action="provisioning_request.deny")
    assert deny.before == {"state": "submitted"} and deny.after["state"] == "denied"
    assert deny.actor == world.lab_admin


def test_expire_command(submitted, world):
    from io import StringIO

    from django.core.management import call_command

    submitted()
    out = StringIO()
    with time_machine.travel(timezone.now() + dt.timedelta(days=30)):
        call_command("expire_provisioning_requests", stdout=out)
    assert "Expired 1 request(s); resumed 0." in out.getvalue()


def test_periodic_tasks_are_scheduled(settings):
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["provisioning-expire"]["task"] == "labgov.provisioning.tasks.expire_requests"
    assert (
        schedule["provisioning-resume"]["task"] == "labgov.provisioning.tasks.resume_provisioning"
    )
