"""A pod's owner is told, once and by name, when someone else stops it from an alert; stopping
one's own pod tells nobody. Nobody terminates it from an alert (that goes through a retention
case with two people, whose transitions tell the owner), so nothing is told of one."""

import pytest

from labgov.alerts.models import Alert, Kind, Severity
from labgov.alerts.services import alert_pod_action
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.notifications.kinds import get_kind
from labgov.notifications.models import Notification
from labgov.runpod.models import Resource
from labgov.runpod.sync import account_sync

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("at_sim_now")]


@pytest.fixture
def synced(world, sim, sim_account, fast_clients):
    run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == "succeeded", run.error
    # The member's pods: the stopped one with a 100 GB volume disk, and a running one.
    Resource.objects.filter(name__in=["vision-annotate", "nlp-data-prep"]).update(
        current_allocation=world.allocation
    )


def _alert_on(world, name) -> Alert:
    pod = Resource.objects.get(name=name)
    return Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        owner=world.member,
        kind=Kind.STOPPED_POD_DISK,
        subject_key=f"resource:{pod.pk}",
        subject_label=f"Pod {name}",
        resource=pod,
        account=pod.account,
        severity=Severity.WARNING,
        title=f"About pod {name}",
    )


def _told(user):
    return Notification.objects.filter(recipient=user, kind__endswith="_by_other")


def test_a_lab_admin_terminating_from_the_alert_is_refused_and_nobody_is_told(
    world, sim, synced, fast_clients
):
    alert = _alert_on(world, "vision-annotate")
    with pytest.raises(DomainError, match="retention case"):
        alert_pod_action(
            actor=world.lab_admin, alert=alert, action="terminate", client_factory=fast_clients
        )
    pod = Resource.objects.get(name="vision-annotate")
    assert sim.state.pod_status(pod.runpod_id) == "EXITED" and pod.gone_at is None
    assert not _told(world.member).exists()
    assert not AuditEvent.objects.filter(action="runpod.pod_terminate").exists()
    # The kind is gone from the list people mute (old rows still read, by their key).
    assert get_kind("pod.terminated_by_other").label == "pod.terminated_by_other"


def test_owner_is_told_once_who_stopped_their_pod(world, synced, fast_clients):
    alert = _alert_on(world, "nlp-data-prep")
    alert_pod_action(
        actor=world.inst_admin, alert=alert, action="stop", client_factory=fast_clients
    )
    [note] = _told(world.member)
    assert note.kind == "pod.stopped_by_other"
    assert world.inst_admin.get_full_name() in note.subject and "stopped" in note.subject


def test_stopping_ones_own_pod_tells_nobody(world, synced, fast_clients):
    alert = _alert_on(world, "nlp-data-prep")
    alert_pod_action(actor=world.member, alert=alert, action="stop", client_factory=fast_clients)
    assert Resource.objects.get(name="nlp-data-prep").status == "EXITED"
    assert not Notification.objects.filter(kind__endswith="_by_other").exists()
