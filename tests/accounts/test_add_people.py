"""Issue 9, attack 12: a lab admin added any active user of any institution to their lab, and
the error named which usernames exist. Now only people of the lab's institution (or new
accounts that belong nowhere yet) can be added, with one message for every refusal."""

import re

import pytest
from django.urls import reverse

from labgov.accounts.models import Membership
from labgov.accounts.services import UNKNOWN_PERSON, membership_grant
from labgov.core.errors import DomainError
from tests.factories import InstitutionFactory, LabFactory, MembershipFactory, UserFactory


def _add(client, world, username):
    return client.post(
        reverse("accounts:lab_detail", args=[world.lab.pk]),
        {"username": username, "role": "member"},
    )


@pytest.fixture
def stranger(world):
    """A member of a lab of another institution."""
    elsewhere = LabFactory(institution=InstitutionFactory())
    return MembershipFactory(role="member", lab=elsewhere).user


def test_a_lab_admin_cannot_add_someone_of_another_institution(world, client_for, stranger):
    client = client_for(world.lab_admin)
    response = _add(client, world, stranger.username)
    assert response.status_code == 200
    assert UNKNOWN_PERSON in response.content.decode()
    assert not Membership.objects.filter(user=stranger, lab=world.lab).exists()
    with pytest.raises(DomainError, match=UNKNOWN_PERSON):
        membership_grant(actor=world.lab_admin, user=stranger, role="member", lab=world.lab)


def test_the_message_is_the_same_whether_or_not_the_account_exists(world, client_for, stranger):
    client = client_for(world.lab_admin)
    inactive = UserFactory(is_active=False)
    pages = [
        _add(client, world, name).content.decode()
        for name in (stranger.username, "no-such-person", inactive.username)
    ]
    errors = [re.findall(r'<p class="error"[^>]*>(.*?)</p>', page) for page in pages]
    assert errors == [[UNKNOWN_PERSON.replace("'", "&#x27;")]] * 3


def test_people_of_the_institution_and_new_accounts_can_be_added(world, client_for):
    client = client_for(world.lab_admin)
    assert _add(client, world, world.other_member.username).status_code == 302
    newcomer = UserFactory()
    assert _add(client, world, newcomer.username).status_code == 302
    assert Membership.objects.filter(user=newcomer, lab=world.lab).exists()


def test_a_newcomer_signed_in_by_another_institution_cannot_be_added(world, client_for):
    """The attack: a person who holds no role yet (after their first sign-in at another
    institution's identity provider) was added by any institution's lab admin. They belong to
    the institution of their sign-in until someone gives them a role."""
    elsewhere = InstitutionFactory()
    theirs = UserFactory(home_institution=elsewhere)
    client = client_for(world.lab_admin)
    response = _add(client, world, theirs.username)
    assert response.status_code == 200 and UNKNOWN_PERSON in response.content.decode()
    with pytest.raises(DomainError, match=UNKNOWN_PERSON):
        membership_grant(actor=world.inst_admin, user=theirs, role="member", lab=world.lab)
    assert not Membership.objects.filter(user=theirs).exists()
    ours = UserFactory(home_institution=world.institution)
    assert _add(client, world, ours.username).status_code == 302


def test_an_institution_admin_cannot_appoint_someone_of_another_institution(
    world, client_for, stranger
):
    response = client_for(world.inst_admin).post(
        reverse("accounts:institution"), {"username": stranger.username, "role": "finance"}
    )
    assert response.status_code == 200
    assert UNKNOWN_PERSON in response.content.decode()
    assert not Membership.objects.filter(user=stranger, institution=world.institution).exists()
