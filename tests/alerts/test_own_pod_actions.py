"""A member stops and starts their own pod from their own page (My spend), with a
confirmation that says what it costs, through the alert pod-action rules and audit: owners
stop and start, nobody else acts from there, and nobody terminates from there."""

import datetime as dt

import pytest
from django.urls import reverse

from labgov.accounts.models import Membership, today_utc
from labgov.alerts.models import Alert, Kind, Severity
from labgov.audit.models import AuditEvent
from labgov.runpod.models import Resource
from labgov.runpod.sync import account_sync

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("at_sim_now")]


@pytest.fixture
def synced(world, sim, sim_account, fast_clients, monkeypatch):
    run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == "succeeded", run.error
    # The member's pods: the stopped one with a 100 GB volume disk, and a running one.
    Resource.objects.filter(name__in=["vision-annotate", "nlp-data-prep"]).update(
        current_allocation=world.allocation
    )
    # The views reach Runpod through the same fast client as the sync.
    monkeypatch.setattr("labgov.runpod.services.write_client_for_account", fast_clients)


def _url(name, action):
    return reverse("alerts:own_pod_action", args=[Resource.objects.get(name=name).pk, action])


def test_member_stops_their_running_pod_after_confirming(world, synced, client_for):
    client = client_for(world.member)
    page = client.get(reverse("dashboard:me")).content.decode()
    running = page.split('id="pod-')[1:]
    row = next(r for r in running if "nlp-data-prep" in r).split("</tr>")[0]
    assert "per hour" in row and _url("nlp-data-prep", "stop") in row
    assert "terminate" not in row.lower()
    confirm = client.get(_url("nlp-data-prep", "stop")).content.decode()
    assert "stops billing" in confirm and "per month while stopped" in confirm
    response = client.post(_url("nlp-data-prep", "stop"))
    assert response.status_code == 302 and response.url == reverse("dashboard:me")
    pod = Resource.objects.get(name="nlp-data-prep")
    assert pod.status == "EXITED"
    event = AuditEvent.objects.get(action="runpod.pod_stop")
    assert event.actor == world.member and event.target_id == str(pod.pk)
    page = client.get(reverse("dashboard:me")).content.decode()
    row = page.split(f'id="pod-{pod.pk}"')[1].split("</tr>")[0]
    assert "per month" in row and _url("nlp-data-prep", "start") in row


def test_starting_ones_stopped_pod_resolves_its_stopped_pod_alert(world, synced, client_for):
    pod = Resource.objects.get(name="vision-annotate")
    alert = Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        owner=world.member,
        kind=Kind.STOPPED_POD_DISK,
        subject_key=f"resource:{pod.pk}",
        subject_label="Pod vision-annotate",
        resource=pod,
        account=pod.account,
        severity=Severity.WARNING,
        title="About pod vision-annotate",
    )
    client_for(world.member).post(_url("vision-annotate", "start"))
    alert.refresh_from_db()
    assert alert.is_resolved and alert.resolved_by == world.member


@pytest.mark.parametrize(
    ("who", "action", "status"),
    [
        ("member", "terminate", 403),  # terminating loses data: a retention case, two people
        ("lab_admin", "stop", 403),  # sees the pod, but it is not theirs: they act from alerts
        ("other_member", "stop", 404),  # does not see it at all
        ("finance", "stop", 403),
    ],
)
def test_only_the_owner_stops_or_starts_from_their_page(
    world, synced, client_for, who, action, status
):
    response = client_for(getattr(world, who)).post(_url("nlp-data-prep", action))
    assert response.status_code == status
    assert Resource.objects.get(name="nlp-data-prep").status == "RUNNING"
    assert not AuditEvent.objects.filter(action__startswith="runpod.pod_").exists()


def test_an_ended_member_no_longer_runs_their_pod(world, synced, client_for):
    Membership.objects.filter(user=world.member).update(end_date=today_utc() - dt.timedelta(days=1))
    response = client_for(world.member).post(_url("nlp-data-prep", "stop"))
    assert response.status_code == 403
    assert Resource.objects.get(name="nlp-data-prep").status == "RUNNING"
