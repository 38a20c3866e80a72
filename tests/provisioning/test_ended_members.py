"""Issue 9, attack 6: a member whose membership ended yesterday keeps spending.

Refused now: an ended membership grants no request (saving, submitting, or having one
approved), while the person's allocations and history stay readable to lab admins and finance.
"""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from labgov.accounts.access import forget_scope
from labgov.accounts.services import membership_end
from labgov.core.errors import DomainError
from labgov.funding.models import Allocation
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import provisioning_retry, request_approve, request_submit
from labgov.provisioning.services.provision import provisioning_fail

S = ProvisioningRequest.State


def end_yesterday(world, user):
    membership = user.memberships.get(lab=world.lab)
    membership_end(
        actor=world.lab_admin,
        membership=membership,
        end_date=timezone.now().date() - dt.timedelta(days=1),
    )
    forget_scope(user)


def test_an_ended_member_cannot_save_a_request(world, draft, client_for):
    end_yesterday(world, world.member)
    with pytest.raises(DomainError, match="membership of this lab has ended"):
        draft()
    assert not ProvisioningRequest.objects.exists()
    client = client_for(world.member)
    assert client.get(reverse("provisioning:new")).status_code == 403


def test_an_ended_member_cannot_submit_a_draft_made_before(world, draft):
    req = draft()
    end_yesterday(world, world.member)
    with pytest.raises(DomainError, match="membership of this lab has ended"):
        request_submit(actor=world.member, req=req)
    req.refresh_from_db()
    assert req.state == S.DRAFT


def test_a_request_of_an_ended_member_cannot_be_approved(world, submitted):
    req = submitted()
    end_yesterday(world, world.member)
    for approver in (world.lab_admin, world.inst_admin):
        with pytest.raises(DomainError, match="membership of this lab has ended"):
            request_approve(actor=approver, req=req)
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


def test_a_membership_ending_today_still_counts_today(world, submitted):
    membership_end(actor=world.lab_admin, membership=world.member.memberships.get())
    assert request_approve(actor=world.lab_admin, req=submitted()).state != S.SUBMITTED


def test_an_ended_members_allocation_and_requests_stay_readable(world, submitted, client_for):
    req = submitted()
    end_yesterday(world, world.member)
    for reader in (world.lab_admin, world.finance, world.inst_admin):
        assert Allocation.objects.visible_to(reader).filter(pk=world.allocation.pk).exists()
        page = client_for(reader).get(reverse("funding:detail", args=[world.funding_source.pk]))
        assert world.allocation.holder_name in page.content.decode()
    for reader in (world.lab_admin, world.finance, world.member):
        response = client_for(reader).get(reverse("provisioning:detail", args=[req.pk]))
        assert response.status_code == 200


def test_a_failed_request_of_an_ended_member_cannot_be_retried(world, submitted):
    req = request_approve(actor=world.lab_admin, req=submitted())
    req = provisioning_fail(request_id=req.pk, message="402")
    end_yesterday(world, world.member)
    for who in (world.member, world.lab_admin):
        with pytest.raises(DomainError, match="membership of this lab has ended"):
            provisioning_retry(actor=who, req=req)
    req.refresh_from_db()
    assert req.state == S.FAILED
