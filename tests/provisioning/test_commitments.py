"""As actual spend arrives, a provisioned request's commitment shrinks to match, so the
allocation's committed + spent never counts the same dollar twice."""

import datetime as dt
from decimal import Decimal as D

from django.utils import timezone

from labgov.core.periods import hour_floor
from labgov.funding.models import Allocation, LedgerEntry
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.selectors import actual_usd_by_request
from labgov.provisioning.services import commitments_reconcile, request_approve
from labgov.provisioning.services.provision import provisioning_succeed
from labgov.runpod.attribution import usage_reconcile
from labgov.runpod.models import BillingRecord
from labgov.runpod.types import Pod
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory

S = ProvisioningRequest.State


def _pod(pod_id="pod-1", name="labgov-r1-x"):
    return Pod(
        id=pod_id,
        name=name,
        status="RUNNING",
        cost_per_hr_usd=D("35.12"),
        image="img",
        env={},
        container_disk_gb=20,
        volume_disk_gb=0,
        network_volume_id=None,
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        cloud="SECURE",
        data_center_id="US-KS-2",
        template_id=None,
        cluster_id=None,
        created_at=None,
        started_at=None,
    )


def _provisioned(submitted, world):
    account = RunpodAccountFactory(institution=world.institution)
    req = request_approve(actor=world.lab_admin, req=submitted())
    req = provisioning_succeed(request_id=req.pk, account=account, pod=_pod(), volume=None)
    return req, req.resources.get()


def _bill(resource, hours, amount, start=None):
    start = start or hour_floor(timezone.now())
    records = [
        BillingRecord(
            resource=resource,
            kind=resource.kind,
            bucket_start=start + dt.timedelta(hours=i),
            bucket_end=start + dt.timedelta(hours=i + 1),
            total_usd=D(amount),
            allocation=resource.current_allocation,
        )
        for i in range(hours)
    ]
    BillingRecord.objects.bulk_create(records)
    usage_reconcile(account=resource.account, days={r.bucket_start.date() for r in records})


def _figures(world):
    return Allocation.objects.with_figures().get(pk=world.allocation.pk)


def test_provisioned_pod_is_attributed_from_the_hour_it_was_made(submitted, world):
    req, pod = _provisioned(submitted, world)
    assert req.state == S.PROVISIONED and req.runpod_id == "pod-1"
    assert pod.current_allocation == world.allocation
    assignment = pod.assignments.get()
    assert assignment.source == "provisioned"
    # Runpod gave no creation time here: the attempt's hour, never 1970.
    assert dt.timedelta(0) <= req.provisioned_at - assignment.starts_at < dt.timedelta(hours=1)


def test_actual_spend_takes_over_the_commitment(submitted, world):
    req, pod = _provisioned(submitted, world)
    _bill(pod, 3, "35.12")  # 105.36 spent
    assert actual_usd_by_request([req.pk]) == {req.pk: D("105.36")}
    assert commitments_reconcile() == 1
    req.refresh_from_db()
    assert req.commitment_usd == D("245.84")
    figures = _figures(world)
    assert figures.spent_usd == D("105.36")
    assert figures.committed_usd + figures.spent_usd == D("351.20")  # no double count
    assert commitments_reconcile() == 0  # nothing new: nothing posted


def test_spend_beyond_the_estimate_leaves_nothing_committed(submitted, world):
    req, pod = _provisioned(submitted, world)
    _bill(pod, 12, "35.12")
    commitments_reconcile()
    req.refresh_from_db()
    assert req.commitment_usd == 0
    figures = _figures(world)
    assert figures.committed_usd == 0 and figures.spent_usd == D("421.44")


def test_spend_attributed_elsewhere_or_before_approval_is_not_the_requests(submitted, world):
    req, pod = _provisioned(submitted, world)
    _bill(pod, 2, "10", start=hour_floor(timezone.now()) - dt.timedelta(days=2))
    other = ResourceFactory(account=pod.account)
    _bill(other, 2, "10")
    assert actual_usd_by_request([req.pk]) == {}


def test_gone_resources_release_the_rest(submitted, world):
    req, pod = _provisioned(submitted, world)
    _bill(pod, 1, "35.12")
    pod.gone_at = timezone.now()
    pod.save()
    commitments_reconcile()
    req.refresh_from_db()
    assert req.commitment_usd == 0
    assert _figures(world).committed_usd == 0


def test_reconcile_touches_only_requests_with_money_committed(submitted, world):
    other_allocation = AllocationFactory(funding_source=world.funding_source, user=world.member)
    submitted(allocation=other_allocation)  # submitted, nothing committed
    assert commitments_reconcile() == 0
    assert not LedgerEntry.objects.exists()


def test_sync_calls_reconcile(world, monkeypatch):
    """A successful sync ends by reconciling, through its step in LABGOV_AFTER_SYNC."""
    import labgov.provisioning.services.commitments as services
    from labgov.runpod.client import RunpodClient
    from labgov.runpod.sync import account_sync
    from labgov.simulator import SimulatorServer, load_scenario

    calls = []
    monkeypatch.setattr(services, "commitments_reconcile", lambda: calls.append(1) or 0)
    key = "sim-key-reconcile"
    with SimulatorServer(scenario=load_scenario("empty"), api_key=key) as sim:
        account = RunpodAccountFactory(institution=world.institution, base_url=sim.base_url)
        run = account_sync(
            account_id=account.pk,
            start=sim.state.now - dt.timedelta(hours=2),
            end=sim.state.now,
            client_factory=lambda a: RunpodClient(base_url=sim.base_url, api_key=key),
        )
    assert run.status == "succeeded", run.error
    assert calls == [1]
    assert run.counts["commitments_released"] == 0
