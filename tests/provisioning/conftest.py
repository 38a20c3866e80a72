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
