"""Issue 9, attack 1 (the spending half): a lab admin raises their lab's auto-approval amount
and has their own 8 × H100 × 1,000 h request approved, by the rule or by their own hand.

Refused now: an institution ceiling bounds every lab's auto-approval amount (checked when the
policy is saved and again at submission), and nobody approves, by hand or by a rule, a request
charged to their own allocation; another lab admin or an institution admin does.
"""

from decimal import Decimal as D

import pytest
from django.urls import reverse

from labgov.accounts.services import institution_auto_approve_ceiling_set
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.provisioning.models import ProvisioningPolicy, ProvisioningRequest
from labgov.provisioning.services import policy_save, request_approve, request_submit
from tests.factories import AllocationFactory, FundingSourceFactory, MembershipFactory

S = ProvisioningRequest.State
BIG = {"expected_hours": D(1000)}  # 8 × H100 × 1,000 h ≈ $35,120


def _policy_values(auto):
    return {
        "allowed_models": ["pod"],
        "allowed_clouds": ["SECURE"],
        "auto_approve_under_usd": D(auto),
    }


def test_lab_admin_cannot_set_an_auto_approval_amount_above_the_ceiling(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("provisioning:policy_lab", args=[world.lab.pk]),
        {**_policy_values("9999999"), "allowed_models": "pod", "allowed_clouds": "SECURE"},
    )
    assert response.status_code == 200
    assert "ceiling" in response.content.decode()
    assert not ProvisioningPolicy.objects.filter(lab=world.lab).exists()
    with pytest.raises(DomainError, match="ceiling") as info:
        policy_save(
            actor=world.lab_admin,
            institution=world.institution,
            lab=world.lab,
            values=_policy_values("9999999"),
        )
    assert info.value.field == "auto_approve_under_usd"
    # Up to the ceiling (the default, $1,000) is the lab admin's call.
    policy_save(
        actor=world.lab_admin,
        institution=world.institution,
        lab=world.lab,
        values=_policy_values("1000"),
    )


def test_the_ceiling_is_the_institution_admins_and_audited(world, client_for):
    for who in (world.lab_admin, world.finance):
        with pytest.raises(DomainError):
            institution_auto_approve_ceiling_set(
                actor=who, institution=world.institution, amount_usd=D("9999999")
            )
    response = client_for(world.inst_admin).post(
        reverse("accounts:institution_ceiling"), {"amount_usd": "250.00"}
    )
    assert response.status_code == 302
    world.institution.refresh_from_db()
    assert world.institution.auto_approve_ceiling_usd == D("250.00")
    event = AuditEvent.objects.get(action="institution.auto_approve_ceiling")
    assert event.actor == world.inst_admin
    assert event.before == {"auto_approve_ceiling_usd": "1000.00"}
    assert event.after == {"auto_approve_ceiling_usd": "250.00"}


def test_a_lowered_ceiling_stops_auto_approval_at_once(world, submitted):
    policy_save(
        actor=world.lab_admin,
        institution=world.institution,
        lab=world.lab,
        values=_policy_values("400"),
    )
    institution_auto_approve_ceiling_set(
        actor=world.inst_admin, institution=world.institution, amount_usd=D("300")
    )
    req = submitted()  # $351.20: under the lab's $400, over the new $300 ceiling
    assert req.state == S.SUBMITTED and not req.auto_approved


def test_lab_admins_own_request_is_never_approved_by_their_rule(world, draft):
    # Even where the institution allows a large auto-approval amount.
    institution_auto_approve_ceiling_set(
        actor=world.inst_admin, institution=world.institution, amount_usd=D("9999999")
    )
    policy_save(
        actor=world.lab_admin,
        institution=world.institution,
        lab=world.lab,
        values=_policy_values("9999999"),
    )
    big = FundingSourceFactory(lab=world.lab, amount_usd=D("100000"))
    own = AllocationFactory(funding_source=big, user=world.lab_admin, cap_usd=D("50000"))
    req = request_submit(
        actor=world.lab_admin, req=draft(user=world.lab_admin, allocation=own, **BIG)
    )
    assert req.state == S.SUBMITTED and not req.auto_approved
    with pytest.raises(DomainError, match="charged to your own allocation"):
        request_approve(actor=world.lab_admin, req=req)
    req.refresh_from_db()
    assert req.state == S.SUBMITTED
    # A member's request under the same rule is approved on submission, as before.
    small = request_submit(actor=world.member, req=draft())
    assert small.auto_approved


def test_nobody_approves_their_own_request_by_hand_however_small(world, draft):
    own = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    req = request_submit(
        actor=world.lab_admin,
        req=draft(user=world.lab_admin, allocation=own, expected_hours=D("0.1")),
    )
    with pytest.raises(DomainError, match="charged to your own allocation"):
        request_approve(actor=world.lab_admin, req=req)
    second = MembershipFactory(role="lab_admin", lab=world.lab).user
    assert request_approve(actor=second, req=req).decided_by == second


def test_the_review_queue_shows_the_own_request_to_the_others(world, draft, client_for):
    own = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    req = request_submit(actor=world.lab_admin, req=draft(user=world.lab_admin, allocation=own))
    approve = reverse("provisioning:approve", args=[req.pk])
    page = client_for(world.lab_admin).get(reverse("provisioning:review")).content.decode()
    assert approve not in page and "Waiting for another admin" in page
    page = client_for(world.lab_admin).get(reverse("provisioning:detail", args=[req.pk]))
    assert approve not in page.content.decode()
    assert "Waiting for another lab admin" in page.content.decode()
    page = client_for(world.inst_admin).get(reverse("provisioning:review")).content.decode()
    assert approve in page
    # Posting anyway is refused and changes nothing.
    client_for(world.lab_admin).post(approve)
    req.refresh_from_db()
    assert req.state == S.SUBMITTED
