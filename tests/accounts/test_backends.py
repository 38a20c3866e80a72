import pytest
from django.contrib.auth import get_user
from django.contrib.auth.backends import ModelBackend
from django.test import RequestFactory
from django.urls import reverse

from labgov.accounts.backends import PasswordBackend, active_user
from labgov.accounts.models import User
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _columns(user: User) -> dict:
    return {f.attname: getattr(user, f.attname) for f in User._meta.concrete_fields}


def test_the_signed_in_person_is_loaded_as_django_s_backend_loads_them():
    user = UserFactory(first_name="Ada", last_name="Lovelace", email="ada@example.org")
    mine, django = PasswordBackend().get_user(user.pk), ModelBackend().get_user(user.pk)
    assert mine == django and _columns(mine) == _columns(django)
    assert mine._state.db == "default" and not mine._state.adding
    assert active_user(user.pk + 1000) is None  # no such person
    assert active_user(2**63) is None  # past a bigint: no one's id


def test_an_inactive_person_is_no_one_as_with_django_s_backend():
    user = UserFactory(is_active=False)
    assert PasswordBackend().get_user(user.pk) is None
    assert ModelBackend().get_user(user.pk) is None


def test_a_session_is_still_checked_against_the_password(client_for):
    user = UserFactory()
    client = client_for(user)
    assert client.get(reverse("dashboard:me")).status_code == 200
    request = RequestFactory().get("/")
    request.session = client.session
    assert get_user(request) == user
    user.set_password("a new one, elsewhere")
    user.save()
    assert get_user(request).is_anonymous  # the session's hash no longer matches
    assert client.get(reverse("dashboard:me")).status_code == 302
