"""Issue 9, attack 1: a lab admin mints budget and approves their own spending.

Each test performs one step of the attack as the lab admin would (through the pages where
there is one) and shows it refused; the proposal flow is what a lab admin may do instead.
"""

from decimal import Decimal as D

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.funding.imports import grants_import_csv
from labgov.funding.models import Allocation, FundingProposal, FundingSource
from labgov.funding.proposals import (
    funding_proposal_approve,
    funding_proposal_create,
    funding_proposal_reject,
    proposal_values_from,
)
from labgov.funding.services import (
    allocation_create,
    allocation_update,
    funding_source_create,
    funding_source_update,
)
from labgov.notifications.models import Notification
from tests.factories import AllocationFactory, FundingSourceFactory, MembershipFactory

BILLIONS = "999999999999.99"


def _fs_post(world, **overrides):
    return {
        "lab": world.lab.pk,
        "kind": "grant",
        "name": "My own money",
        "award_number": "MINT-1",
        "start_date": "2026-01-01",
        "end_date": "2027-12-31",
        "amount_usd": BILLIONS,
        "status": "active",
        **overrides,
    }


def test_lab_admin_cannot_create_a_funding_source(world, client_for):
    response = client_for(world.lab_admin).post(reverse("funding:create"), _fs_post(world))
    assert response.status_code == 403
    assert not FundingSource.objects.filter(award_number="MINT-1").exists()
    with pytest.raises(DomainError, match="Only finance or an institution admin"):
        funding_source_create(
            actor=world.lab_admin,
            lab=world.lab,
            name="My own money",
            start_date=world.funding_source.start_date,
            end_date=world.funding_source.end_date,
            amount_usd=D(BILLIONS),
        )
    assert not FundingSource.objects.filter(name="My own money").exists()


def test_lab_admin_cannot_reopen_and_raise_a_closed_source(world, client_for):
    closed = FundingSourceFactory(
        lab=world.lab, amount_usd=D("150000.00"), status=FundingSource.Status.CLOSED
    )
    response = client_for(world.lab_admin).post(
        reverse("funding:edit", args=[closed.pk]),
        _fs_post(
            world,
            award_number=closed.award_number,
            name=closed.name,
            start_date=closed.start_date,
            end_date=closed.end_date,
            amount_usd="900000.00",
            status="active",
        ),
    )
    assert response.status_code == 403
    with pytest.raises(DomainError):
        funding_source_update(
            actor=world.lab_admin,
            funding_source=closed,
            amount_usd=D("900000.00"),
            status=FundingSource.Status.ACTIVE,
        )
    closed.refresh_from_db()
    assert (closed.amount_usd, closed.status) == (D("150000.00"), FundingSource.Status.CLOSED)


def test_lab_admin_cannot_mint_through_the_grant_import(world, client_for):
    csv = b"lab,name,award_number,start_date,end_date,amount_usd\n"
    csv += f"vision,Minted,MINT-2,2026-01-01,2027-12-31,{BILLIONS}\n".encode()
    response = client_for(world.lab_admin).post(
        reverse("funding:import"),
        {"institution": world.institution.pk, "file": SimpleUploadedFile("g.csv", csv)},
    )
    assert response.status_code == 403
    result = grants_import_csv(actor=world.lab_admin, institution=world.institution, data=csv)
    assert not result.ok and "Only finance or an institution admin" in str(result.errors[0])
    assert not FundingSource.objects.filter(award_number="MINT-2").exists()
    # Finance imports the same grant at an amount a column holds (the bound is tests/test_fuzz).
    fair = csv.replace(BILLIONS.encode(), b"150000.00")
    assert grants_import_csv(actor=world.finance, institution=world.institution, data=fair).ok


def test_lab_admin_cannot_allocate_to_themselves(world, client_for):
    fs = world.funding_source
    client = client_for(world.lab_admin)
    response = client.post(
        reverse("funding:allocation_new", args=[fs.pk]),
        {
            "user": world.lab_admin.pk,
            "cap_usd": "5000",
            "start_date": fs.start_date,
            "end_date": fs.end_date,
        },
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    with pytest.raises(DomainError, match="allocation of your own"):
        allocation_create(
            actor=world.lab_admin,
            funding_source=fs,
            user=world.lab_admin,
            cap_usd=D("5000"),
            start_date=fs.start_date,
            end_date=fs.end_date,
        )
    assert not Allocation.objects.filter(user=world.lab_admin).exists()


def test_lab_admin_cannot_raise_or_take_over_an_allocation(world):
    own = AllocationFactory(funding_source=world.funding_source, user=world.lab_admin)
    with pytest.raises(DomainError, match="allocation of your own"):
        allocation_update(actor=world.lab_admin, allocation=own, cap_usd=D("5000"))
    with pytest.raises(DomainError, match="allocation of your own"):
        allocation_update(actor=world.lab_admin, allocation=world.allocation, user=world.lab_admin)
    # Another lab admin of the lab (or an institution admin) may.
    second = MembershipFactory(role="lab_admin", lab=world.lab).user
    allocation_update(actor=second, allocation=own, cap_usd=D("2000"))
    own.refresh_from_db()
    assert own.cap_usd == D("2000")


# -- Proposals ------------------------------------------------------------------------------


def test_lab_admin_proposes_a_source_and_finance_approves_it(world, client_for):
    client = client_for(world.lab_admin)
    response = client.post(
        reverse("funding:proposal_new"),
        {**_fs_post(world, amount_usd="50000.00"), "reason": "New award letter"},
    )
    assert response.status_code == 302
    proposal = FundingProposal.objects.get()
    # Nothing changes until someone decides; finance and the institution admin are told.
    assert not FundingSource.objects.filter(award_number="MINT-1").exists()
    told = set(
        Notification.objects.filter(kind="funding.proposal").values_list("recipient", flat=True)
    )
    assert told == {world.finance.pk, world.inst_admin.pk}
    # The lab admin cannot approve it, over the page or the service.
    assert client.post(reverse("funding:proposal_approve", args=[proposal.pk])).status_code == 403

    response = client_for(world.finance).post(
        reverse("funding:proposal_approve", args=[proposal.pk])
    )
    assert response.status_code == 302
    proposal.refresh_from_db()
    fs = FundingSource.objects.get(award_number="MINT-1")
    assert proposal.state == FundingProposal.State.APPROVED
    assert (proposal.funding_source, proposal.decided_by) == (fs, world.finance)
    assert fs.amount_usd == D("50000.00") and fs.lab == world.lab
    event = AuditEvent.objects.get(action="funding_proposal.approve")
    assert event.actor == world.finance
    assert event.after["proposed_by"] == world.lab_admin.pk
    assert event.after["approved_by"] == world.finance.pk
    assert AuditEvent.objects.get(action="funding_source.create").actor == world.finance
    assert Notification.objects.filter(
        kind="funding.proposal_decided", recipient=world.lab_admin
    ).exists()


def test_a_change_proposal_reopens_a_closed_source_only_when_finance_approves(world, client_for):
    closed = FundingSourceFactory(
        lab=world.lab, amount_usd=D("150000.00"), status=FundingSource.Status.CLOSED
    )
    values = {
        **proposal_values_from(closed),
        "amount_usd": D("900000.00"),
        "status": FundingSource.Status.ACTIVE,
    }
    proposal = funding_proposal_create(
        actor=world.lab_admin, lab=world.lab, funding_source=closed, values=values
    )
    assert sorted(proposal.changed_fields) == ["amount_usd", "status"]
    closed.refresh_from_db()
    assert closed.status == FundingSource.Status.CLOSED
    # Finance renames the source meanwhile: the approval applies only what was proposed.
    funding_source_update(actor=world.finance, funding_source=closed, name="Renamed by finance")
    funding_proposal_approve(actor=world.inst_admin, proposal=proposal)
    closed.refresh_from_db()
    assert closed.amount_usd == D("900000.00")
    assert closed.status == FundingSource.Status.ACTIVE
    assert closed.name == "Renamed by finance"


def test_nobody_decides_their_own_proposal(world):
    # A lab admin who is also finance of the institution still cannot approve their own.
    MembershipFactory(role="finance", lab=None, institution=world.institution, user=world.lab_admin)
    values = {**proposal_values_from(world.funding_source), "amount_usd": D("20000.00")}
    proposal = funding_proposal_create(
        actor=world.lab_admin, lab=world.lab, funding_source=world.funding_source, values=values
    )
    with pytest.raises(DomainError, match="your own proposal"):
        funding_proposal_approve(actor=world.lab_admin, proposal=proposal)
    with pytest.raises(DomainError, match="your own proposal"):
        funding_proposal_reject(actor=world.lab_admin, proposal=proposal, note="no")
    world.funding_source.refresh_from_db()
    assert world.funding_source.amount_usd == D("10000.00")


def test_rejection_needs_a_reason_and_changes_nothing(world, client_for):
    values = {**proposal_values_from(world.funding_source), "amount_usd": D("20000.00")}
    proposal = funding_proposal_create(
        actor=world.lab_admin, lab=world.lab, funding_source=world.funding_source, values=values
    )
    with pytest.raises(DomainError, match="Say why"):
        funding_proposal_reject(actor=world.finance, proposal=proposal, note=" ")
    funding_proposal_reject(actor=world.finance, proposal=proposal, note="No award letter")
    proposal.refresh_from_db()
    assert (proposal.state, proposal.decided_by) == ("rejected", world.finance)
    event = AuditEvent.objects.get(action="funding_proposal.reject")
    assert event.after == {"proposed_by": world.lab_admin.pk, "rejected_by": world.finance.pk}
    with pytest.raises(DomainError, match="rejected"):
        funding_proposal_approve(actor=world.inst_admin, proposal=proposal)
    world.funding_source.refresh_from_db()
    assert world.funding_source.amount_usd == D("10000.00")


def test_only_the_labs_admins_propose_and_only_for_their_lab(world):
    values = proposal_values_from(world.other_funding_source)
    values["amount_usd"] = D("1.00")
    for actor in (world.member, world.finance, world.lab_admin):
        with pytest.raises(DomainError):
            funding_proposal_create(
                actor=actor,
                lab=world.other_lab,
                funding_source=world.other_funding_source,
                values=values,
            )
    assert not FundingProposal.objects.exists()


def test_proposal_queue_shows_deciders_the_buttons_and_the_proposer_a_wait(world, client_for):
    values = {**proposal_values_from(world.funding_source), "amount_usd": D("20000.00")}
    funding_proposal_create(
        actor=world.lab_admin, lab=world.lab, funding_source=world.funding_source, values=values
    )
    approve = reverse("funding:proposal_approve", args=[FundingProposal.objects.get().pk])
    page = client_for(world.finance).get(reverse("funding:proposals")).content.decode()
    assert approve in page and "$20,000.00" in page
    page = client_for(world.lab_admin).get(reverse("funding:proposals")).content.decode()
    assert approve not in page and "Waiting for finance" in page


def test_proposal_queue_queries_do_not_grow_with_proposals(world, client_for):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = client_for(world.finance)

    def queries_with(n):
        for i in range(n):
            values = {
                **proposal_values_from(world.funding_source),
                "amount_usd": D(20000 + i),
            }
            funding_proposal_create(
                actor=world.lab_admin,
                lab=world.lab,
                funding_source=world.funding_source,
                values=values,
            )
        with CaptureQueriesContext(connection) as captured:
            assert client.get(reverse("funding:proposals")).status_code == 200
        return len(captured)

    assert queries_with(2) == queries_with(8)


def test_lab_admins_pages_offer_proposals_instead_of_edits(world, client_for):
    client = client_for(world.lab_admin)
    fs = world.funding_source
    page = client.get(reverse("funding:list")).content.decode()
    assert reverse("funding:proposal_new") in page and reverse("funding:create") not in page
    page = client.get(reverse("funding:detail", args=[fs.pk])).content.decode()
    assert reverse("funding:proposal_change", args=[fs.pk]) in page
    assert reverse("funding:edit", args=[fs.pk]) not in page
    page = client_for(world.finance).get(reverse("funding:detail", args=[fs.pk])).content.decode()
    assert reverse("funding:edit", args=[fs.pk]) in page
