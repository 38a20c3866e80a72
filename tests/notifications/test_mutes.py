"""Muted kinds are listed in the app and never emailed, neither at once nor in the digest."""

import re

import pytest
from django.core import mail
from django.urls import reverse

from labgov.core.errors import DomainError
from labgov.notifications.models import MutedKind, Notification
from labgov.notifications.services import digest_send, muted_kinds_save, notify
from tests.factories import UserFactory


def _notify(users, kind, key, severity=None):
    return notify(
        recipients=users, kind=kind, subject=f"Subject {key}", dedupe_key=key, severity=severity
    )


def test_a_muted_critical_kind_is_not_emailed_but_listed(
    world, client_for, test_kinds, django_capture_on_commit_callbacks
):
    muted_kinds_save(actor=world.member, kinds=["test.alpha"])
    with django_capture_on_commit_callbacks(execute=True):
        _notify([world.member, world.lab_admin], "test.alpha", "k1", severity="critical")
    assert [m.to for m in mail.outbox] == [[world.lab_admin.email]]
    mine = Notification.objects.get(recipient=world.member)
    assert mine.email_skipped and mine.emailed_at is None
    page = client_for(world.member).get(reverse("notifications:list")).content.decode()
    assert "Subject k1" in page


def test_a_muted_kind_is_left_out_of_the_digest_and_not_sent_after_unmuting(db, test_kinds):
    a = UserFactory()
    muted_kinds_save(actor=a, kinds=["test.alpha"])
    _notify([a], "test.alpha", "a1")
    _notify([a], "test.beta", "b1")
    assert digest_send(recipient_id=a.pk) == 1
    assert "Subject b1" in mail.outbox[0].body and "Subject a1" not in mail.outbox[0].body
    muted_kinds_save(actor=a, kinds=[])
    assert digest_send(recipient_id=a.pk) == 0
    _notify([a], "test.alpha", "a2")
    assert digest_send(recipient_id=a.pk) == 1
    assert "Subject a2" in mail.outbox[1].body and "Subject a1" not in mail.outbox[1].body


def test_saving_mutes_replaces_them(db, test_kinds):
    a = UserFactory()
    muted_kinds_save(actor=a, kinds=["test.alpha"])
    muted_kinds_save(actor=a, kinds=["test.beta"])
    assert list(MutedKind.objects.filter(user=a).values_list("kind", flat=True)) == ["test.beta"]


def test_unknown_kinds_cannot_be_muted(db, test_kinds):
    with pytest.raises(DomainError, match="Unknown"):
        muted_kinds_save(actor=UserFactory(), kinds=["nope"])


def test_settings_page_lists_kinds_by_label_and_saves(world, client_for, test_kinds):
    client = client_for(world.member)
    page = client.get(reverse("notifications:settings")).content.decode()
    assert "Alpha things happened" in page and "A request was denied" in page
    response = client.post(
        reverse("notifications:settings"), {"muted": ["test.beta"], "delivery": "digest"}
    )
    assert response.status_code == 302
    assert set(MutedKind.objects.filter(user=world.member).values_list("kind", flat=True)) == {
        "test.beta"
    }
    page = client.get(reverse("notifications:settings")).content.decode()
    assert re.search(r'value="test\.beta"[^>]*checked', page)
    assert not re.search(r'value="test\.alpha"[^>]*checked', page)


def test_settings_page_rejects_an_unknown_kind(world, client_for, test_kinds):
    response = client_for(world.member).post(reverse("notifications:settings"), {"muted": ["x"]})
    assert response.status_code == 200
    assert not MutedKind.objects.exists()
