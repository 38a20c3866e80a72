import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from labgov.accounts.access import forget_scope
from labgov.runpod.models import BillingRecord
from labgov.runpod.services import resource_assign
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory

UTC = dt.UTC
# "Now" for these tests: November 2026 is open and has spend; October can be closed.
NOW = dt.datetime(2026, 11, 20, 12, tzinfo=UTC)
NOV = dt.date(2026, 11, 1)
T0 = dt.datetime(2026, 11, 2, tzinfo=UTC)


def hours(resource, start, n, amount="1.0000000001", **columns):
    BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=resource,
            kind=resource.kind,
            bucket_start=start + dt.timedelta(hours=i),
            bucket_end=start + dt.timedelta(hours=i + 1),
            total_usd=Decimal(amount),
            gpu_usd=Decimal(amount),
            **columns,
        )
        for i in range(n)
    )


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def spent(world, clock):
    """A pod of the lab, paid by the member's allocation, with 48 hours of November spend
    (48.0000000048 USD) and an October day; a second allocation of the lab (the lab admin's
    own project) and one of the other lab."""
    account = RunpodAccountFactory(institution=world.institution)
    pod = ResourceFactory(account=account)
    hours(pod, T0 - dt.timedelta(days=10), 24)
    hours(pod, T0, 48)
    resource_assign(actor=world.inst_admin, resource=pod, allocation=world.allocation)
    second = AllocationFactory(
        funding_source=world.funding_source, user=None, project_name="Shared eval"
    )
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    for user in (world.inst_admin, world.finance, world.lab_admin):
        forget_scope(user)
    return account, pod, second, other
