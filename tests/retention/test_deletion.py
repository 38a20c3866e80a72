"""Approved deletions carried out against the simulator over HTTP: the re-read, idempotence
(an answer lost after the delete, then the retry; 404 already gone; 409 in use) and the audit
row naming requester, approvers and the resource's last known description."""

import datetime as dt

import pytest
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.notifications.models import Notification
from labgov.retention import services
from labgov.retention.deletion import Outcome, case_delete_carry_out
from labgov.retention.models import State
from labgov.runpod.models import Resource
from tests.factories import ResourceFactory
from tests.retention.conftest import open_case

UNUSED = "th5d8r2y7e"  # old-thesis-data, 300 GB, no pod mounts it
MOUNTED_BY_STOPPED = "vc8h2m5q1z"  # a stopped pod mounts it: Runpod refuses with 409


@pytest.fixture
def approved(world, sim, sim_account, ending_grant, policy, second_admin):
    def make(runpod_id=UNUSED, size_gb=300, name="old-thesis-data", kind="network_volume"):
        _, allocation = ending_grant
        fields = {"size_gb": size_gb, "data_center_id": "US-KS-2", "volume_type": "STANDARD"}
        if kind == "pod":
            fields = {"status": "EXITED", "volume_disk_gb": size_gb, "data_center_id": "CA-MTL-1"}
        resource = ResourceFactory(
            account=sim_account,
            kind=kind,
            runpod_id=runpod_id,
            name=name,
            current_allocation=allocation,
            created_at_runpod=timezone.now() - dt.timedelta(days=5),
            **fields,
        )
        case = open_case(resource)
        case = services.deletion_request(actor=world.lab_admin, case=case, reason="copied")
        return services.deletion_approve(actor=second_admin, case=case)

    return make


def _volume_ids(sim):
    return {v["id"] for v in sim.state.list_volumes()}


def test_deletes_the_volume_and_audits_who_and_what(
    world, sim, approved, fast_clients, second_admin
):
    case = approved()
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED
    assert UNUSED not in _volume_ids(sim)
    case.refresh_from_db()
    assert case.state == State.DELETED and case.resource.gone_at is not None
    event = AuditEvent.objects.get(action="retention.delete", target_id=str(case.pk))
    assert event.after["requested_by"] == world.lab_admin.username
    assert event.after["approved_by"] == [second_admin.username]
    known = event.after["last_known"]
    assert (known["runpod_id"], known["name"], known["size_gb"], known["data_center"]) == (
        UNUSED,
        "old-thesis-data",
        300,
        "US-KS-2",
    )
    assert "last_mounted" in known
    assert Notification.objects.filter(kind="retention.deleted", recipient=world.member).exists()
    # Running it again changes nothing.
    assert (
        case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.NOT_APPROVED
    )


def test_lost_answer_then_retry_is_not_a_failure(sim, approved, fast_clients):
    case = approved()
    sim.inject_fault("/v2/network-volumes/", "lost_answer", method="DELETE")
    assert (
        case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.ALREADY_GONE
    )
    assert UNUSED not in _volume_ids(sim)
    case.refresh_from_db()
    assert case.state == State.DELETED


def test_already_gone_is_recorded_as_deleted(sim, approved, fast_clients):
    case = approved()
    sim.state.delete_volume(UNUSED)  # someone deleted it on Runpod's console
    assert (
        case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.ALREADY_GONE
    )
    case.refresh_from_db()
    assert case.state == State.DELETED


def test_404_on_the_delete_is_already_gone(sim, approved, fast_clients):
    case = approved()
    sim.inject_fault("/v2/network-volumes/", "404", method="DELETE")
    assert (
        case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.ALREADY_GONE
    )


def test_a_stopped_pod_labgov_had_not_seen_sends_the_case_back_in_words(
    world, sim, approved, fast_clients
):
    # The pod mounting it is not in labgov yet (no sync since): the re-read finds it.
    case = approved(runpod_id=MOUNTED_BY_STOPPED, size_gb=750, name="vision-checkpoints")
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.CHANGED
    assert MOUNTED_BY_STOPPED in _volume_ids(sim)
    case.refresh_from_db()
    assert case.state == State.OPEN
    assert "stopped pod vision-data-sync (h6g5f4d3s2a1p0) mounts it" in case.refusal
    assert "include the pod in the case" in case.refusal and case.refused_at is not None
    assert AuditEvent.objects.filter(action="retention.return", target_id=str(case.pk)).exists()
    assert Notification.objects.filter(kind="retention.refused", recipient=world.lab_admin).exists()


def test_runpods_409_is_a_refusal_in_words_told_to_requester_and_approver(
    world, sim, sim_account, ending_grant, policy, fast_clients
):
    """An approver from outside the lab's admins (an institution admin) hears of it too."""
    _, allocation = ending_grant
    volume = ResourceFactory(
        account=sim_account,
        kind="network_volume",
        runpod_id=UNUSED,
        name="old-thesis-data",
        size_gb=300,
        data_center_id="US-KS-2",
        volume_type="STANDARD",
        current_allocation=allocation,
        created_at_runpod=timezone.now() - dt.timedelta(days=5),
    )
    case = services.deletion_request(actor=world.lab_admin, case=open_case(volume), reason="x")
    case = services.deletion_approve(actor=world.inst_admin, case=case)
    sim.inject_fault("/v2/network-volumes/", "409", method="DELETE")
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.REFUSED
    assert UNUSED in _volume_ids(sim)
    case.refresh_from_db()
    assert case.state == State.OPEN and case.deleted_at is None
    assert case.refusal.startswith("Runpod refused to delete it (HTTP 409)")
    refused = Notification.objects.filter(kind="retention.refused")
    assert {world.lab_admin.pk, world.inst_admin.pk} <= set(
        refused.values_list("recipient_id", flat=True)
    )
    assert not AuditEvent.objects.filter(action="retention.delete", target_id=str(case.pk))


def test_transient_failure_leaves_it_approved_for_the_retry(sim, approved, fast_clients):
    from labgov.runpod.errors import RunpodUnavailable

    case = approved()
    sim.inject_fault("/v2/network-volumes/", "503", method="DELETE", times=None)
    with pytest.raises(RunpodUnavailable):
        case_delete_carry_out(case_id=case.pk, client_factory=fast_clients)
    case.refresh_from_db()
    assert case.state == State.DELETION_APPROVED
    sim.clear_faults()
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"size_gb": 200}, "resized"),
        ({"name": "other-name"}, "renamed"),
        ({"allocation_id": None}, "re-attributed"),
    ],
)
def test_reread_refuses_a_changed_resource(sim, approved, fast_clients, change, words):
    case = approved()
    # What labgov knew when the deletion was requested differs from what Runpod says now.
    case.last_known = {**case.last_known, **change}
    case.save(update_fields=["last_known"])
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.CHANGED
    assert UNUSED in _volume_ids(sim)
    case.refresh_from_db()
    assert case.state == State.OPEN and words in case.note


def test_reread_refuses_a_pod_running_again(sim, approved, fast_clients):
    case = approved(runpod_id="a4n8d2r6t0w5y1", size_gb=100, name="vision-annotate", kind="pod")
    sim.state.pod_action("a4n8d2r6t0w5y1", "start")
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.CHANGED
    case.refresh_from_db()
    note = case.note.lower()
    assert case.state == State.OPEN and ("running" in note or "starting" in note)


def test_terminates_a_stopped_pods_volume_disk(sim, approved, fast_clients):
    case = approved(runpod_id="a4n8d2r6t0w5y1", size_gb=100, name="vision-annotate", kind="pod")
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.DELETED
    assert sim.state.pod_status("a4n8d2r6t0w5y1") == "TERMINATED"
    assert Resource.objects.get(pk=case.resource_id).status == "TERMINATED"
