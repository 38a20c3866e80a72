"""A lab with 200 serverless endpoints (half keeping an always-on worker that serves nothing)
and 50 clusters (each with two pods, every GPU idle): its spend page, its alert panel, its idle
panel and its requests keep the query counts they have with none, after the alerts are
evaluated (so every idle endpoint and cluster has its alert)."""

import datetime as dt
from decimal import Decimal as D

from django.urls import reverse

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Alert, Kind
from labgov.runpod.models import Resource
from labgov.utilization.models import Sample, WorkerReading
from tests.dashboard.conftest import NOW, count_queries

FIVE = dt.timedelta(minutes=5)


def _fleet(account, allocation, endpoints: int, clusters: int, tag: str) -> None:
    made = Resource.objects.bulk_create(
        [
            Resource(
                account=account,
                kind="serverless",
                runpod_id=f"ep-{tag}-{i}",
                name=f"endpoint {i}",
                status="ACTIVE",
                gpu_type_id="NVIDIA GeForce RTX 4090",
                gpu_count=1,
                current_allocation=allocation,
                details={"workers_min": i % 2, "workers_max": 3, "idle_timeout_seconds": 5},
            )
            for i in range(endpoints)
        ]
        + [
            Resource(
                account=account,
                kind="cluster",
                runpod_id=f"cl-{tag}-{i}",
                name=f"cluster {i}",
                status="RUNNING",
                gpu_type_id="NVIDIA H100 80GB HBM3",
                gpu_count=16,
                current_allocation=allocation,
            )
            for i in range(clusters)
        ]
    )
    pods = Resource.objects.bulk_create(
        Resource(
            account=account,
            kind="pod",
            runpod_id=f"cl-{tag}-{i}-{n}",
            name=f"cluster {i} pod {n}",
            status="RUNNING",
            cluster_id=f"cl-{tag}-{i}",
            gpu_type_id="NVIDIA H100 80GB HBM3",
            gpu_count=8,
            cost_per_hr_usd=D("35.12"),
            details={"started_at": (NOW - dt.timedelta(hours=10)).isoformat()},
        )
        for i in range(clusters)
        for n in range(2)
    )
    start = NOW - dt.timedelta(hours=3)
    times = [start + k * FIVE for k in range(37)]
    Sample.objects.bulk_create(
        Sample(
            resource=pod, at=at, gpus=8, util_sum=0, util_max=0, mem_sum=8, mem_max=1, busy_gpus=0
        )
        for pod in pods
        for at in times
    )
    WorkerReading.objects.bulk_create(
        WorkerReading(resource=e, at=at, workers_min=1, running=0, idle=1, total=1)
        for e in made
        if e.kind == "serverless" and e.details["workers_min"]
        for at in times[::3]
    )


def test_the_lab_pages_keep_their_query_counts_with_200_endpoints_and_50_clusters(
    world, spend, client_for
):
    client = client_for(world.lab_admin)
    lab = world.lab.pk
    urls = [
        reverse("dashboard:lab", args=[lab]),
        reverse("alerts:lab_panel", args=[lab]),
        reverse("idle:lab", args=[lab]),
        reverse("provisioning:list") + f"?lab={lab}",
    ]
    # The dashboards' clock (tests/dashboard/conftest.py) stands at NOW.
    _fleet(spend.account, world.allocation, 2, 1, "small")
    alerts_evaluate(institution_id=world.institution.pk)
    small = [count_queries(client, url)[0] for url in urls]
    _fleet(spend.account, world.allocation, 200, 50, "large")
    alerts_evaluate(institution_id=world.institution.pk)
    large = [count_queries(client, url)[0] for url in urls]
    assert small == large
    assert Alert.objects.filter(kind=Kind.IDLE_ENDPOINT_WORKERS).count() == 101
    assert Alert.objects.filter(kind=Kind.RUNNING_IDLE, resource__kind="cluster").count() == 51
