"""A cluster whose GPUs idle gets the running-idle alert as a pod does, judged on all its pods
together and carrying the cluster's whole hourly rate; its pods get none of their own, and
neither the alert's actions nor the stop policy stop a cluster's pod."""

import datetime as dt
from decimal import Decimal as D

import pytest

from labgov.alerts import services as alert_services
from labgov.alerts.config import Resolver
from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.findings import Context
from labgov.alerts.idle_rule import idle_clusters
from labgov.alerts.models import Alert, Kind
from labgov.core.errors import DomainError
from labgov.idle.models import AutoStopPolicy, StopNotice
from labgov.idle.policy import autostop_run
from tests.alerts.conftest import T0, make_pod
from tests.factories import ResourceFactory
from tests.utilization.conftest import samples

pytestmark = pytest.mark.django_db
H = dt.timedelta(hours=1)
MIN = dt.timedelta(minutes=1)


@pytest.fixture
def cluster(world, account):
    cluster = ResourceFactory(
        account=account,
        kind="cluster",
        runpod_id="cl-train",
        name="multi-node-70b",
        status="RUNNING",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=16,
        current_allocation=world.allocation,
    )
    pods = [
        make_pod(
            account,
            None,  # a cluster's pods are Runpod's, listed with the cluster's id
            runpod_id=f"cl-train-{i}",
            name=f"multi-node-70b-{i}",
            cluster_id="cl-train",
            gpu_type_id="NVIDIA H100 80GB HBM3",
            gpu_count=8,
            cost_per_hr_usd=D("35.12"),
            details={"started_at": (T0 - 10 * H).isoformat()},
        )
        for i in range(2)
    ]
    return cluster, pods


def idle_alerts():
    return list(Alert.objects.filter(kind=Kind.RUNNING_IDLE))


def test_an_idle_cluster_gets_one_alert_with_its_whole_rate(world, cluster, clock):
    resource, pods = cluster
    samples(pods[0], T0 - 6 * H, T0 - 4 * H, util=90)
    samples(pods[0], T0 - 4 * H, T0 + MIN, util=0)
    samples(pods[1], T0 - 6 * H, T0 - 3 * H, util=90)
    samples(pods[1], T0 - 3 * H, T0 + MIN, util=1)  # the last to go idle: 3 h ago
    alerts_evaluate(institution_id=world.institution.pk)
    (alert,) = idle_alerts()
    assert alert.resource == resource and alert.owner == world.member
    assert alert.facts["idle_since"] == (T0 - 3 * H).isoformat()
    assert D(alert.facts["per_hour_usd"]) == D("70.24")  # 2 pods × 8 × $4.39
    assert alert.facts["spent_idle_usd"] == "210.72"  # 3 h × $70.24
    assert alert.monthly_cost_usd == D("70.24") * 730
    assert alert.title.startswith("Cluster multi-node-70b (2 pods, 16 GPUs")
    assert "$210.72 spent idle, $70.24/hour from now" in alert.title
    assert "labgov never stops or deletes a cluster itself" in alert.detail
    # Nothing on the alert stops anything: its subject is a cluster.
    assert alert_services.pod_actions_for(world.lab_admin, alert) == []


def test_one_working_pod_keeps_the_cluster_from_idling(world, cluster, clock):
    _, pods = cluster
    samples(pods[0], T0 - 4 * H, T0 + MIN, util=0)
    samples(pods[1], T0 - 4 * H, T0 + MIN, util=70)
    alerts_evaluate(institution_id=world.institution.pk)
    # The idle pod is the cluster's, judged with it: no alert of its own either.
    assert idle_alerts() == []


def test_the_stop_policy_never_stops_a_clusters_pod(world, cluster, clock):
    _, pods = cluster
    for pod in pods:
        samples(pod, T0 - 12 * H, T0 + MIN, util=0)
    AutoStopPolicy.objects.create(lab=world.lab, enabled=True, idle_hours=1, warn_minutes=30)
    stopped = []

    def client_factory(account):  # would record any call to Runpod
        stopped.append(account)
        raise AssertionError("the policy called Runpod for a cluster's pod")

    counts = autostop_run(
        institution_id=world.institution.pk, now=T0 + MIN, client_factory=client_factory
    )
    assert counts == {"warned": 0, "stopped": 0, "refused": 0, "cleared": 0}
    assert not StopNotice.objects.exists() and stopped == []


def test_a_clusters_pod_is_not_stopped_from_an_alert(world, cluster, clock):
    """The attack: a pod alert about a cluster's pod (say, one left from before) posted to."""
    _, pods = cluster
    alert = Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        kind=Kind.RUNNING_IDLE,
        subject_key=f"resource:{pods[0].pk}",
        subject_label="Pod",
        resource=pods[0],
        severity="warning",
        title="Pod idle",
    )
    with pytest.raises(DomainError, match="cannot have the pod stopped now"):
        alert_services.alert_pod_action(actor=world.lab_admin, alert=alert, action="stop")


def _cluster_of(world, account, pods: int):
    cluster = ResourceFactory(
        account=account,
        kind="cluster",
        runpod_id="cl-wide",
        name="wide",
        status="RUNNING",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=8 * pods,
        current_allocation=world.allocation,
    )
    for i in range(pods):
        pod = make_pod(
            account,
            None,
            runpod_id=f"cl-wide-{i}",
            cluster_id="cl-wide",
            gpu_type_id="NVIDIA H100 80GB HBM3",
            gpu_count=8,
            cost_per_hr_usd=D("35.12"),
            details={"started_at": (T0 - 10 * H).isoformat()},
        )
        # Each pod worked, then went idle (3 or 4 hours ago): each has its own idle start.
        went_idle = T0 - (3 + i % 2) * H
        samples(pod, T0 - 6 * H, went_idle, util=90)
        samples(pod, went_idle, T0 + MIN, util=0)
    return cluster


@pytest.mark.parametrize("pods", [2, 8])
def test_a_clusters_evaluation_reads_as_many_queries_whatever_its_pods(
    world, account, clock, pods, django_assert_num_queries
):
    cluster = _cluster_of(world, account, pods)
    ctx = Context(
        institution_id=world.institution.pk, now=T0, settings=Resolver(world.institution.pk)
    )
    # The clusters, their running pods, the samples of the grace period, each pod's last busy
    # sample, the first idle one after it (all pods at once), the recent samples.
    with django_assert_num_queries(6):
        (idle,) = idle_clusters(ctx)
    assert idle.cluster == cluster and idle.pods == pods
    assert idle.state.idle_since == T0 - 3 * H  # the last of its pods to go idle
    # The whole evaluation, writing the alert, reads no more for the bigger cluster either.
    with django_assert_num_queries(37):
        alerts_evaluate(institution_id=world.institution.pk)
    (alert,) = idle_alerts()
    assert alert.resource == cluster and D(alert.facts["per_hour_usd"]) == pods * D("35.12")
