"""Every sync refreshes when each listed resource was last seen, so a pod that vanishes later
is gone from its last sighting, not its first."""

import datetime as dt

import pytest
import time_machine
from django.utils import timezone

from labgov.runpod.client import RunpodClient
from labgov.runpod.inventory import _resources_upsert
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.sync import account_sync
from tests.factories import ResourceFactory, RunpodAccountFactory
from tests.fixtures_sim import SIM_KEY

pytestmark = pytest.mark.usefixtures("at_sim_now")


def _sync_at(sim, account, clients):
    with time_machine.travel(sim.state.now, tick=False):
        account_sync(account_id=account.pk, client_factory=clients)
    return sim.state.now


def test_a_pod_that_vanishes_after_several_syncs_is_gone_from_its_last_sighting(
    sim, sim_account, fast_clients
):
    _sync_at(sim, sim_account, fast_clients)
    pod = Resource.objects.filter(kind=ResourceKind.POD, status="RUNNING").first()
    first_seen = pod.first_seen_at
    sim.advance(hours=5)
    second = _sync_at(sim, sim_account, fast_clients)
    pod.refresh_from_db()
    assert pod.last_seen_at == second  # unchanged pods are seen too
    # Every listed resource, changed or not, was seen by the second sync.
    listed = Resource.objects.filter(account=sim_account, gone_at__isnull=True).exclude(
        kind=ResourceKind.ENDPOINT
    )
    assert set(listed.values_list("last_seen_at", flat=True)) == {second}
    with RunpodClient(base_url=sim.base_url, api_key=SIM_KEY) as client:
        client.pod_action(pod.runpod_id, "terminate")
    sim.advance(hours=2)
    _sync_at(sim, sim_account, fast_clients)
    pod.refresh_from_db()
    assert pod.status == "TERMINATED"
    assert pod.gone_at == second != first_seen


@pytest.mark.django_db
def test_a_gone_resource_listed_again_comes_back_and_the_others_stay_gone(world):
    """The inventory reads only the resources a sync may change (those listed, those not yet
    gone): one gone and listed again is back, one gone and not listed keeps its gone_at, one
    live and not listed is gone from its last sighting."""
    account = RunpodAccountFactory(institution=world.institution)
    now = timezone.now()
    long_ago, earlier = now - dt.timedelta(days=30), now - dt.timedelta(hours=1)
    back = ResourceFactory(account=account, gone_at=long_ago, status="TERMINATED")
    still_gone = ResourceFactory(account=account, gone_at=long_ago, last_seen_at=long_ago)
    vanishing = ResourceFactory(account=account, last_seen_at=earlier)
    fetched = {(back.kind, back.runpod_id): {"name": back.name, "status": "RUNNING"}}
    counts = _resources_upsert(account, fetched, now)
    assert counts == {"resources_new": 0, "resources_changed": 1, "resources_gone": 1}
    back.refresh_from_db()
    still_gone.refresh_from_db()
    vanishing.refresh_from_db()
    assert back.gone_at is None and back.status == "RUNNING" and back.last_seen_at == now
    assert still_gone.gone_at == long_ago and still_gone.last_seen_at == long_ago
    assert vanishing.gone_at == earlier
