"""A case follows who pays, attacks performed: after an institution admin re-attributed a
volume to another lab, the first lab's admins can neither request nor approve its deletion,
the case moves to the paying lab (whose admins see it) and both labs are told; the deletion
itself refuses when the lab that pays changed under it. Legal and audit holds are lifted only
by an institution admin (or the role that placed them). The case list shows the payer of now;
a case opens at its first warning before the grant's end."""

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.notifications.models import Notification
from labgov.retention import services
from labgov.retention.evaluation import retention_evaluate
from labgov.retention.models import Hold, RetentionCase, RetentionPolicy, State
from labgov.runpod.models import Assignment, Resource
from labgov.runpod.services import resource_assign
from tests.factories import AllocationFactory, FundingSourceFactory, MembershipFactory
from tests.retention.conftest import make_volume, open_case


@pytest.fixture
def case(world, account, ending_grant, policy):
    _, allocation = ending_grant
    volume = make_volume(
        account, allocation, name="grant-data", created_at_runpod=timezone.now() - dt.timedelta(3)
    )
    Assignment.objects.create(
        resource=volume,
        allocation=allocation,
        starts_at=timezone.now() - dt.timedelta(days=30),
        source=Assignment.Source.MANUAL,
    )
    return open_case(volume)


@pytest.fixture
def nlp(world):
    """The other lab: its admin, and an allocation of its own that may pay."""
    admin = MembershipFactory(role="lab_admin", lab=world.other_lab).user
    source = FundingSourceFactory(lab=world.other_lab, name="NLP money")
    return admin, AllocationFactory(funding_source=source, user=world.other_member)


def _reattribute(world, case, allocation):
    resource_assign(
        actor=world.inst_admin,
        resource=Resource.objects.get(pk=case.resource_id),
        allocation=allocation,
        note="belongs to NLP",
    )
    case.refresh_from_db()
    return case


def test_reattribution_moves_the_case_and_the_first_lab_can_no_longer_delete(
    world, case, nlp, second_admin, client_for
):
    nlp_admin, nlp_money = nlp
    case = _reattribute(world, case, nlp_money)
    assert case.lab_id == world.other_lab.pk and case.state == State.OPEN
    # The attack: the first lab's admins ask and approve.
    with pytest.raises(PermissionDenied):
        services.deletion_request(actor=world.lab_admin, case=case, reason="mine")
    # The paying lab's admin sees the case now, and decides.
    assert client_for(nlp_admin).get(reverse("retention:detail", args=[case.pk])).status_code == 200
    assert client_for(world.lab_admin).get(
        reverse("retention:detail", args=[case.pk])
    ).status_code == (404)
    event = AuditEvent.objects.get(action="retention.follow", target_id=str(case.pk))
    assert (event.after["from_lab"], event.after["to_lab"]) == (world.lab.pk, world.other_lab.pk)
    told = set(
        Notification.objects.filter(subject__contains="grant-data").values_list(
            "recipient_id", flat=True
        )
    )
    assert {world.lab_admin.pk, second_admin.pk, nlp_admin.pk} <= told


def test_a_request_made_before_the_reattribution_no_longer_counts(world, case, nlp, second_admin):
    _nlp_admin, nlp_money = nlp
    case = services.deletion_request(actor=world.lab_admin, case=case, reason="archived")
    case = _reattribute(world, case, nlp_money)
    assert case.state == State.OPEN
    with pytest.raises((PermissionDenied, DomainError)):
        services.deletion_approve(actor=second_admin, case=case)


def test_the_deletion_refuses_when_the_lab_that_pays_changed_under_it(
    world, sim, sim_account, ending_grant, policy, second_admin, nlp, fast_clients
):
    """Re-attributed by a path with no after-assign step (a script's UPDATE): the carry-out
    still checks who pays before deleting."""
    from labgov.retention.deletion import Outcome, case_delete_carry_out
    from tests.factories import ResourceFactory

    _, allocation = ending_grant
    volume = ResourceFactory(
        account=sim_account,
        kind="network_volume",
        runpod_id="th5d8r2y7e",
        name="old-thesis-data",
        size_gb=300,
        data_center_id="US-KS-2",
        volume_type="STANDARD",
        current_allocation=allocation,
        created_at_runpod=timezone.now() - dt.timedelta(days=5),
    )
    case = services.deletion_request(actor=world.lab_admin, case=open_case(volume), reason="x")
    case = services.deletion_approve(actor=second_admin, case=case)
    Resource.objects.filter(pk=volume.pk).update(current_allocation=nlp[1])
    RetentionCase.objects.filter(pk=case.pk).update(
        last_known={**case.last_known, "allocation_id": nlp[1].pk}
    )
    assert case_delete_carry_out(case_id=case.pk, client_factory=fast_clients) == Outcome.CHANGED
    assert "th5d8r2y7e" in {v["id"] for v in sim.state.list_volumes()}
    case.refresh_from_db()
    assert "another lab pays for it now" in case.refusal


def test_the_evaluation_moves_a_case_whose_payer_changed_elsewhere(world, case, nlp):
    Resource.objects.filter(pk=case.resource_id).update(current_allocation=nlp[1])
    retention_evaluate(institution_id=world.institution.pk)
    case.refresh_from_db()
    # Handed to the lab that pays; then, NLP's money running on, no longer near its due date.
    assert case.lab_id == world.other_lab.pk
    assert AuditEvent.objects.filter(action="retention.follow", target_id=str(case.pk)).exists()
    assert case.state == State.CANCELLED


def _hold(world, case, actor, kind="legal"):
    return services.case_hold(
        actor=actor, case=case, kind=kind, reason="litigation", payer=world.allocation
    )


def test_a_lab_admin_cannot_lift_an_institution_admins_legal_hold(world, case, client_for):
    hold = _hold(world, case, world.inst_admin)
    assert hold.placed_as == "institution_admin"
    case.refresh_from_db()
    # The attack: lift it, then ask for deletion.
    with pytest.raises(DomainError, match="only an institution admin"):
        services.hold_lift(actor=world.lab_admin, case=case, note="done")
    with pytest.raises(DomainError):
        services.deletion_request(actor=world.lab_admin, case=case)
    page = client_for(world.lab_admin).get(reverse("retention:detail", args=[case.pk]))
    assert b"Lift hold" not in page.content
    assert Hold.objects.active().filter(pk=hold.pk).exists()
    services.hold_lift(actor=world.inst_admin, case=case, note="case settled")
    event = AuditEvent.objects.filter(action="retention.lift", target_id=str(case.pk)).get()
    assert event.actor == world.inst_admin and event.after["holds"][0]["kind"] == "legal"


def test_a_lab_admins_own_legal_hold_and_any_thesis_hold_a_lab_admin_lifts(
    world, case, second_admin
):
    _hold(world, case, world.lab_admin)
    case.refresh_from_db()
    services.hold_lift(actor=second_admin, case=case, note="no longer needed")
    case.refresh_from_db()
    _hold(world, case, world.inst_admin, kind="thesis")
    case.refresh_from_db()
    case = services.hold_lift(actor=world.lab_admin, case=case, note="defended")
    assert case.state == State.OPEN


def test_the_case_list_shows_who_pays_after_a_hold(world, case, client_for):
    thesis = AllocationFactory(
        funding_source=FundingSourceFactory(lab=world.lab, name="Thesis fund"), user=world.member
    )
    services.case_hold(actor=world.lab_admin, case=case, kind="thesis", reason="r", payer=thesis)
    page = client_for(world.lab_admin).get(reverse("retention:list"))
    row = page.content.decode().split(f'data-case="{case.pk}"')[1].split("</tr>")[0]
    assert "Thesis fund" in row and "Ending grant" not in row


def test_a_case_opens_at_its_first_warning_before_the_grants_end(world, account):
    """25 days to the grant's end and 7 days' grace: due in 32 days, the first warning 30 days
    ahead: the case opens now, not in two days."""
    RetentionPolicy.objects.create(
        institution=world.institution, is_active=True, funding_grace_days=7, warning_days="30,7,1"
    )
    today = timezone.now().date()
    grant = FundingSourceFactory(lab=world.lab, end_date=today + dt.timedelta(days=25))
    volume = make_volume(
        account,
        AllocationFactory(funding_source=grant, user=world.member),
        created_at_runpod=timezone.now() - dt.timedelta(days=3),
        first_seen_at=timezone.now() - dt.timedelta(days=3),
    )
    retention_evaluate(institution_id=world.institution.pk)
    case = RetentionCase.objects.get(resource=volume)
    assert case.due_date == today + dt.timedelta(days=32)
    # Evaluated again, it is not cancelled as "not near yet".
    retention_evaluate(institution_id=world.institution.pk)
    case.refresh_from_db()
    assert case.state == State.OPEN


def test_the_grant_ending_alert_links_each_volume_to_its_case(world, account, client_for):
    from labgov.alerts.evaluation import alerts_evaluate
    from labgov.alerts.models import Alert

    RetentionPolicy.objects.create(
        institution=world.institution, is_active=True, funding_grace_days=7
    )
    today = timezone.now().date()
    grant = FundingSourceFactory(lab=world.lab, end_date=today + dt.timedelta(days=25))
    volume = make_volume(
        account,
        AllocationFactory(funding_source=grant, user=world.member),
        created_at_runpod=timezone.now() - dt.timedelta(days=3),
        first_seen_at=timezone.now() - dt.timedelta(days=3),
    )
    retention_evaluate(institution_id=world.institution.pk)
    alerts_evaluate(institution_id=world.institution.pk)
    alert = Alert.objects.get(kind="funding_ending")
    client = client_for(world.lab_admin)
    html = client.get(reverse("alerts:detail", args=[alert.pk])).content.decode()
    link = reverse("retention:for_resource", args=[volume.pk])
    for part in ("hold", "move", "request"):
        assert f"{link}?to={part}" in html
    case = RetentionCase.objects.get(resource=volume)
    response = client.get(f"{link}?to=hold")
    assert response.url == reverse("retention:detail", args=[case.pk]) + "#hold"
