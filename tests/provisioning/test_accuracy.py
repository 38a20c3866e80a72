"""Estimate against actual: a provisioned request's estimate beside what it cost so far, line
by line (pod, endpoint, cluster), per request and per lab, and the past accuracy an approver
sees, in queries that do not grow with the requests or their records."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labgov.provisioning.accuracy import Accuracy, actual_by_request, past_accuracy
from labgov.provisioning.services import request_approve, request_mark_provisioned
from labgov.provisioning.services.provision import provisioning_succeed
from labgov.runpod.models import BillingRecord, ResourceKind
from labgov.runpod.types import Pod
from tests.factories import (
    AllocationFactory,
    MembershipFactory,
    ResourceFactory,
    RunpodAccountFactory,
)
from tests.provisioning.conftest import CLUSTER_CHECKLIST, listed_cluster, listed_endpoint

NOW = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
START = NOW

pytestmark = pytest.mark.usefixtures("frozen")


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def _pod(pod_id):
    return Pod(
        id=pod_id,
        name=f"labgov-{pod_id}",
        status="RUNNING",
        cost_per_hr_usd=D("35.12"),
        image="runpod/pytorch:2.8.0",
        env={},
        container_disk_gb=0,
        volume_disk_gb=0,
        network_volume_id=None,
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        cloud="SECURE",
        data_center_id="US-KS-2",
        template_id=None,
        cluster_id=None,
        created_at=START,
        started_at=START,
    )


def _provisioned_pod(submitted, world, account, pod_id="pod-1", allocation=None, **values):
    allocation = allocation or world.allocation
    req = submitted(user=allocation.user, allocation=allocation, **values)
    req = request_approve(actor=world.lab_admin, req=req)
    return provisioning_succeed(request_id=req.pk, account=account, pod=_pod(pod_id), volume=None)


def _bill(resource, hours, *, compute="0", storage="0", start=START, **amounts):
    """Hourly records from `start` (hour offsets in `hours`)."""
    BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=resource,
            kind=resource.kind,
            bucket_start=start + dt.timedelta(hours=h),
            bucket_end=start + dt.timedelta(hours=h + 1),
            gpu_usd=D(compute),
            disk_usd=D(storage),
            total_usd=D(compute) + D(storage) + sum((D(v) for v in amounts.values()), D(0)),
            allocation=resource.current_allocation,
            **{k: D(v) for k, v in amounts.items()},
        )
        for h in hours
    )


def test_a_pods_actual_is_split_into_the_estimates_lines(submitted, world):
    account = RunpodAccountFactory(institution=world.institution)
    req = _provisioned_pod(submitted, world, account, volume_disk_gb=100)
    pod = req.resources.get()
    # Ran hours 0-2, stopped at 3-4 (its volume disk billing), ran again 5-6: one stop.
    _bill(pod, [0, 1, 2, 5, 6], compute="35.12", storage="0.0137")
    _bill(pod, [3, 4], storage="0.0274")
    actual = actual_by_request([req.pk])[req.pk]
    assert actual.compute_usd == D("175.60")
    assert actual.storage_running_usd == D("0.0685")
    assert actual.storage_after_usd == D("0.0548")
    assert actual.stops == 1
    assert actual.compute_hours == 5
    assert actual.total_usd == D("175.7233")


def test_a_cluster_and_an_endpoint_count_their_fees_and_networking_as_compute(
    submitted, world, runpod_lists
):
    # No write key: labgov creates neither; both are made by hand and marked, and Runpod
    # lists both ids for their kinds.
    account = RunpodAccountFactory(
        institution=world.institution, write_key_encrypted="", write_key_last4=""
    )
    runpod_lists["clusters"].append(listed_cluster("cl-1"))
    runpod_lists["endpoints"].append(listed_endpoint("ep-1"))
    cluster_req = request_approve(
        actor=world.lab_admin,
        req=submitted(
            deployment_model="cluster", node_count=2, runs_distributed=True, **CLUSTER_CHECKLIST
        ),
    )
    cluster = ResourceFactory(account=account, kind=ResourceKind.CLUSTER, runpod_id="cl-1")
    request_mark_provisioned(
        actor=world.lab_admin, req=cluster_req, account=account, runpod_id="cl-1"
    )
    cluster.refresh_from_db()
    _bill(cluster, range(4), compute="70.24", storage="0.5", networking_usd="0.10")
    allocation = AllocationFactory(funding_source=world.funding_source, user=world.member)
    endpoint_req = request_approve(
        actor=world.lab_admin,
        req=submitted(
            allocation=allocation,
            deployment_model="serverless",
            requests_per_day=D(100),
            seconds_per_request=D(2),
            duration_days=D(10),
            gpu_count=1,
        ),
    )
    endpoint = ResourceFactory(account=account, kind=ResourceKind.SERVERLESS, runpod_id="ep-1")
    request_mark_provisioned(
        actor=world.lab_admin, req=endpoint_req, account=account, runpod_id="ep-1"
    )
    endpoint.refresh_from_db()
    _bill(endpoint, range(3), compute="5.00", fee_usd="0.02")
    actual = actual_by_request([cluster_req.pk, endpoint_req.pk])
    assert actual[cluster_req.pk].compute_usd == D("281.36")  # 4 × (70.24 + 0.10)
    assert actual[cluster_req.pk].storage_running_usd == D("2.0")
    assert actual[cluster_req.pk].stops == 0
    assert actual[endpoint_req.pk].compute_usd == D("15.06")


def test_spend_paid_by_another_allocation_or_before_approval_is_not_the_requests(submitted, world):
    account = RunpodAccountFactory(institution=world.institution)
    req = _provisioned_pod(submitted, world, account)
    pod = req.resources.get()
    other = AllocationFactory(funding_source=world.funding_source)
    _bill(pod, [0], compute="35.12")
    BillingRecord.objects.filter(resource=pod).update(allocation=other)
    _bill(pod, [-30], compute="35.12", start=START)  # before the request was approved
    assert actual_by_request([req.pk]) == {}


def test_accuracy_says_how_far_estimates_ran_low_or_high():
    low = Accuracy(requests=10, still_running=0, estimate_usd=D(100), actual_usd=D(140))
    high = Accuracy(requests=3, still_running=1, estimate_usd=D(100), actual_usd=D(50))
    right = Accuracy(requests=2, still_running=0, estimate_usd=D(100), actual_usd=D(103))
    assert low.words == "estimates ran 1.4× low over the last 10 requests"
    assert high.words == "estimates ran 2.0× high over the last 3 requests (1 still running)"
    assert right.words == "estimates were about right over the last 2 requests"
    assert Accuracy(0, 0, D(0), D(0)).words == "no provisioned request to compare with yet"


def test_past_accuracy_reads_the_requesters_and_the_labs_latest_requests(submitted, world):
    account = RunpodAccountFactory(institution=world.institution)
    # The member's request: estimate $351.20, cost $491.68 (1.4× low).
    mine = _provisioned_pod(submitted, world, account, "pod-1")
    _bill(mine.resources.get(), range(14), compute="35.12")
    # Another person's in the same lab: estimate $351.20, cost $351.20.
    colleague = MembershipFactory(role="member", lab=world.lab).user
    allocation = AllocationFactory(funding_source=world.funding_source, user=colleague)
    theirs = _provisioned_pod(submitted, world, account, "pod-2", allocation=allocation)
    _bill(theirs.resources.get(), range(10), compute="35.12")
    pending = submitted()
    accuracy = past_accuracy(pending)
    assert accuracy["requester"].ratio == D("1.4")
    assert accuracy["requester"].words == (
        "estimates ran 1.4× low over the last 1 request (1 still running)"
    )
    assert accuracy["lab"].estimate_usd == D("702.40")
    assert accuracy["lab"].actual_usd == D("842.88")
    assert accuracy["lab"].words.startswith("estimates ran 1.2× low over the last 2 requests")


def _count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def _grow(submitted, world, account, n, start):
    for i in range(n):
        allocation = AllocationFactory(funding_source=world.funding_source, user=world.member)
        req = _provisioned_pod(submitted, world, account, f"pod-g{start + i}", allocation)
        _bill(req.resources.get(), range(5), compute="35.12", storage="0.01")


def test_request_page_and_lab_table_show_estimate_and_actual_in_fixed_queries(
    submitted, world, client_for
):
    account = RunpodAccountFactory(institution=world.institution)
    req = _provisioned_pod(submitted, world, account, volume_disk_gb=50)
    _bill(req.resources.get(), [0, 1, 4], compute="35.12", storage="0.01")
    pending = submitted()
    admin = client_for(world.lab_admin)
    table = reverse("provisioning:list") + f"?lab={world.lab.pk}"
    detail = reverse("provisioning:detail", args=[req.pk])
    review = reverse("provisioning:detail", args=[pending.pk])
    small = [_count(admin, url) for url in (table, detail, review)]
    _grow(submitted, world, account, 4, 10)
    large = [_count(admin, url) for url in (table, detail, review)]
    assert [n for n, _ in small] == [n for n, _ in large]
    page = " ".join(large[1][1].split())
    assert 'data-figure="actual">$105.39<' in page
    assert "1 stop and restart" in page
    assert "(3 h billed)" in page
    listing = large[0][1]
    assert listing.count("data-actual>$175.65<") == 4  # 5 × 35.12 + 5 × 0.01
    assert "provisioned requests on this page: estimates ran" in listing
    shown = " ".join(large[2][1].split())
    assert 'id="past-accuracy"' in shown
    assert "over the last 5 requests (5 still running)" in shown


def test_the_member_sees_no_past_accuracy_of_the_lab(submitted, world, client_for):
    pending = submitted()
    page = client_for(world.member).get(reverse("provisioning:detail", args=[pending.pk]))
    assert page.status_code == 200
    assert b'id="past-accuracy"' not in page.content
