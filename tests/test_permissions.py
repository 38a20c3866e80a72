"""The permission matrix: every page, every role, and the wrong HTTP method.

Expected codes: 200 page shown, 302 done (redirect), 403 visible but not allowed, 404 not
visible at all, "login" redirected to the login page.
"""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

ROLES = ["inst_admin", "finance", "lab_admin", "member", "outsider", "anonymous"]


def _user(world, role):
    return None if role == "anonymous" else getattr(world, role)


GET_PAGES = {
    # name: (url builder, {role: expected})
    "home": (lambda w: reverse("home"), dict.fromkeys(ROLES[:-1], 200)),
    "funding list": (lambda w: reverse("funding:list"), dict.fromkeys(ROLES[:-1], 200)),
    "funding detail": (
        lambda w: reverse("funding:detail", args=[w.funding_source.pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "other lab's funding detail": (
        lambda w: reverse("funding:detail", args=[w.other_funding_source.pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 404, "member": 404, "outsider": 404},
    ),
    "funding create": (
        lambda w: reverse("funding:create"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 403, "outsider": 403},
    ),
    "funding edit": (
        lambda w: reverse("funding:edit", args=[w.funding_source.pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "funding proposals": (
        lambda w: reverse("funding:proposals"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 200},
    ),
    "funding proposal new": (
        lambda w: reverse("funding:proposal_new"),
        {"inst_admin": 403, "finance": 403, "lab_admin": 200, "member": 403, "outsider": 403},
    ),
    "funding proposal change": (
        lambda w: reverse("funding:proposal_change", args=[w.funding_source.pk]),
        {"inst_admin": 403, "finance": 403, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "allocation new": (
        lambda w: reverse("funding:allocation_new", args=[w.funding_source.pk]),
        {"inst_admin": 200, "finance": 403, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "allocation edit": (
        lambda w: reverse("funding:allocation_edit", args=[w.allocation.pk]),
        {"inst_admin": 200, "finance": 403, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "grant import": (
        lambda w: reverse("funding:import"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
    "lab list": (
        lambda w: reverse("accounts:lab_list"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 200},
    ),
    "unattributed queue": (
        lambda w: reverse("runpod:unattributed"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 200},
    ),
    "lab new": (
        lambda w: reverse("accounts:lab_new"),
        {"inst_admin": 200, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
    "lab detail": (
        lambda w: reverse("accounts:lab_detail", args=[w.lab.pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "institution people": (
        lambda w: reverse("accounts:institution"),
        {"inst_admin": 200, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
    "audit log": (
        lambda w: reverse("audit"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
    "invoice periods": (
        lambda w: reverse("invoicing:periods"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 200},
    ),
    "invoice period": (
        lambda w: reverse("invoicing:period", args=[w.institution.pk, 2026, 10]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "my invoices": (lambda w: reverse("invoicing:mine"), dict.fromkeys(ROLES[:-1], 200)),
    "cost transfers": (
        lambda w: reverse("transfers:list"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 200},
    ),
    "cost transfer new": (
        lambda w: reverse("transfers:new"),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 200},
    ),
    "resource funding (split shares)": (
        lambda w: reverse("transfers:resource_funding", args=[_pod(w).pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 200, "outsider": 404},
    ),
    "lab idle pods": (
        lambda w: reverse("idle:lab", args=[w.lab.pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "lab auto-stop policy": (
        lambda w: reverse("idle:policy", args=[w.lab.pk]),
        {"inst_admin": 200, "finance": 403, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "lab right-sizing": (
        lambda w: reverse("idle:right_sizing", args=[w.lab.pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "endpoint workers (workers.min)": (
        lambda w: reverse("idle:endpoint_workers", args=[_endpoint(w).pk]),
        # Finance and the member who pays for it see the endpoint, so they are refused (403);
        # the outsider does not, and learns nothing of it (404).
        {"inst_admin": 200, "finance": 403, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "export period": (
        lambda w: reverse("exports:period", args=[w.institution.pk, 2026, 10]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "export journal": (
        lambda w: reverse("exports:period_journal_csv", args=[w.institution.pk, 2026, 10]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "export FOCUS dataset": (
        lambda w: reverse("exports:period_focus_csv", args=[w.institution.pk, 2026, 10]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "my share of invoices (CSV)": (
        lambda w: reverse("exports:my_share_csv"),
        dict.fromkeys(ROLES[:-1], 200),
    ),
}


def _pod(world):
    from tests.factories import ResourceFactory, RunpodAccountFactory

    return ResourceFactory(
        account=RunpodAccountFactory(institution=world.institution),
        current_allocation=world.allocation,
    )


def _endpoint(world):
    from tests.factories import ResourceFactory, RunpodAccountFactory

    return ResourceFactory(
        account=RunpodAccountFactory(institution=world.institution),
        kind="serverless",
        current_allocation=world.allocation,
        details={"workers_min": 1, "workers_max": 2},
    )


def _transfer_proposal(world):
    from labgov.transfers.models import CostTransfer

    second = world.allocation.funding_source.allocations.create(
        project_name="B",
        cap_usd=1,
        start_date=world.allocation.start_date,
        end_date=world.allocation.end_date,
    )
    return CostTransfer.objects.create(
        institution=world.institution,
        account=_pod(world).account,
        month=world.allocation.start_date.replace(day=1),
        from_allocation=world.allocation,
        to_allocation=second,
        from_funding_source=world.funding_source,
        to_funding_source=world.funding_source,
        amount_usd=1,
        justification="Wrong grant",
        proposed_by=world.lab_admin,
    )


def _spend_move_proposal(world):
    from labgov.transfers.models import SpendMove

    pod = _pod(world)
    move = SpendMove.objects.create(
        institution=world.institution,
        resource=pod,
        starts_at=timezone.now() - dt.timedelta(days=2),
        proposed_by=world.lab_admin,
    )
    move.shares.create(allocation=world.allocation, share_percent=100)
    return move


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", list(GET_PAGES))
def test_get_pages(world, client_for, page, role):
    url_for, expected = GET_PAGES[page]
    response = client_for(_user(world, role)).get(url_for(world))
    if role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))
    else:
        assert response.status_code == expected[role], response.content[:300]


def _membership_of(world, user):
    return user.memberships.get()


def _proposal(world):
    from labgov.funding.models import FundingProposal

    fs = world.funding_source
    return FundingProposal.objects.create(
        institution=world.institution,
        lab=world.lab,
        funding_source=fs,
        changed_fields=["amount_usd"],
        kind=fs.kind,
        name=fs.name,
        start_date=fs.start_date,
        end_date=fs.end_date,
        amount_usd=fs.amount_usd + 1,
        status=fs.status,
        proposed_by=world.lab_admin,
    )


_PROPOSAL_DATA = {
    "kind": "grant",
    "name": "Proposed",
    "start_date": "2026-01-01",
    "end_date": "2026-12-31",
    "amount_usd": "100",
    "status": "active",
}


POSTS = {
    # name: (url builder, data builder, {role: expected})
    "funding create": (
        lambda w: reverse("funding:create"),
        lambda w: {
            "lab": w.lab.pk,
            "kind": "grant",
            "name": "Posted",
            "award_number": "P-1",
            "start_date": "2026-01-01",
            "end_date": "2026-12-31",
            "amount_usd": "100",
            "status": "active",
        },
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 403, "outsider": 403},
    ),
    "funding edit": (
        lambda w: reverse("funding:edit", args=[w.funding_source.pk]),
        lambda w: {
            "lab": w.lab.pk,
            "kind": "grant",
            "name": "Renamed",
            "award_number": w.funding_source.award_number,
            "start_date": w.funding_source.start_date,
            "end_date": w.funding_source.end_date,
            "amount_usd": "10000",
            "status": "active",
        },
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "funding proposal new": (
        lambda w: reverse("funding:proposal_new"),
        lambda w: {**_PROPOSAL_DATA, "lab": w.lab.pk},
        {"inst_admin": 403, "finance": 403, "lab_admin": 302, "member": 403, "outsider": 403},
    ),
    "funding proposal change": (
        lambda w: reverse("funding:proposal_change", args=[w.funding_source.pk]),
        lambda w: {
            **_PROPOSAL_DATA,
            "start_date": w.funding_source.start_date,
            "end_date": w.funding_source.end_date,
            "amount_usd": "20000",
        },
        {"inst_admin": 403, "finance": 403, "lab_admin": 302, "member": 404, "outsider": 404},
    ),
    "funding proposal approve": (
        lambda w: reverse("funding:proposal_approve", args=[_proposal(w).pk]),
        lambda w: {},
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "funding proposal reject": (
        lambda w: reverse("funding:proposal_reject", args=[_proposal(w).pk]),
        lambda w: {"note": "No award letter"},
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "auto-approval ceiling": (
        lambda w: reverse("accounts:institution_ceiling"),
        lambda w: {"amount_usd": "500"},
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 302},
    ),
    "allocation new": (
        lambda w: reverse("funding:allocation_new", args=[w.funding_source.pk]),
        lambda w: {
            "project_name": "Posted",
            "cap_usd": "10",
            "start_date": w.funding_source.start_date,
            "end_date": w.funding_source.end_date,
        },
        {"inst_admin": 302, "finance": 403, "lab_admin": 302, "member": 404, "outsider": 404},
    ),
    "allocation edit": (
        lambda w: reverse("funding:allocation_edit", args=[w.allocation.pk]),
        lambda w: {
            "user": w.member.pk,
            "cap_usd": "20",
            "start_date": w.allocation.start_date,
            "end_date": w.allocation.end_date,
        },
        {"inst_admin": 302, "finance": 403, "lab_admin": 302, "member": 403, "outsider": 404},
    ),
    "lab new": (
        lambda w: reverse("accounts:lab_new"),
        lambda w: {"name": "Posted lab", "kind": "research_group"},
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 302},
    ),
    "lab add member": (
        lambda w: reverse("accounts:lab_detail", args=[w.lab.pk]),
        lambda w: {"username": w.other_member.username, "role": "member"},
        {"inst_admin": 302, "finance": 403, "lab_admin": 302, "member": 403, "outsider": 404},
    ),
    "end membership": (
        lambda w: reverse("accounts:membership_end", args=[_membership_of(w, w.member).pk]),
        lambda w: {},
        {"inst_admin": 302, "finance": 404, "lab_admin": 302, "member": 404, "outsider": 404},
    ),
    "end lab admin": (
        lambda w: reverse("accounts:membership_end", args=[_membership_of(w, w.lab_admin).pk]),
        lambda w: {},
        {"inst_admin": 302, "finance": 404, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    # Approving re-checks the spend (none here): refused in words, the page redirects.
    "cost transfer approve": (
        lambda w: reverse("transfers:approve", args=[_transfer_proposal(w).pk]),
        lambda w: {},
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "cost transfer reject": (
        lambda w: reverse("transfers:reject", args=[_transfer_proposal(w).pk]),
        lambda w: {"note": "Not allowable"},
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    # Approving re-checks the move (the pod is paid by that allocation already): in words.
    "back-dated move approve": (
        lambda w: reverse("transfers:move_approve", args=[_spend_move_proposal(w).pk]),
        lambda w: {},
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "back-dated move reject": (
        lambda w: reverse("transfers:move_reject", args=[_spend_move_proposal(w).pk]),
        lambda w: {"note": "Not allowable"},
        {"inst_admin": 302, "finance": 302, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "split shares": (
        lambda w: reverse("transfers:resource_funding", args=[_pod(w).pk]),
        lambda w: {
            "starts_on": timezone.now().date().isoformat(),
            "allocation_1": w.allocation.pk,
            "share_1": "100",
        },
        {"inst_admin": 302, "finance": 403, "lab_admin": 302, "member": 403, "outsider": 404},
    ),
    "institution appoint": (
        lambda w: reverse("accounts:institution"),
        lambda w: {"username": w.member.username, "role": "finance"},
        # The outsider's institution is another: Northfield's member is not theirs to appoint
        # (the form is shown again with one neutral error).
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(POSTS))
def test_post_actions(world, client_for, action, role):
    url_for, data_for, expected = POSTS[action]
    response = client_for(_user(world, role)).post(url_for(world), data_for(world))
    if role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))
    else:
        assert response.status_code == expected[role], response.content[:500]


@pytest.mark.parametrize("action", list(POSTS) + ["grant import"])
@pytest.mark.parametrize("method", ["put", "delete", "patch"])
def test_wrong_method(world, client_for, action, method):
    url = POSTS[action][0](world) if action in POSTS else reverse("funding:import")
    response = getattr(client_for(world.inst_admin), method)(url)
    assert response.status_code == 405


def test_end_membership_rejects_get(world, client_for):
    url = reverse("accounts:membership_end", args=[_membership_of(world, world.member).pk])
    assert client_for(world.inst_admin).get(url).status_code == 405


def test_healthz_rejects_post(client):
    assert client.post(reverse("healthz")).status_code == 405
