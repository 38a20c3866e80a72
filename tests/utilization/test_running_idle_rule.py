"""The running-idle alert: fires after the grace period, not before, not on a working or
unsampled pod; says what went on idle; clears itself when the pod works again or stops."""

import datetime as dt
from decimal import Decimal as D

import pytest

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Alert, AlertSettings, Kind
from labgov.notifications.models import Notification
from tests.alerts.conftest import T0, make_pod
from tests.utilization.conftest import samples

pytestmark = pytest.mark.django_db
H = dt.timedelta(hours=1)


@pytest.fixture
def pod(world, account):
    return make_pod(
        account,
        world.allocation,
        name="big-train",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        cost_per_hr_usd=D("35.12"),
        details={"started_at": (T0 - 10 * H).isoformat()},
    )


def idle_alert():
    return Alert.objects.filter(kind=Kind.RUNNING_IDLE).first()


def test_fires_after_the_grace_period_with_the_money_spent_idle(world, pod, clock):
    samples(pod, T0 - 6 * H, T0 - 3 * H, util=90)
    samples(pod, T0 - 3 * H, T0 + 5 * dt.timedelta(minutes=1), util=0, mem=1)
    alerts_evaluate(institution_id=world.institution.pk)
    alert = idle_alert()
    assert alert is not None and alert.owner == world.member and alert.lab == world.lab
    # idle since the first idle sample (T0 - 3 h): 3 h × $35.12
    assert alert.facts["idle_since"] == (T0 - 3 * H).isoformat()
    assert alert.facts["spent_idle_usd"] == "105.36"
    assert "$105.36 spent idle, $35.12/hour from now" in alert.title
    told = set(
        Notification.objects.filter(kind="alert.running_idle").values_list("recipient", flat=True)
    )
    assert told == {world.member.pk, world.lab_admin.pk}


def test_does_not_fire_within_the_grace_period_or_on_a_working_pod(world, pod, clock):
    samples(pod, T0 - 6 * H, T0 - 90 * dt.timedelta(minutes=1), util=90)
    samples(pod, T0 - 90 * dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=1), util=0)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None  # idle 1.5 h < 2 h
    clock.shift(H)
    samples(pod, T0 + dt.timedelta(minutes=5), T0 + H + dt.timedelta(minutes=1), util=50)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None


def test_busy_memory_alone_keeps_a_pod_from_being_idle(world, pod, clock):
    samples(pod, T0 - 4 * H, T0 + dt.timedelta(minutes=1), util=0, mem=60)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None


def test_no_recent_samples_is_not_idle(world, pod, clock):
    samples(pod, T0 - 6 * H, T0 - 2 * H, util=0)  # the poll stopped reaching it 2 h ago
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None


def test_clears_when_the_pod_works_again_and_when_it_stops(world, pod, clock):
    samples(pod, T0 - 4 * H, T0 + dt.timedelta(minutes=1), util=0)
    alerts_evaluate(institution_id=world.institution.pk)
    first = idle_alert()
    assert first.state == Alert.State.OPEN and not first.facts["idle_since_bound"]
    clock.shift(dt.timedelta(minutes=10))
    samples(pod, T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=11), util=80)
    alerts_evaluate(institution_id=world.institution.pk)
    first.refresh_from_db()
    assert first.state == Alert.State.RESOLVED and first.resolved_by is None

    clock.shift(3 * H)
    samples(pod, T0 + dt.timedelta(minutes=15), T0 + 3 * H + dt.timedelta(minutes=11), util=1)
    alerts_evaluate(institution_id=world.institution.pk)
    second = Alert.objects.filter(kind=Kind.RUNNING_IDLE).exclude(pk=first.pk).get()
    assert second.facts["idle_since"] == (T0 + dt.timedelta(minutes=15)).isoformat()
    pod.status = "EXITED"
    pod.save()
    alerts_evaluate(institution_id=world.institution.pk)
    second.refresh_from_db()
    assert second.state == Alert.State.RESOLVED


def test_thresholds_and_grace_are_per_lab_settings(world, pod, clock):
    AlertSettings.objects.create(
        institution=world.institution,
        lab=world.lab,
        idle_gpu_util_percent=30,
        idle_memory_util_percent=30,
        idle_grace_hours=4,
    )
    samples(pod, T0 - 3 * H, T0 + dt.timedelta(minutes=1), util=20)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None  # below 30 % but for 3 h < 4 h
    clock.shift(2 * H)
    samples(pod, T0, T0 + 2 * H + dt.timedelta(minutes=1), util=20)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is not None
