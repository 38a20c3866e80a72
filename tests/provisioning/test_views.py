"""The pages' HTTP contract: the live estimate, the form's plain submit, htmx fragments,
and query counts that do not grow with the data."""

from decimal import Decimal as D

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import request_approve
from tests.factories import AllocationFactory, MembershipFactory
from tests.provisioning.conftest import CLUSTER_CHECKLIST, H100, listed_endpoint

S = ProvisioningRequest.State

FORM = {
    "title": "Fine-tune 8B",
    "deployment_model": "pod",
    "gpu_type_id": H100,
    "gpu_count": "8",
    "cloud": "SECURE",
    "image": "runpod/pytorch:2.8.0",
    "expected_hours": "10",
    "node_count": "1",
    "container_disk_gb": "0",
    "volume_disk_gb": "0",
    "network_volume_gb": "0",
    "model_params_billion": "8",
    "bytes_per_param": "14",
    "write_mb_per_s": "200",
    "checkpoint_interval_minutes": "60",
    "restart_minutes": "10",
    "justification": "Chapter 3.",
}


def _form(world, **overrides):
    return {**FORM, "allocation": world.allocation.pk, **overrides}


def test_estimate_fragment_shows_the_seeds_figures(world, catalog, client_for):
    client = client_for(world.member)
    response = client.get(reverse("provisioning:estimate"), _form(world), HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<div id="estimate"')  # the fragment, not the page
    assert 'data-figure="compute">$351.20<' in page
    assert 'data-figure="total">$351.20<' in page
    assert 'data-figure="stop">$40.97<' in page
    # The stop's terms spelled out: hours lost, of which the restart, at the whole pod's rate.
    assert (
        "1.17 hours lost (1 h of work since the last checkpoint + 0.17 h to restart) × $35.12 "
        "per hour for the whole pod (8 × H100 SXM). With one such stop the estimate becomes "
        "$392.17." in " ".join(page.split())
    )
    assert 'data-figure="checkpoint-size">112 GB' in page
    assert 'data-figure="save-time">560 s' in page
    assert "at least 93 min" in page
    assert 'data-code="checkpoint_interval_short"' in page


def test_estimate_shows_each_invalid_field_beside_it_with_its_bound(world, catalog, client_for):
    """-3 GPUs is not estimated as 1 GPU, nor huge hours as none: each refused value is
    named in the panel and its error replaces the one beside its field (out of band)."""
    response = client_for(world.member).get(
        reverse("provisioning:estimate"),
        _form(world, gpu_count="-3", expected_hours="1" + "0" * 15, title=""),
        HTTP_HX_REQUEST="true",
    )
    page = " ".join(response.content.decode().split())
    assert 'data-figure="total"' not in page
    assert "Not estimated until these 2 fields are fixed" in page
    gpu_slot = page.split('id="id_gpu_count-error"')[1].split("</div>")[0]
    assert 'hx-swap-oob="true"' in gpu_slot
    assert "greater than or equal to 1." in gpu_slot
    hours_slot = page.split('id="id_expected_hours-error"')[1].split("</div>")[0]
    assert "less than or equal to" in hours_slot
    # An empty required field is not an error while typing; the slot is emptied.
    assert 'id="id_title-error" class="field-error" hx-swap-oob="true"></div>' in page


def test_estimate_shows_policy_reasons(world, catalog, client_for):
    response = client_for(world.member).get(
        reverse("provisioning:estimate"),
        _form(world, interruptible="on", cloud="COMMUNITY", network_volume_gb="100"),
    )
    page = response.content.decode()
    assert "no longer exists on Runpod" in page
    assert "network volume requires Secure Cloud" in page


def test_estimate_ignores_someone_elses_allocation(world, catalog, client_for):
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    page = (
        client_for(world.member)
        .get(reverse("provisioning:estimate"), _form(world, allocation=other.pk))
        .content.decode()
    )
    assert 'data-figure="total"' not in page
    assert "Paid by</a>: Select a valid choice" in page
    assert "left" not in page  # nothing of the other allocation's figures


def test_form_page_wires_htmx_to_the_estimate(world, catalog, client_for):
    page = client_for(world.member).get(reverse("provisioning:new")).content.decode()
    assert f'hx-get="{reverse("provisioning:estimate")}"' in page
    assert 'hx-target="#estimate"' in page
    assert 'method="post"' in page  # works without JavaScript


def test_plain_submit_creates_and_submits(world, catalog, client_for):
    response = client_for(world.member).post(reverse("provisioning:new"), _form(world, submit="1"))
    req = ProvisioningRequest.objects.get()
    assert response.status_code == 302 and response.url == reverse(
        "provisioning:detail", args=[req.pk]
    )
    assert req.state == S.SUBMITTED and req.requester == world.member
    assert req.estimate_total_usd == D("351.20")


def test_save_draft_then_blocked_submit_keeps_the_draft(world, catalog, client_for):
    client = client_for(world.member)
    client.post(reverse("provisioning:new"), _form(world, interruptible="on", submit="1"))
    req = ProvisioningRequest.objects.get()
    assert req.state == S.DRAFT
    page = client.get(reverse("provisioning:detail", args=[req.pk])).content.decode()
    assert "no longer exists on Runpod" in page


def test_form_errors_are_shown(world, catalog, client_for):
    response = client_for(world.member).post(
        reverse("provisioning:new"), _form(world, volume_disk_gb="5")
    )
    assert response.status_code == 200
    assert "A volume disk is at least 10 GB." in response.content.decode()
    assert not ProvisioningRequest.objects.exists()


def test_edit_a_draft(world, draft, client_for):
    req = draft()
    client = client_for(world.member)
    page = client.get(reverse("provisioning:edit", args=[req.pk])).content.decode()
    assert 'value="Fine-tune 8B"' in page
    client.post(
        reverse("provisioning:edit", args=[req.pk]), _form(world, title="Renamed", draft="1")
    )
    req.refresh_from_db()
    assert req.title == "Renamed" and req.state == S.DRAFT


def test_review_queue_approves_inline_with_htmx(world, submitted, client_for):
    req = submitted()
    client = client_for(world.lab_admin)
    queue = client.get(reverse("provisioning:review")).content.decode()
    assert f'id="review-row-{req.pk}"' in queue and 'hx-post="' in queue
    response = client.post(reverse("provisioning:approve", args=[req.pk]), HTTP_HX_REQUEST="true")
    row = response.content.decode()
    assert response.status_code == 200
    assert row.lstrip().startswith(f'<tr id="review-row-{req.pk}"')
    assert "approved; its estimate is committed" in row
    assert 'data-state="provisioning"' in row


def test_review_queue_deny_without_reason_is_refused_inline(world, submitted, client_for):
    req = submitted()
    response = client_for(world.lab_admin).post(
        reverse("provisioning:deny", args=[req.pk]), {"reason": ""}, HTTP_HX_REQUEST="true"
    )
    assert "say why the request is denied" in response.content.decode()
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


def test_review_queue_filters(world, submitted, client_for):
    pod = submitted()
    cluster = submitted(
        deployment_model="cluster", node_count=2, runs_distributed=True, **CLUSTER_CHECKLIST
    )
    client = client_for(world.lab_admin)
    page = client.get(reverse("provisioning:review"), {"model": "cluster"}).content.decode()
    assert f"review-row-{cluster.pk}" in page and f"review-row-{pod.pk}" not in page
    request_approve(actor=world.lab_admin, req=pod)
    page = client.get(reverse("provisioning:review")).content.decode()
    assert f"review-row-{pod.pk}" not in page  # submitted only by default
    page = client.get(reverse("provisioning:review"), {"state": "all"}).content.decode()
    assert f"review-row-{pod.pk}" in page


def test_failure_is_shown_in_plain_words(world, submitted, client_for):
    from labgov.provisioning.services.provision import provisioning_fail

    req = request_approve(actor=world.lab_admin, req=submitted())
    provisioning_fail(request_id=req.pk, message="Runpod's balance is too low (402).")
    for user in (world.member, world.lab_admin):
        page = client_for(user).get(reverse("provisioning:detail", args=[req.pk])).content.decode()
        assert "Runpod&#x27;s balance is too low (402)." in page
        assert ">Retry<" in page


def test_policy_form_saves(world, catalog, client_for):
    response = client_for(world.lab_admin).post(
        reverse("provisioning:policy_lab", args=[world.lab.pk]),
        {
            "allowed_models": ["pod"],
            "allowed_clouds": ["SECURE"],
            "allowed_gpu_types": [H100],
            "max_gpus": "8",
            "auto_approve_under_usd": "25",
        },
    )
    assert response.status_code == 302
    page = client_for(world.lab_admin).get(reverse("provisioning:policies")).content.decode()
    assert H100 in page and "$25.00" in page


# Query counts: pinned per page and the same whatever the data size.


def _grow(world, draft, submitted, n):
    for _ in range(n):
        allocation = AllocationFactory(funding_source=world.funding_source, user=world.member)
        draft(allocation=allocation)
        request_approve(actor=world.lab_admin, req=submitted(allocation=allocation))
        MembershipFactory(role="lab_admin", lab=world.lab)


def _count(client, url, data=None):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, data or {})
    assert response.status_code == 200
    return len(ctx.captured_queries)


# Every page pays session, user and the role scope (3); then:
PAGES = {
    # page: (role, url builder, pinned count)
    # allocations exist?, count, page, the page's actual spend
    "list": ("member", lambda w, r, d: reverse("provisioning:list"), 7),
    # count, page, the managed labs for the filter, the Runpod accounts whose balance runway
    # it shows (and, when one has a balance, their last 7 days' spend in one more)
    "review": ("lab_admin", lambda w, r, d: reverse("provisioning:review"), 7),
    # request, actual spend, allocation figures, policy, GPU, resources, history, and for an
    # endpoint or cluster the lab's Runpod account (its confirmed spending limit)
    "detail": ("member", lambda w, r, d: reverse("provisioning:detail", args=[r.pk]), 11),
    # the same, the lab's Runpod account (none here), the past accuracy: the requester's
    # and the lab's latest provisioned requests (none here; with some, one more query reads
    # their actual spend: tests/provisioning/test_accuracy.py), and the account's confirmed
    # spending limit
    "detail (reviewer)": (
        "lab_admin",
        lambda w, r, d: reverse("provisioning:detail", args=[r.pk]),
        14,
    ),
    # allocations exist?, GPU catalog, allocation choices (twice: Django's required select
    # reads its first option again), the requester's past pod requests (their utilization)
    "new": ("member", lambda w, r, d: reverse("provisioning:new"), 8),
    "policies": ("inst_admin", lambda w, r, d: reverse("provisioning:policies"), 7),
    # lab, its own policy, the institution's default, GPU catalog
    "lab policy": (
        "lab_admin",
        lambda w, r, d: reverse("provisioning:policy_lab", args=[w.lab.pk]),
        7,
    ),
    # institution (through the memberships), the institution's labs (scope of an institution
    # admin), its default policy, GPU catalog
    "default policy": (
        "inst_admin",
        lambda w, r, d: reverse("provisioning:policy_default", args=[w.institution.pk]),
        7,
    ),
    # request, allocations, GPU catalog, allocation choices (twice), past pod requests
    "edit": ("member", lambda w, r, d: reverse("provisioning:edit", args=[d.pk]), 8),
    # request, the lab's Runpod accounts (twice: the required select reads its first option)
    "mark provisioned": (
        "lab_admin",
        lambda w, r, d: reverse("provisioning:mark_provisioned", args=[r.pk]),
        6,
    ),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_query_count_is_pinned_and_flat(world, draft, submitted, client_for, page):
    role, url_for, pinned = PAGES[page]
    req = submitted(
        deployment_model="cluster", node_count=2, runs_distributed=True, **CLUSTER_CHECKLIST
    )
    drafted = draft()
    client = client_for(getattr(world, role))
    small = _count(client, url_for(world, req, drafted))
    _grow(world, draft, submitted, 3)
    large = _count(client, url_for(world, req, drafted))
    if connection.vendor == "postgresql" and page in READ_WITH_ITS_TABLES:
        pinned += 2  # the join order set for the request's read and put back (core/joins.py)
    assert (small, large) == (pinned, pinned)


# Pages reading their request with the eight tables it points at (selectors.request_for_user)
READ_WITH_ITS_TABLES = {"detail", "detail (reviewer)", "edit", "mark provisioned"}


def test_estimate_query_count_is_flat(world, draft, submitted, client_for):
    client = client_for(world.member)
    url = reverse("provisioning:estimate")
    cluster = _form(
        world,
        deployment_model="cluster",
        node_count="8",
        gpu_count="8",
        network_volume_gb="2000",
        data_center_id="US-KS-2",
        runs_distributed="on",
        spending_limit_raised="on",
    )
    # Session, user, the role scope; the GPU catalog (the GPU asked for is taken from it),
    # the allocation chosen with its figures, the requester's past pod requests, the policy.
    assert _count(client, url, _form(world)) == 7
    assert _count(client, url, cluster) == 7  # 64 GPUs read no more than 8
    _grow(world, draft, submitted, 3)
    assert _count(client, url, _form(world)) == 7
    assert _count(client, url, cluster) == 7


def test_mark_provisioned_with_another_labs_endpoint_is_refused_in_words(
    world, submitted, client_for, runpod_lists
):
    """Issue 9, attack 5, through the page."""
    from labgov.funding.models import Allocation
    from labgov.provisioning.services import request_approve
    from labgov.runpod.services import resource_assign
    from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory

    account = RunpodAccountFactory(
        institution=world.institution, write_key_encrypted="", write_key_last4=""
    )
    runpod_lists["endpoints"].append(listed_endpoint("nlp-endpoint"))
    nlp = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    endpoint = ResourceFactory(account=account, kind="serverless", runpod_id="nlp-endpoint")
    resource_assign(actor=world.inst_admin, resource=endpoint, allocation=nlp)
    req = request_approve(
        actor=world.lab_admin,
        req=submitted(
            deployment_model="serverless",
            requests_per_day=D(10),
            seconds_per_request=D(1),
            duration_days=D(1),
            gpu_count=1,
        ),
    )
    response = client_for(world.lab_admin).post(
        reverse("provisioning:mark_provisioned", args=[req.pk]),
        {"account": account.pk, "runpod_id": "nlp-endpoint"},
    )
    assert response.status_code == 200
    assert "an institution admin or a lab admin of NLP can reassign it" in (
        response.content.decode()
    )
    endpoint.refresh_from_db()
    assert endpoint.current_allocation == nlp
    assert Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd == 0
