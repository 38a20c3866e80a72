"""The auto-stop policy against the simulator: warning ahead, one-click keep running, the stop
(never a terminate) audited with its samples, the container-disk refusal, exemptions."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.idle import services
from labgov.idle.models import AutoStopPolicy, StopNotice
from labgov.notifications.models import Notification
from labgov.runpod.models import Resource
from labgov.simulator import SimulatorServer, load_scenario
from labgov.utilization.models import Hour, Sample
from tests.utilization.simpods import Clocks, sim_connection, sim_pod

pytestmark = pytest.mark.django_db
H = dt.timedelta(hours=1)
T0 = dt.datetime(2026, 11, 16, 8, 0, tzinfo=dt.UTC)
HALF_HOUR = dt.timedelta(minutes=30)


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("empty")) as server:
        server.set_now(T0 - dt.timedelta(minutes=2))
        server.state.set_balance(D("1000"))
        yield server


@pytest.fixture
def lab_pods(world, sim, fast_clients):
    account = sim_connection(world, sim)
    volume = {"persistent": {"size": 100, "path": "/workspace"}}
    pods = {
        "big": sim_pod(sim, account, world.allocation, "big-idle", mounts=volume, idle_from=T0),
        "scratch": sim_pod(sim, account, world.allocation, "scratch", gpus=1, idle_from=T0),
        "held": sim_pod(sim, account, world.allocation, "held", mounts=volume, idle_from=T0),
        "busy": sim_pod(sim, account, world.allocation, "busy", mounts=volume),
    }
    AutoStopPolicy.objects.create(
        lab=world.lab, enabled=True, idle_hours=3, warn_minutes=30, keep_hours=2
    )
    clocks = Clocks(sim, account, fast_clients, T0)
    yield pods, clocks
    clocks.stop()


def test_warn_keep_running_then_stop_audited_refuse_and_exempt(world, sim, lab_pods):
    pods, clocks = lab_pods
    services.never_stop_mark(
        actor=world.lab_admin,
        resource=pods["held"],
        reason="thesis run, checkpoints by hand",
        until=timezone.now() + 7 * 24 * H,
    )
    # Idle since the first sample (T0 + 15 min); warned 30 minutes before 3 idle hours.
    assert clocks.step_to(T0 + 2 * H + 30 * dt.timedelta(minutes=1))["warned"] == 0
    counts = clocks.step_to(T0 + 2 * H + 45 * dt.timedelta(minutes=1))
    assert counts["warned"] == 2  # big and scratch; held is exempt, busy works
    notice = StopNotice.objects.get(resource=pods["big"])
    assert notice.state == StopNotice.State.WARNED
    assert notice.stop_at == T0 + 3 * H + 15 * dt.timedelta(minutes=1)
    warning = Notification.objects.get(kind="idle.stop_warning", dedupe_key__contains=notice.pk)
    assert warning.recipient == world.member and f"/idle/notices/{notice.pk}/" in warning.url
    assert not StopNotice.objects.filter(resource__in=[pods["held"], pods["busy"]]).exists()

    # The owner keeps it running for the policy's 2 hours, from the notification.
    kept = services.stop_notice_keep(actor=world.member, notice=notice)
    kept_until = T0 + 4 * H + 45 * dt.timedelta(minutes=1)
    assert kept.stop_at == kept_until and kept.state == StopNotice.State.KEPT
    assert AuditEvent.objects.filter(action="autostop.keep_running", actor=world.member).exists()

    counts = clocks.step_to(T0 + 4 * H)
    # The container-disk-only pod is not stopped without its owner's word.
    assert counts["refused"] == 1 and counts.get("stopped", 0) == 0
    scratch = StopNotice.objects.get(resource=pods["scratch"])
    assert scratch.state == StopNotice.State.REFUSED
    assert sim.state.pod_status(pods["scratch"].runpod_id) == "RUNNING"
    assert AuditEvent.objects.filter(action="autostop.refused").count() == 1
    assert set(
        Notification.objects.filter(kind="idle.stop_refused").values_list("recipient", flat=True)
    ) == {world.member.pk, world.lab_admin.pk}
    assert sim.state.pod_status(pods["big"].runpod_id) == "RUNNING"  # kept until 4 h 45

    counts = clocks.step_to(kept_until)
    assert counts["stopped"] == 1
    assert sim.state.pod_status(pods["big"].runpod_id) == "EXITED"  # stopped, not terminated
    assert Resource.objects.get(pk=pods["big"].pk).status == "EXITED"
    event = AuditEvent.objects.get(action="runpod.pod_autostop")
    assert event.actor is None and event.target_id == str(pods["big"].pk)
    assert event.after["idle_since"] == (T0 + 15 * dt.timedelta(minutes=1)).isoformat()
    samples = event.after["samples"]
    assert len(samples) == 19 and all(s["gpu_util_mean"] <= 2 for s in samples)
    assert event.after["idle_hours_summary"]["gpu_util_max"] <= 2
    assert event.after["policy"]["kept_until"] == kept_until.isoformat()
    assert sim.state.pod_status(pods["held"].runpod_id) == "RUNNING"
    assert sim.state.pod_status(pods["busy"].runpod_id) == "RUNNING"

    # The owner of the container-disk pod agrees after the refusal: the next pass stops it.
    services.owner_allows_stop(actor=world.member, resource=pods["scratch"], allowed=True)
    assert clocks.step_to(kept_until + 15 * dt.timedelta(minutes=1))["stopped"] == 1
    assert sim.state.pod_status(pods["scratch"].runpod_id) == "EXITED"


def test_the_owner_may_allow_stopping_a_container_disk_pod_and_only_the_owner(world, sim, lab_pods):
    pods, clocks = lab_pods
    with pytest.raises(PermissionDenied):
        services.owner_allows_stop(actor=world.lab_admin, resource=pods["scratch"], allowed=True)
    services.owner_allows_stop(actor=world.member, resource=pods["scratch"], allowed=True)
    clocks.step_to(T0 + 3 * H + HALF_HOUR, every=HALF_HOUR)
    assert sim.state.pod_status(pods["scratch"].runpod_id) == "EXITED"


def test_a_notice_clears_when_the_pod_works_again(world, sim, lab_pods):
    pods, clocks = lab_pods
    clocks.step_to(T0 + 3 * H, every=HALF_HOUR)
    notice = StopNotice.objects.get(resource=pods["big"])
    sim.state.set_utilization(pods["big"].runpod_id, "busy")
    clocks.step_to(T0 + 3 * H + 15 * dt.timedelta(minutes=1))
    notice.refresh_from_db()
    assert notice.state == StopNotice.State.CLEARED
    assert sim.state.pod_status(pods["big"].runpod_id) == "RUNNING"
    with pytest.raises(DomainError):
        services.stop_notice_keep(actor=world.member, notice=notice)


def test_samples_and_hours_are_written_by_the_poll(world, sim, lab_pods):
    pods, clocks = lab_pods
    clocks.step_to(T0 + H)
    assert Sample.objects.filter(resource=pods["busy"]).count() == 4
    hour = Hour.objects.get(resource=pods["big"], hour=T0)
    assert hour.samples == 3 and hour.readings == 24 and hour.util_max <= 2
    busy = Hour.objects.get(resource=pods["busy"], hour=T0)
    assert busy.busy_gpus_max == 8 and busy.util_sum / busy.readings >= 35
