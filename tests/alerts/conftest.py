import datetime as dt
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Alert
from labgov.runpod.models import BillingRecord, Resource
from labgov.usage.models import DailySpend
from tests.factories import ResourceFactory, RunpodAccountFactory
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture

# A fixed moment for the tests that move the clock: mid-month, on the hour.
T0 = dt.datetime(2026, 11, 16, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def clock():
    """The clock at T0, movable with clock.shift(days=…)."""
    import time_machine

    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def account(world):
    return RunpodAccountFactory(institution=world.institution, name="Lab Runpod")


def make_pod(account, allocation=None, **fields) -> Resource:
    values = {
        "status": "RUNNING",
        "volume_disk_gb": 0,
        "container_disk_gb": 20,
        "current_allocation": allocation,
        "first_seen_at": timezone.now() - dt.timedelta(days=30),
    }
    values.update(fields)
    return ResourceFactory(account=account, kind="pod", **values)


def make_volume(account, allocation=None, **fields) -> Resource:
    values = {
        "status": "",
        "size_gb": 300,
        "volume_type": "STANDARD",
        "current_allocation": allocation,
        "created_at_runpod": timezone.now() - dt.timedelta(days=60),
        "first_seen_at": timezone.now() - dt.timedelta(days=60),
    }
    values.update(fields)
    return ResourceFactory(account=account, kind="network_volume", **values)


def bill(resource, start: dt.datetime, *, disk="0.0274", gpu="0", cpu="0", allocation=None):
    """One hourly record of a resource (disk only by default: a stopped pod's 100 GB)."""
    total = D(disk) + D(gpu) + D(cpu)
    return BillingRecord.objects.create(
        resource=resource,
        kind=resource.kind,
        bucket_start=start,
        bucket_end=start + dt.timedelta(hours=1),
        total_usd=total,
        disk_usd=D(disk),
        gpu_usd=D(gpu),
        cpu_usd=D(cpu),
        allocation=allocation,
    )


def spend(world, account, day: dt.date, amount, *, allocation=None, category="gpu_compute"):
    """A daily rollup row, as the sync would write it."""
    allocation = allocation if allocation is not None else None
    return DailySpend.objects.create(
        account=account,
        category=category,
        allocation=allocation,
        funding_source=allocation.funding_source if allocation else None,
        lab=allocation.funding_source.lab if allocation else None,
        user=allocation.user if allocation else None,
        institution=world.institution,
        amount_usd=D(amount),
        day=day,
    )


def evaluate(world):
    return alerts_evaluate(institution_id=world.institution.pk)


def unresolved(kind=None):
    alerts = Alert.objects.unresolved()
    return list(alerts.filter(kind=kind) if kind else alerts)
