"""Billing records written directly (no simulator, no sync): each test states the hours it
bills, Runpod's own account totals for them, and the windows a sync held."""

import datetime as dt
from decimal import Decimal as D

import pytest

from labgov.core.periods import UTC
from labgov.runpod.models import AccountBillingRecord, BillingRecord, SyncRun
from tests.factories import FundingSourceFactory, ResourceFactory, RunpodAccountFactory

HOUR = dt.timedelta(hours=1)
POD_COMPONENTS = {"gpu_usd": "podGpuAmount", "cpu_usd": "podCpuAmount", "disk_usd": "podDiskAmount"}
VOLUME_COMPONENTS = {
    "storage_standard_usd": "storageStandardAmount",
    "storage_high_performance_usd": "storageHighPerformanceAmount",
}

ALIASES = {
    "gpu": "gpu_usd",
    "cpu": "cpu_usd",
    "disk": "disk_usd",
    "standard": "storage_standard_usd",
}


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@pytest.fixture
def account(world):
    return RunpodAccountFactory(institution=world.institution, name="Main")


@pytest.fixture
def pod(account):
    return ResourceFactory(account=account, kind="pod", name="train-1", gpu_count=1)


@pytest.fixture
def volume(account):
    return ResourceFactory(account=account, kind="network_volume", name="data", runpod_id="vol1")


def bill(resource, hour: dt.datetime, *, allocation=None, runpod: bool = True, **columns):
    """One hour of a resource's spend (columns as strings), and the same added to Runpod's
    account total unless `runpod` is False (a record labgov missed, seen from Runpod)."""
    values = {ALIASES.get(k, k): D(v) for k, v in columns.items()}
    total = sum(values.values(), D(0))
    BillingRecord.objects.update_or_create(
        resource=resource,
        bucket_start=hour,
        defaults={
            "kind": resource.kind,
            "bucket_end": hour + HOUR,
            "total_usd": total,
            "allocation": allocation,
            **values,
        },
    )
    if runpod:
        runpod_bill(resource.account, hour, resource.kind, values)


def runpod_bill(account, hour, kind, values: dict):
    names = POD_COMPONENTS if kind == "pod" else VOLUME_COMPONENTS
    row, _ = AccountBillingRecord.objects.get_or_create(
        account=account,
        bucket_start=hour,
        defaults={"bucket_end": hour + HOUR, "total_usd": D(0), "components": {}},
    )
    for column, amount in values.items():
        key = names[column]
        row.components[key] = str(D(row.components.get(key, "0")) + amount)
        row.total_usd += amount
    row.save()


def synced(account, start: dt.datetime, end: dt.datetime) -> SyncRun:
    return SyncRun.objects.create(
        account=account,
        status=SyncRun.Status.SUCCEEDED,
        started_at=end,
        finished_at=end,
        window_start=start,
        window_end=end,
    )


@pytest.fixture
def grant(world):
    """The standing allocation's funding source, with a 10 % indirect-cost rate."""
    fs = world.funding_source
    fs.indirect_cost_rate_percent = D("10.00")
    fs.save()
    return fs


@pytest.fixture
def second_source(world):
    return FundingSourceFactory(lab=world.lab, cost_center="CC-B")
