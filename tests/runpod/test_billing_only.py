"""Resources billed but never listed (gone before the first sync) show as what they are: seen
only in billing, with their first and last billed hour, not under a made-up status."""

import datetime as dt
import re

import pytest
from django.urls import reverse

from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.sync import account_sync
from tests.fixtures_sim import hour

pytestmark = pytest.mark.usefixtures("at_sim_now")


@pytest.fixture
def synced_month(sim, sim_account, fast_clients):
    # The scenario's SLURM cluster ran from 3 to 6 November and was gone before this sync.
    account_sync(
        account_id=sim_account.pk,
        client_factory=fast_clients,
        start=hour(sim.state.now) - dt.timedelta(days=30),
    )
    return Resource.objects.get(runpod_id="cl2n3l4p5t6r7s")


def _row(page: str, runpod_id: str) -> str:
    [row] = [r for r in re.findall(r"<tr.*?</tr>", page, re.S) if runpod_id in r]
    return row


def test_the_cluster_only_billing_remembers(synced_month):
    cluster = synced_month
    assert cluster.kind == ResourceKind.CLUSTER and cluster.billing_only
    assert cluster.status == ""  # not "UNSEEN", which Runpod's status enum does not have


@pytest.mark.parametrize(
    "url", [reverse("runpod:resources") + "?gone=1", reverse("runpod:unattributed")]
)
def test_pages_say_seen_only_in_billing_with_the_billed_hours(synced_month, world, client_for, url):
    page = client_for(world.inst_admin).get(url).content.decode()
    row = _row(page, "cl2n3l4p5t6r7s")
    assert "seen only in billing" in row
    assert "billed 2026-11-03 08:00 – 2026-11-06 19:00 UTC" in row
    assert "UNSEEN" not in page
    assert row.count("cl2n3l4p5t6r7s") == 1  # not "cl2n3l4p5t6r7s cl2n3l4p5t6r7s"
