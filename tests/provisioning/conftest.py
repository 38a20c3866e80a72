from decimal import Decimal as D

import pytest

from labgov.provisioning.services import request_save, request_submit
from labgov.runpod.models import GpuType

H100 = "NVIDIA H100 80GB HBM3"
A40 = "NVIDIA A40"

# The seeds' example: 8 x H100 at $4.39/GPU-h for 10 hours = $351.20, checkpoints hourly.
POD_VALUES = {
    "title": "Fine-tune 8B",
    "deployment_model": "pod",
    "gpu_type_id": H100,
    "gpu_count": 8,
    "cloud": "SECURE",
    "image": "runpod/pytorch:2.8.0",
    "expected_hours": D(10),
    "container_disk_gb": 0,
    "checkpoint_interval_minutes": D(60),
    "justification": "Thesis chapter 3.",
}


# A cluster's checklist answered (the seeds: how the nodes exchange data, where shared model
# files live), so a cluster request passes it.
CLUSTER_CHECKLIST = {
    "data_exchange": "NCCL all-reduce over the cluster network",
    "shared_files_location": "the cluster's network volume",
}


@pytest.fixture
def catalog(db):
    return {
        H100: GpuType.objects.create(
            gpu_id=H100,
            name="H100 SXM",
            memory_gb=80,
            secure_price_per_hr_usd=D("4.39"),
            community_price_per_hr_usd=D("2.69"),
            serverless_price_per_hr_usd=D("5.00"),
            secure_available=True,
            community_available=True,
            max_count_secure=8,
            max_count_community=8,
        ),
        A40: GpuType.objects.create(
            gpu_id=A40,
            name="A40",
            memory_gb=48,
            secure_price_per_hr_usd=D("0.40"),
            community_price_per_hr_usd=D("0.35"),
            serverless_price_per_hr_usd=None,
            secure_available=True,
            community_available=True,
            max_count_secure=10,
            max_count_community=10,
        ),
    }


@pytest.fixture
def draft(world, catalog):
    """A function making a draft of the world's member, the seeds' pod by default."""

    def make(user=None, allocation=None, **overrides):
        return request_save(
            actor=user or world.member,
            allocation=allocation or world.allocation,
            values={**POD_VALUES, **overrides},
        )

    return make


@pytest.fixture
def submitted(draft, world):
    def make(**overrides):
        req = draft(**overrides)
        return request_submit(actor=req.requester, req=req)

    return make


def listed_endpoint(endpoint_id: str, **fields):
    from labgov.runpod.types import Endpoint

    values = {
        "id": endpoint_id,
        "name": f"made-by-hand-{endpoint_id}",
        "template_id": None,
        "gpu_type_ids": [],
        "gpu_count": 1,
        "workers_min": 0,
        "workers_max": 3,
        "network_volume_ids": [],
        "data_center_ids": [],
        "env": {},
        "created_at": None,
    }
    return Endpoint(**{**values, **fields})


def listed_cluster(cluster_id: str, **fields):
    from labgov.runpod.types import Cluster

    values = {
        "id": cluster_id,
        "name": f"made-by-hand-{cluster_id}",
        "cluster_type": "TRAINING",
        "gpu_type_id": H100,
        "gpu_count_per_pod": 8,
        "pod_count": 2,
        "data_center_id": "US-KS-2",
        "template_id": None,
        "created_at": None,
    }
    return Cluster(**{**values, **fields})


@pytest.fixture
def runpod_lists(monkeypatch):
    """What "Runpod" lists when marking provisioned asks it (the sync key's client, faked):
    append endpoints and clusters (listed_endpoint, listed_cluster) to the lists."""
    listed = {"endpoints": [], "clusters": [], "asked": 0}

    class Lister:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def list_endpoints(self):
            listed["asked"] += 1
            return list(listed["endpoints"])

        def list_clusters(self):
            listed["asked"] += 1
            return list(listed["clusters"])

    monkeypatch.setattr("labgov.runpod.services.client_for_account", lambda account: Lister())
    return listed


APPEND_ONLY_TABLES = ("audit_auditevent", "funding_ledgerentry")


class _Editor:
    def __init__(self, connection):
        self.connection = connection

    def execute(self, sql):
        with self.connection.cursor() as cursor:
            cursor.execute(sql)


@pytest.fixture
def flushable_append_only(transactional_db):
    """Let a transactional test's database be flushed on SQLite, whose flush deletes rows one
    by one, which the append-only triggers refuse (PostgreSQL truncates, which they allow)."""
    yield
    from django.db import connection

    empty_append_only(connection)


def empty_append_only(connection) -> None:
    """On SQLite, empty the append-only tables with their triggers off, then put the triggers
    back (elsewhere the flush itself may empty them)."""
    from labgov.core.append_only import append_only_trigger_operations

    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        for table in APPEND_ONLY_TABLES:
            for op in ("update", "delete"):
                cursor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op}")
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
    for table in APPEND_ONLY_TABLES:
        for operation in append_only_trigger_operations(table):
            operation.code(None, _Editor(connection))
