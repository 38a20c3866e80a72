"""Runpod pages keep a fixed number of queries whatever the number of resources and records."""

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labgov.runpod.attribution import unattributed_refresh
from labgov.runpod.models import BillingRecord, SyncRun
from tests.factories import ResourceFactory, RunpodAccountFactory

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def _grow(account, allocation, n):
    for i in range(n):
        pod = ResourceFactory(account=account, current_allocation=allocation if i % 2 else None)
        BillingRecord.objects.bulk_create(
            BillingRecord(
                resource=pod,
                kind="pod",
                bucket_start=T0 + dt.timedelta(hours=h),
                bucket_end=T0 + dt.timedelta(hours=h + 1),
                total_usd=Decimal("0.5"),
            )
            for h in range(3)
        )
        SyncRun.objects.create(account=account, status="failed", error="x", finished_at=T0)
    unattributed_refresh(account=account)


def _count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize(
    ("role", "page"),
    [
        (role, page)
        for page in [
            "runpod:resources",
            "runpod:unattributed",
            "runpod:account_list",
            "runpod:rules",
        ]
        for role in ["inst_admin", "lab_admin", "member"]
        # The unattributed queue is not a member's page (a 403).
        if (role, page) != ("member", "runpod:unattributed")
    ],
)
def test_query_count_does_not_grow(world, client_for, page, role):
    account = RunpodAccountFactory(institution=world.institution)
    client = client_for(getattr(world, role))
    _grow(account, world.allocation, 2)
    small = _count(client, reverse(page))
    _grow(account, world.allocation, 25)
    assert _count(client, reverse(page)) == small


def test_account_detail_query_count_does_not_grow(world, client_for):
    account = RunpodAccountFactory(institution=world.institution)
    client = client_for(world.inst_admin)
    url = reverse("runpod:account_detail", args=[account.pk])
    _grow(account, world.allocation, 2)
    small = _count(client, url)
    _grow(account, world.allocation, 25)
    assert _count(client, url) == small
