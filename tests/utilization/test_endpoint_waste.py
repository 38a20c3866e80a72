"""A serverless endpoint whose always-on workers serve nothing: the alert with the dollars so
far and per day, the change of its workers from labgov (at once when it spends less, two
people for a raise above the lab's second-approval amount, audited, refused to anyone else),
and the stop policy scaling it to 0 after a warning, never deleting it. The workers are
changed on the simulator, over HTTP, with the real client."""

import datetime as dt
import re
from decimal import Decimal as D

import pytest
import time_machine
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Alert, Kind
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.idle import endpoints
from labgov.idle.models import AutoStopPolicy, EndpointWorkersChange, StopNotice
from labgov.idle.policy import autostop_run
from labgov.provisioning.models import ProvisioningPolicy
from labgov.runpod.client import RunpodClient
from labgov.runpod.models import BillingRecord, GpuType
from labgov.utilization.models import WorkerReading
from labgov.utilization.recording import worker_readings_record
from tests.factories import MembershipFactory, ResourceFactory, RunpodAccountFactory

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 11, 20, 14, 30, tzinfo=dt.UTC)  # the default scenario's now
H = dt.timedelta(hours=1)
Q = dt.timedelta(minutes=15)
ENDPOINT = "x2visionseg0c3"  # one always-on worker, at most 4
RTX4090 = "NVIDIA GeForce RTX 4090"


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def endpoint(world, sim, clock):
    GpuType.objects.create(
        gpu_id=RTX4090, name="RTX 4090", memory_gb=24, serverless_price_per_hr_usd=D("0.74")
    )
    account = RunpodAccountFactory(institution=world.institution, base_url=sim.base_url)
    return ResourceFactory(
        account=account,
        kind="serverless",
        runpod_id=ENDPOINT,
        name="vision-segment-api",
        status="ACTIVE",
        gpu_type_id=RTX4090,
        gpu_count=1,
        current_allocation=world.allocation,
        details={"workers_min": 1, "workers_max": 4, "idle_timeout_seconds": 5},
    )


def sim_client(sim):
    return lambda account: RunpodClient(sim.base_url, sim.api_key)


def readings(endpoint, start, end, *, running, workers_min=1):
    rows, t = [], start
    while t < end:
        rows.append(
            WorkerReading(
                resource=endpoint,
                at=t,
                workers_min=workers_min,
                running=running,
                idle=max(0, workers_min - running),
                total=max(workers_min, running),
            )
        )
        t += Q
    WorkerReading.objects.bulk_create(rows)


def bill(endpoint, start, hours, amount):
    BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=endpoint,
            kind="serverless",
            bucket_start=start + i * H,
            bucket_end=start + (i + 1) * H,
            gpu_usd=D(amount),
            total_usd=D(amount),
            allocation=endpoint.current_allocation,
        )
        for i in range(hours)
    )


def idle_alert():
    return Alert.objects.filter(kind=Kind.IDLE_ENDPOINT_WORKERS).first()


def serving_then_idle(endpoint):
    """Served until 10:15, idle since (4 h 15 min); billed $0.74 an hour for its one worker."""
    readings(endpoint, T0 - 8 * H, T0 - 4 * H - Q + dt.timedelta(seconds=1), running=1)
    readings(endpoint, T0 - 4 * H, T0 + dt.timedelta(minutes=1), running=0)
    bill(endpoint, T0.replace(minute=0) - 8 * H, 8, "0.74")


def test_the_sync_reads_the_workers_of_an_endpoint_with_always_on_ones(endpoint, sim):
    summary = RunpodClient(sim.base_url, sim.api_key).endpoint_workers(ENDPOINT)
    counts = worker_readings_record(account=endpoint.account, workers={ENDPOINT: summary}, now=T0)
    assert counts == {"worker_readings": 1}
    row = WorkerReading.objects.get()
    assert (row.workers_min, row.running + row.idle, row.total) == (1, summary.total, summary.total)


def test_fires_with_the_dollars_so_far_and_per_day(world, endpoint, clock):
    serving_then_idle(endpoint)
    alerts_evaluate(institution_id=world.institution.pk)
    alert = idle_alert()
    assert alert is not None and alert.owner == world.member and alert.lab == world.lab
    assert alert.facts["idle_since"] == (T0 - 4 * H - Q).isoformat()
    # Whole hours from 11:00 (the first after the last reading that served): 11-13 h.
    assert (alert.facts["billed_usd"], alert.facts["billed_hours"]) == ("2.22", 3)
    assert alert.facts["per_day_usd"] == "17.76"  # $0.74 × 24
    assert alert.title == (
        "Endpoint vision-segment-api keeps 1 always-on worker serving nothing for 4.2 hours: "
        "$2.22 so far, $17.76/day"
    )
    assert "Set workers.min to 0" in alert.detail and "idle timeout (now 5 s)" in alert.detail
    assert alert.monthly_cost_usd == D("0.74") * 730


def test_the_hour_under_way_counts_in_the_dollars_not_in_the_rate(world, endpoint, clock):
    """At 14:30 the 14:00 bucket holds half an hour: counted as a whole one it would make
    the rate (and the dollars per day) look lower than Runpod's."""
    serving_then_idle(endpoint)
    BillingRecord.objects.create(
        resource=endpoint,
        kind="serverless",
        bucket_start=T0.replace(minute=0),
        bucket_end=T0.replace(minute=0) + H,
        gpu_usd=D("0.37"),
        total_usd=D("0.37"),
        allocation=endpoint.current_allocation,
    )
    alerts_evaluate(institution_id=world.institution.pk)
    alert = idle_alert()
    assert (alert.facts["billed_usd"], alert.facts["billed_hours"]) == ("2.59", 3)
    assert alert.facts["per_day_usd"] == "17.76"  # $0.74 × 24, still
    assert "$2.59 billed so far, $0.74/hour over the 3 whole hours already over" in alert.detail


def test_quiet_within_the_grace_serving_stale_or_at_zero(world, endpoint, clock):
    readings(endpoint, T0 - 6 * H, T0 - 90 * dt.timedelta(minutes=1), running=1)
    readings(endpoint, T0 - 90 * dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=1), running=0)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None  # 1.5 h < the 2 h grace
    WorkerReading.objects.all().delete()
    readings(endpoint, T0 - 6 * H, T0 - H, running=0)  # no reading for an hour: not judged
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None
    readings(endpoint, T0 - H, T0 + dt.timedelta(minutes=1), running=0, workers_min=0)
    alerts_evaluate(institution_id=world.institution.pk)
    assert idle_alert() is None  # its minimum is 0 now: nothing always on


def test_a_lab_admin_sets_workers_min_to_0_on_runpod_audited(world, endpoint, sim, clock):
    serving_then_idle(endpoint)
    alerts_evaluate(institution_id=world.institution.pk)
    change = endpoints.endpoint_workers_change(
        actor=world.lab_admin,
        resource=endpoint,
        workers_min=0,
        idle_timeout_seconds=30,
        client_factory=sim_client(sim),
    )
    assert change.state == EndpointWorkersChange.State.APPLIED
    listed = sim.state.get_endpoint(ENDPOINT)["workers"]
    assert (listed["min"], listed["idleTimeout"]) == (0, 30)
    endpoint.refresh_from_db()
    assert endpoint.details["workers_min"] == 0
    event = AuditEvent.objects.get(action="endpoint.workers_change")
    assert event.actor == world.lab_admin
    assert event.before["workers_min"] == 1 and event.after["workers_min"] == 0
    # The next reading sees no always-on worker: the alert clears itself.
    readings(endpoint, T0 + Q, T0 + 2 * Q, running=0, workers_min=0)
    clock.move_to(T0 + 2 * Q)
    alerts_evaluate(institution_id=world.institution.pk)
    assert Alert.objects.get(kind=Kind.IDLE_ENDPOINT_WORKERS).state == Alert.State.RESOLVED


def test_the_member_and_an_outsider_cannot_change_it(world, endpoint, sim, client_for):
    with pytest.raises(PermissionDenied):
        endpoints.endpoint_workers_change(
            actor=world.member, resource=endpoint, workers_min=0, client_factory=sim_client(sim)
        )
    url = reverse("idle:endpoint_workers", args=[endpoint.pk])
    # The member pays for it and sees it: refused, not hidden.
    assert client_for(world.member).post(url, {"workers_min": "0"}).status_code == 403
    # Someone of another lab, and someone of another institution, cannot see it: 404.
    assert client_for(world.other_member).post(url, {"workers_min": "0"}).status_code == 404
    assert client_for(world.outsider).get(url).status_code == 404
    assert client_for(world.lab_admin).get(url).status_code == 200
    assert sim.state.get_endpoint(ENDPOINT)["workers"]["min"] == 1
    assert not AuditEvent.objects.filter(action__startswith="endpoint.").exists()


def test_finance_sees_the_endpoint_so_it_is_refused_403_not_hidden(
    world, endpoint, sim, client_for
):
    """Finance sees the institution's endpoints (their spend) but may not change their
    workers: the page, a POST and the decision on a pending change all answer 403."""
    with pytest.raises(PermissionDenied):
        endpoints.endpoint_workers_change(
            actor=world.finance, resource=endpoint, workers_min=0, client_factory=sim_client(sim)
        )
    web = client_for(world.finance)
    url = reverse("idle:endpoint_workers", args=[endpoint.pk])
    assert web.get(url).status_code == 403
    assert web.post(url, {"workers_min": "0"}).status_code == 403
    change = EndpointWorkersChange.objects.create(
        resource=endpoint, workers_min_before=1, workers_min=3, requested_by=world.lab_admin
    )
    decide = reverse("idle:endpoint_change_decide", args=[change.pk, "approve"])
    assert web.post(decide).status_code == 403
    change.refresh_from_db()
    assert change.state == EndpointWorkersChange.State.PENDING
    # An outsider asking the same learns nothing of the endpoint or the change.
    outsider = client_for(world.outsider)
    assert outsider.get(url).status_code == 404
    assert outsider.post(decide).status_code == 404
    assert sim.state.get_endpoint(ENDPOINT)["workers"]["min"] == 1
    assert not AuditEvent.objects.filter(action__startswith="endpoint.").exists()


def test_out_of_bounds_values_are_refused_in_words(world, endpoint, sim):
    for value, words in ((5, "above the endpoint's maximum (4)"), (-1, "0 or more")):
        with pytest.raises(DomainError, match=re.escape(words)):
            endpoints.endpoint_workers_change(
                actor=world.lab_admin,
                resource=endpoint,
                workers_min=value,
                client_factory=sim_client(sim),
            )
    with pytest.raises(DomainError, match="1 to 3600 seconds, not 0"):
        endpoints.endpoint_workers_change(
            actor=world.lab_admin,
            resource=endpoint,
            workers_min=0,
            idle_timeout_seconds=0,
            client_factory=sim_client(sim),
        )


def test_a_raise_above_the_second_approval_amount_needs_another_person(world, endpoint, sim):
    ProvisioningPolicy.objects.create(
        institution=world.institution,
        lab=world.lab,
        allowed_models=["serverless"],
        allowed_clouds=["SECURE"],
        second_approval_over_usd=D("100"),
    )
    change = endpoints.endpoint_workers_change(
        actor=world.lab_admin, resource=endpoint, workers_min=3, client_factory=sim_client(sim)
    )
    assert change.state == EndpointWorkersChange.State.PENDING
    assert change.added_monthly_usd == 2 * D("0.74") * 730
    assert sim.state.get_endpoint(ENDPOINT)["workers"]["min"] == 1  # not yet
    with pytest.raises(DomainError, match="You asked for this change yourself"):
        endpoints.endpoint_workers_change_approve(
            actor=world.lab_admin, change=change, client_factory=sim_client(sim)
        )
    other = MembershipFactory(role="lab_admin", lab=world.lab).user
    endpoints.endpoint_workers_change_approve(
        actor=other, change=change, client_factory=sim_client(sim)
    )
    assert sim.state.get_endpoint(ENDPOINT)["workers"]["min"] == 3
    event = AuditEvent.objects.get(action="endpoint.workers_change")
    assert event.after["approved_by"] == other.username
    assert event.after["requested_by"] == world.lab_admin.username
    assert AuditEvent.objects.filter(action="endpoint.workers_change_request").count() == 1


def test_the_stop_policy_scales_it_to_0_after_a_warning_and_never_deletes_it(
    world, endpoint, sim, clock
):
    serving_then_idle(endpoint)
    AutoStopPolicy.objects.create(
        lab=world.lab, enabled=True, idle_hours=5, warn_minutes=30, scale_idle_endpoints=True
    )
    factory = sim_client(sim)
    # Idle 4 h 15 min: not yet within 30 min of the 5 h.
    assert (
        autostop_run(institution_id=world.institution.pk, now=T0, client_factory=factory)["warned"]
        == 0
    )
    readings(endpoint, T0 + dt.timedelta(minutes=1), T0 + 30 * dt.timedelta(minutes=1), running=0)
    at = T0 + 29 * dt.timedelta(minutes=1)
    clock.move_to(at)
    counts = autostop_run(institution_id=world.institution.pk, now=at, client_factory=factory)
    assert counts["warned"] == 1
    notice = StopNotice.objects.get(resource=endpoint)
    # Due at 15:15 (5 h after 10:15), but the owner is warned 30 minutes ahead of the stop.
    assert notice.stop_at == at + dt.timedelta(minutes=30)
    assert sim.state.get_endpoint(ENDPOINT)["workers"]["min"] == 1  # warned, not yet scaled
    readings(endpoint, T0 + 31 * dt.timedelta(minutes=1), T0 + H + Q, running=0)
    at = T0 + H
    clock.move_to(at)
    counts = autostop_run(institution_id=world.institution.pk, now=at, client_factory=factory)
    assert counts["stopped"] == 1
    assert sim.state.get_endpoint(ENDPOINT)["workers"]["min"] == 0  # still there: not deleted
    notice.refresh_from_db()
    assert notice.state == StopNotice.State.STOPPED
    event = AuditEvent.objects.get(action="runpod.endpoint_autoscale")
    assert event.actor is None and event.after["workers_min"] == 0
    assert "was not deleted" in event.note


def test_without_the_endpoint_box_the_policy_leaves_endpoints_alone(world, endpoint, sim, clock):
    serving_then_idle(endpoint)
    AutoStopPolicy.objects.create(lab=world.lab, enabled=True, idle_hours=1, warn_minutes=30)
    counts = autostop_run(
        institution_id=world.institution.pk, now=T0, client_factory=sim_client(sim)
    )
    assert counts["warned"] == 0 and not StopNotice.objects.exists()
