"""present_query reads in one query what the dashboards show as running and idle and what
now_rates reads as costing money now: split by shown_and_costing, its rows are what each
means, written out here as their own queries, whatever mix of resources an owner has."""

import datetime as dt
from decimal import Decimal

import pytest
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from labgov.dashboard.selectors.common import (
    SHOWN_FIELDS,
    costing_query,
    now_rates,
    present_query,
    running_and_idle,
    shown_and_costing,
)
from labgov.runpod.models import Resource
from tests.dashboard.conftest import grow
from tests.factories import ResourceFactory


def _shown(owner: Q) -> list[tuple]:
    """What runs (pods Runpod reports running, and clusters) and the storage billing while
    nothing runs (stopped pods with a volume disk, network volumes no running pod of the
    same account has mounted), as running_and_idle reads them."""
    mounted = Resource.objects.present().filter(
        account=OuterRef("account"),
        kind="pod",
        status="RUNNING",
        network_volume_id=OuterRef("runpod_id"),
    )
    running = Q(kind="pod", status="RUNNING") | Q(kind="cluster")
    idle = Q(kind="pod", status="EXITED", volume_disk_gb__gt=0) | Q(
        Q(kind="network_volume") & ~Exists(mounted)
    )
    return sorted(
        Resource.objects.present()
        .filter(owner)
        .filter(running | idle)
        .values_list(
            *SHOWN_FIELDS,
            "current_allocation_id",
            "current_allocation__project_name",
            "current_allocation__user__username",
            "current_allocation__user__first_name",
            "current_allocation__user__last_name",
            "current_allocation__funding_source__name",
            "first_seen_at",
        )
    )


def _assert_split_matches(owner: Q) -> tuple[list, list]:
    shown, costing = shown_and_costing(present_query(owner))
    assert sorted(map(tuple, shown)) == _shown(owner)
    assert sorted(costing) == sorted(costing_query(owner))
    return shown, costing


@pytest.mark.django_db
def test_the_split_rows_are_the_two_queries_rows(world, spend):
    account = spend.account
    gone = timezone.now() - dt.timedelta(days=1)
    # Besides the fixture's running pod, stopped pod with a volume disk, idle network volume
    # and volume the running pod has mounted: what neither shows, what only one reads, and
    # what nobody pays for.
    ResourceFactory(account=account, status="EXITED", volume_disk_gb=0)  # costs nothing
    ResourceFactory(account=account, status="RUNNING", gone_at=gone)  # gone: not present
    ResourceFactory(account=account, status="RUNNING", current_allocation=None)
    ResourceFactory(
        account=account,
        kind="network_volume",
        runpod_id="vol-nobodys",
        status="AVAILABLE",
        size_gb=10,
        volume_type="STANDARD",
        current_allocation=None,
    )
    ResourceFactory(
        account=account, kind="cluster", runpod_id="cl-1", current_allocation=world.allocation
    )
    grow(world, spend, 2)
    for owner in (
        Q(account=account),
        Q(current_allocation__funding_source__lab_id=world.lab.pk),
        Q(current_allocation__funding_source=world.funding_source),
        Q(pk=spend.mounted_volume.pk),
    ):
        _assert_split_matches(owner)

    shown, costing = _assert_split_matches(Q(account=account))
    running, idle = running_and_idle(rows=shown)
    shown_pks = {r.pk for r in running} | {r.pk for r in idle}
    # The mounted volume costs money now, and is neither running nor idle storage.
    assert spend.mounted_volume.pk not in shown_pks
    assert {spend.running.pk, spend.stopped.pk, spend.idle_volume.pk} <= shown_pks
    rates = now_rates(rows=costing)
    assert rates.by_allocation == now_rates(Q(account=account)).by_allocation
    assert rates.by_allocation[world.allocation.pk] > Decimal(0)
