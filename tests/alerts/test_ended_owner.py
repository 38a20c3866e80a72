"""Issue 9, attack 6 (pods): the owner of a pod whose membership ended yesterday still stopped
and started it from its alert. Refused now; the alert stays readable to them and the lab."""

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from labgov.accounts.access import forget_scope
from labgov.accounts.services import membership_end
from labgov.alerts.models import Alert
from labgov.alerts.services import alert_pod_action, pod_actions_for
from tests.alerts.conftest import T0, make_pod

pytestmark = pytest.mark.django_db


@pytest.fixture
def alert(world, account, clock):
    """An alert about the member's stopped pod (the owner may start it)."""
    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100, name="annot")
    return Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        owner=world.member,
        resource=pod,
        kind="stopped_pod_disk",
        subject_key=f"resource:{pod.pk}",
        title="Stopped pod keeps billing its disk",
    )


def _never_called(_account):
    raise AssertionError("Runpod must not be asked")


def test_the_owner_may_start_their_pod_while_a_member(world, alert, client_for):
    assert [a for a, _ in pod_actions_for(world.member, alert)] == ["start"]
    url = reverse("alerts:pod_action", args=[alert.pk, "start"])
    assert client_for(world.member).get(url).status_code == 200


def test_an_ended_owner_can_no_longer_stop_or_start_their_pod(world, alert, client_for):
    membership_end(
        actor=world.lab_admin,
        membership=world.member.memberships.get(),
        end_date=T0.date() - dt.timedelta(days=1),
    )
    forget_scope(world.member)
    assert pod_actions_for(world.member, alert) == []
    with pytest.raises(PermissionDenied):
        alert_pod_action(
            actor=world.member, alert=alert, action="start", client_factory=_never_called
        )
    client = client_for(world.member)
    assert client.get(reverse("alerts:pod_action", args=[alert.pk, "start"])).status_code == 403
    assert client.post(reverse("alerts:pod_action", args=[alert.pk, "start"])).status_code == 403
    alert.resource.refresh_from_db()
    assert alert.resource.status == "EXITED"
    # They still see the alert; the lab admin still acts on the pod.
    assert client.get(reverse("alerts:detail", args=[alert.pk])).status_code == 200
    assert "start" in dict(pod_actions_for(world.lab_admin, alert))
