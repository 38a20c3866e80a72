"""Every sync refreshes when each listed resource was last seen, so a pod that vanishes later
is gone from its last sighting, not its first."""

import pytest
import time_machine

from labgov.runpod.client import RunpodClient
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.sync import account_sync
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
