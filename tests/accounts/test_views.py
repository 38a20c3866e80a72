import datetime as dt

from django.urls import reverse
from django.utils import timezone

from labgov.accounts.models import Membership, Role
from labgov.audit.models import AuditEvent


def test_lab_admin_adds_a_member(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("accounts:lab_detail", args=[world.lab.pk]),
        {"username": world.other_member.username, "role": "member"},
    )
    assert response.status_code == 302
    assert Membership.objects.active().filter(user=world.other_member, lab=world.lab).exists()
    assert AuditEvent.objects.filter(action="membership.grant").exists()


def test_lab_admin_cannot_appoint_lab_admins(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("accounts:lab_detail", args=[world.lab.pk]),
        {"username": world.other_member.username, "role": "lab_admin"},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_unknown_username_is_a_field_error(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("accounts:lab_detail", args=[world.lab.pk]),
        {"username": "nobody", "role": "member"},
    )
    assert "No one with that username can be added here." in response.content.decode()


def test_ending_a_membership_over_htmx_returns_the_members_fragment(world, client_for):
    membership = world.member.memberships.get()
    response = client_for(world.lab_admin).post(
        reverse("accounts:membership_end", args=[membership.pk]), headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<div id="members">')
    membership.refresh_from_db()
    assert membership.end_date == timezone.now().date()
    event = AuditEvent.objects.get(action="membership.end")
    assert event.before["end_date"] is None


def test_ended_membership_stops_granting_access(world, client_for):
    membership = world.lab_admin.memberships.get()
    Membership.objects.filter(pk=membership.pk).update(
        end_date=timezone.now().date() - dt.timedelta(days=1)
    )
    response = client_for(world.lab_admin).get(
        reverse("funding:detail", args=[world.funding_source.pk])
    )
    assert response.status_code == 404


def test_membership_ending_today_still_grants_access(world, client_for):
    Membership.objects.filter(user=world.lab_admin).update(end_date=timezone.now().date())
    response = client_for(world.lab_admin).get(
        reverse("funding:detail", args=[world.funding_source.pk])
    )
    assert response.status_code == 200


def test_institution_admin_appoints_finance(world, client_for):
    client_for(world.inst_admin).post(
        reverse("accounts:institution"), {"username": world.member.username, "role": "finance"}
    )
    assert Membership.objects.filter(
        user=world.member, role=Role.FINANCE, institution=world.institution
    ).exists()


def test_login_and_logout(world, client):
    world.member.set_password("s3cret-pass")
    world.member.save()
    response = client.post(
        reverse("login"), {"username": world.member.username, "password": "s3cret-pass"}
    )
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 200
    assert client.get(reverse("logout")).status_code == 405  # logout is POST-only
    client.post(reverse("logout"))
    assert client.get(reverse("home")).status_code == 302
