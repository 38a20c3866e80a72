"""Deletion that can fail, said so, and can be finished: what blocks a network volume's deletion
(every pod that mounts it, running or stopped) shown before anyone approves; a stopped pod
included in the case and terminated with the volume on the same request and approval; a
running pod never terminated this way. Played against the simulator's default scenario, where
the stopped pod vision-data-sync mounts vision-checkpoints."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.retention import services
from labgov.retention.blockers import deletion_blockers
from labgov.retention.deletion import Outcome, case_delete_carry_out
from labgov.retention.models import State
from labgov.runpod.models import Resource
from tests.factories import ResourceFactory
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture
from tests.retention.conftest import open_case

VOLUME, POD = "vc8h2m5q1z", "h6g5f4d3s2a1p0"  # vision-checkpoints, 750 GB; vision-data-sync


@pytest.fixture
def blocked(world, sim, sim_account, ending_grant, policy):
    """The volume's case, with the stopped pod that mounts it known to labgov (as a sync
    brings it), paid by the member."""
    _, allocation = ending_grant
    volume = ResourceFactory(
        account=sim_account,
        kind="network_volume",
        runpod_id=VOLUME,
        name="vision-checkpoints",
        size_gb=750,
        data_center_id="US-KS-2",
        volume_type="STANDARD",
        current_allocation=allocation,
        created_at_runpod=timezone.now() - dt.timedelta(days=5),
    )
    pod = ResourceFactory(
        account=sim_account,
        kind="pod",
        runpod_id=POD,
        name="vision-data-sync",
        status="EXITED",
        container_disk_gb=10,
        volume_disk_gb=0,
        network_volume_id=VOLUME,
        data_center_id="US-KS-2",
        current_allocation=allocation,
    )
    return open_case(volume), pod


def test_the_case_shows_every_pod_that_mounts_it_and_whether_deleting_is_possible(
    world, blocked, client_for
):
    case, pod = blocked
    blockers = deletion_blockers(case)
    assert [b.pod for b in blockers.pods] == [pod] and not blockers.possible
    assert "stopped pod vision-data-sync" in blockers.words
    assert world.member.get_full_name() in blockers.words  # its owner, by name
    page = client_for(world.lab_admin).get(reverse("retention:detail", args=[case.pk]))
    html = page.content.decode()
    assert 'data-deletable="no"' in html and "vision-data-sync" in html
    assert 'data-form="include"' in html


def test_a_running_pod_blocks_too_and_is_never_included(world, blocked, sim):
    case, pod = blocked
    Resource.objects.filter(pk=pod.pk).update(status="RUNNING", cost_per_hr_usd="0.27")
    blockers = deletion_blockers(case)
    assert not blockers.possible and not blockers.includable
    assert "stop that pod first" in blockers.words
    with pytest.raises(DomainError, match="never terminates a running pod"):
        services.case_include_pod(actor=world.lab_admin, case=case, pod=pod)


def test_approval_is_refused_while_a_known_pod_blocks_it(world, blocked, second_admin):
    case, _pod = blocked
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    with pytest.raises(DomainError, match="Deleting is not possible now"):
        services.deletion_approve(actor=second_admin, case=case)
    case.refresh_from_db()
    assert case.state == State.DELETION_REQUESTED


def test_including_the_stopped_pod_finishes_the_deletion(
    world, blocked, second_admin, sim, fast_clients
):
    case, pod = blocked
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    # Included after the request, before any approval: the same requester and approver.
    services.case_include_pod(actor=world.lab_admin, case=case, pod=pod)
    case.refresh_from_db()
    assert deletion_blockers(case).possible
    assert [p["runpod_id"] for p in case.last_known["included_pods"]] == [POD]
    case = services.deletion_approve(actor=second_admin, case=case)
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED
    assert sim.state.pod_status(POD) == "TERMINATED"
    assert VOLUME not in {v["id"] for v in sim.state.list_volumes()}
    pod.refresh_from_db()
    assert pod.gone_at is not None and pod.status == "TERMINATED"
    assert AuditEvent.objects.filter(action="retention.include", target_id=str(case.pk)).exists()
    terminated = AuditEvent.objects.get(action="retention.delete_pod", target_id=str(pod.pk))
    assert terminated.after["case_id"] == case.pk


def test_include_is_refused_after_an_approval_and_for_other_pods(
    world, blocked, sim_account, second_admin
):
    from django.core.exceptions import PermissionDenied

    from labgov.retention.models import RetentionPolicy

    case, pod = blocked
    elsewhere = ResourceFactory(
        account=sim_account, kind="pod", runpod_id="zz", status="EXITED", network_volume_id="x"
    )
    with pytest.raises(DomainError, match="does not mount"):
        services.case_include_pod(actor=world.lab_admin, case=case, pod=elsewhere)
    with pytest.raises(PermissionDenied):
        services.case_include_pod(actor=world.member, case=case, pod=pod)
    # Two approvers: after the first, a pod the next sync brings cannot join the case (the
    # approval given did not cover it).
    RetentionPolicy.objects.filter(institution=world.institution).update(approvers_required=2)
    services.case_include_pod(actor=world.lab_admin, case=case, pod=pod)
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    case = services.deletion_approve(actor=second_admin, case=case)
    late = ResourceFactory(
        account=sim_account,
        kind="pod",
        runpod_id="late",
        status="EXITED",
        network_volume_id=VOLUME,
        current_allocation=pod.current_allocation,
    )
    with pytest.raises(DomainError, match="approved this deletion already"):
        services.case_include_pod(actor=world.lab_admin, case=case, pod=late)
    with pytest.raises(DomainError, match="Deleting is not possible now"):
        services.deletion_approve(actor=world.inst_admin, case=case)


def test_a_pod_that_started_again_is_not_terminated(
    world, blocked, second_admin, sim, fast_clients
):
    case, pod = blocked
    services.case_include_pod(actor=world.lab_admin, case=case, pod=pod)
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    case = services.deletion_approve(actor=second_admin, case=case)
    sim.state.pod_action(POD, "start")
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.CHANGED
    assert sim.state.pod_status(POD) != "TERMINATED"
    case.refresh_from_db()
    assert case.state == State.OPEN and "a running pod mounts it now" in case.refusal
    assert "vision-data-sync" in case.refusal


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("flushable_append_only")
def test_an_approval_whose_deletion_runpod_refuses_is_not_shown_as_success(
    world, blocked, second_admin, sim, client_for
):
    """The approve button's answer is the case's outcome: the deletion task ran on the
    approval's commit (eagerly here) and Runpod refused, so the page says so, never
    "approved"."""
    case, pod = blocked
    services.case_include_pod(actor=world.lab_admin, case=case, pod=pod)
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    sim.inject_fault("/v2/network-volumes/", "409", method="DELETE")
    client = client_for(second_admin)
    response = client.post(reverse("retention:action", args=[case.pk, "approve"]), follow=True)
    text = response.content.decode()
    case.refresh_from_db()
    assert case.state == State.OPEN
    assert "Not deleted." in text and "approved for deletion" not in text
    assert "Runpod refused to delete it (HTTP 409)" in text
