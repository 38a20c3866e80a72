"""The seeds' cluster rules, checked when the request is made (submission) and again at
approval: above 2 pods / 16 GPUs a raised Runpod spending limit that the request says it has
and an institution admin confirmed for the account; the network volume in the cluster's data
center; the checklist's questions for multi-node work."""

from decimal import Decimal as D

import pytest

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import RequestBlocked, request_approve, request_submit
from labgov.runpod.services import account_confirm_cluster_limit, resource_assign
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory
from tests.provisioning.conftest import CLUSTER_CHECKLIST

S = ProvisioningRequest.State
# 3 pods x 8 H100 for 2 h = 24 GPUs x $4.39 x 2 = $210.72: over 2 pods / 16 GPUs.
BIG = {
    "deployment_model": "cluster",
    "node_count": 3,
    "gpu_count": 8,
    "expected_hours": D(2),
    "runs_distributed": True,
    **CLUSTER_CHECKLIST,
}


# 2 pods x 8 GPUs: within Runpod's on-demand entry point.
PLAIN = {**BIG, "node_count": 2}


@pytest.fixture
def account(world):
    # Read-only to labgov (no write key), so an approved cluster waits to be made by hand.
    return RunpodAccountFactory(
        institution=world.institution, write_key_encrypted="", write_key_last4=""
    )


def _submit_refused(draft, **values):
    req = draft(**values)
    with pytest.raises(RequestBlocked) as refused:
        request_submit(actor=req.requester, req=req)
    req.refresh_from_db()
    assert req.state == S.DRAFT
    return refused.value.reasons


def test_a_big_cluster_without_a_raised_limit_is_refused_when_requested(world, draft, account):
    reasons = _submit_refused(draft, **BIG)
    assert any("needs a raised Runpod spending limit first" in r for r in reasons)


def test_the_raised_limit_is_confirmed_by_an_institution_admin_before_approval(
    world, draft, account
):
    req = draft(**BIG, spending_limit_raised=True)
    req = request_submit(actor=world.member, req=req)  # the request says it has one
    assert req.state == S.SUBMITTED
    with pytest.raises(RequestBlocked) as refused:
        request_approve(actor=world.lab_admin, req=req)
    assert "No institution admin has confirmed that Runpod raised the spending limit" in (
        refused.value.message
    )
    assert account.name in refused.value.message
    # A lab admin cannot confirm it for the account.
    with pytest.raises(DomainError, match="Only an institution admin"):
        account_confirm_cluster_limit(actor=world.lab_admin, account=account, confirmed=True)
    account.refresh_from_db()
    assert account.cluster_limit_confirmed_at is None
    account_confirm_cluster_limit(
        actor=world.inst_admin, account=account, confirmed=True, note="Runpod ticket 4711"
    )
    event = AuditEvent.objects.get(action="runpod_account.cluster_limit_confirm")
    assert event.actor == world.inst_admin and event.note == "Runpod ticket 4711"
    assert event.after == {"cluster_limit_confirmed": True}
    req = request_approve(actor=world.lab_admin, req=req)
    assert req.state == S.APPROVED


def test_a_withdrawn_confirmation_is_noticed_again_at_approval(world, draft, account):
    account_confirm_cluster_limit(actor=world.inst_admin, account=account, confirmed=True)
    req = request_submit(actor=world.member, req=draft(**BIG, spending_limit_raised=True))
    account_confirm_cluster_limit(actor=world.inst_admin, account=account, confirmed=False)
    assert AuditEvent.objects.filter(action="runpod_account.cluster_limit_withdraw").count() == 1
    with pytest.raises(RequestBlocked, match="No institution admin has confirmed"):
        request_approve(actor=world.lab_admin, req=req)
    req.refresh_from_db()
    assert req.state == S.SUBMITTED and req.commitment_usd == 0


def test_a_clusters_network_volume_must_be_in_its_data_center(world, draft, account):
    ResourceFactory(
        account=account, kind="network_volume", runpod_id="vol-eu", data_center_id="EU-RO-1"
    )
    reasons = _submit_refused(draft, **PLAIN, network_volume_id="vol-eu", data_center_id="US-KS-2")
    assert any("Network volume vol-eu is in EU-RO-1, not in US-KS-2" in r for r in reasons)
    reasons = _submit_refused(draft, **PLAIN, network_volume_gb=100)
    assert any("must be in the cluster's data center: name the data center" in r for r in reasons)
    reasons = _submit_refused(
        draft, **PLAIN, network_volume_id="vol-nowhere", data_center_id="US-KS-2"
    )
    assert any("labgov knows no network volume vol-nowhere" in r for r in reasons)
    # In its data center, it goes ahead.
    req = draft(**PLAIN, network_volume_id="vol-eu", data_center_id="EU-RO-1")
    assert request_submit(actor=world.member, req=req).state == S.SUBMITTED


def test_a_volume_another_allocation_pays_for_is_not_mounted(world, draft, account):
    theirs = ResourceFactory(
        account=account, kind="network_volume", runpod_id="vol-nlp", data_center_id="US-KS-2"
    )
    nlp = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    resource_assign(actor=world.inst_admin, resource=theirs, allocation=nlp)
    reasons = _submit_refused(draft, **PLAIN, network_volume_id="vol-nlp", data_center_id="US-KS-2")
    assert any("vol-nlp is paid by another allocation" in r for r in reasons)


@pytest.mark.parametrize(
    ("missing", "words"),
    [
        ("data_exchange", "Say how the nodes exchange data"),
        ("shared_files_location", "Say where the shared model files live"),
    ],
)
def test_the_checklist_asks_how_a_cluster_works(world, draft, account, missing, words):
    reasons = _submit_refused(draft, **{**BIG, "node_count": 2, missing: ""})
    assert any(words in r for r in reasons)


def test_more_gpu_memory_alone_does_not_justify_a_cluster(world, draft, account):
    reasons = _submit_refused(
        draft, **{**BIG, "node_count": 2, "runs_distributed": False, "gpu_memory_needed_gb": 600}
    )
    assert any("more memory alone does not justify a cluster" in r for r in reasons)
    assert any("only helps software that runs distributed" in r for r in reasons)


def test_only_an_institution_admin_confirms_the_limit_on_the_accounts_page(
    world, account, client_for
):
    from django.urls import reverse

    url = reverse("runpod:account_cluster_limit", args=[account.pk])
    for who in (world.lab_admin, world.member, world.finance):
        response = client_for(who).post(url, {"confirmed": "1"})
        assert response.status_code in (403, 404)
    account.refresh_from_db()
    assert account.cluster_limit_confirmed_at is None
    response = client_for(world.inst_admin).post(url, {"confirmed": "1"})
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.cluster_limit_confirmed_by == world.inst_admin
    page = client_for(world.inst_admin).get(reverse("runpod:account_detail", args=[account.pk]))
    assert "raised by Runpod" in page.content.decode()
