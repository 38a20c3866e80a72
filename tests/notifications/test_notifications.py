import smtplib

import pytest
from django.core import mail
from django.urls import reverse

from labgov.notifications.models import Notification
from labgov.notifications.services import notification_email_send, notify
from tests.factories import UserFactory


def _notify(users, key="k1", subject="Request #1 approved", **kw):
    return notify(
        recipients=users,
        kind="test",
        subject=subject,
        body="It is approved.",
        url="/provisioning/1/",
        dedupe_key=key,
        **kw,
    )


def test_notify_creates_one_per_recipient_and_emails_critical_after_commit(
    db, django_capture_on_commit_callbacks
):
    a, b = UserFactory(), UserFactory()
    with django_capture_on_commit_callbacks(execute=True):
        ids = _notify([a, b, a, None], severity="critical")
    assert len(ids) == 2
    assert {n.recipient for n in Notification.objects.all()} == {a, b}
    assert sorted(m.to[0] for m in mail.outbox) == sorted([a.email, b.email])
    assert mail.outbox[0].subject == "[labgov] Request #1 approved"
    assert "/provisioning/1/" in mail.outbox[0].body
    assert Notification.objects.filter(emailed_at__isnull=True).count() == 0


def test_the_same_notification_is_never_created_twice(db, django_capture_on_commit_callbacks):
    a = UserFactory()
    with django_capture_on_commit_callbacks(execute=True):
        _notify([a], severity="critical")
        assert _notify([a], severity="critical") == []
    assert Notification.objects.count() == 1
    assert len(mail.outbox) == 1


def test_an_email_is_sent_at_most_once(db):
    a = UserFactory()
    (pk,) = _notify([a])
    assert notification_email_send(notification_id=pk) is True
    assert notification_email_send(notification_id=pk) is False
    assert len(mail.outbox) == 1


def test_failed_send_can_be_retried(db, monkeypatch):
    a = UserFactory()
    (pk,) = _notify([a])

    def broken(**kwargs):
        raise smtplib.SMTPServerDisconnected("gone")

    monkeypatch.setattr("labgov.notifications.services.send_mail", broken)
    with pytest.raises(smtplib.SMTPException):
        notification_email_send(notification_id=pk)
    assert Notification.objects.get(pk=pk).emailed_at is None
    monkeypatch.undo()
    assert notification_email_send(notification_id=pk) is True


def test_no_email_address_no_email(db):
    a = UserFactory(email="")
    (pk,) = _notify([a])
    assert notification_email_send(notification_id=pk) is False
    assert not mail.outbox


def test_list_shows_only_mine_and_badge_counts_unread(world, client_for):
    _notify([world.member])
    _notify([world.lab_admin], key="k2")
    client = client_for(world.member)
    page = client.get(reverse("notifications:list")).content.decode()
    assert page.count("Request #1 approved") == 1
    badge = client.get(reverse("notifications:badge")).content.decode()
    assert ">1<" in badge


def test_open_marks_read_and_goes_to_the_page(world, client_for):
    (pk,) = _notify([world.member])
    response = client_for(world.member).post(reverse("notifications:open", args=[pk]))
    assert response.status_code == 302 and response.url == "/provisioning/1/"
    assert Notification.objects.get(pk=pk).read_at is not None


def test_someone_elses_notification_is_not_found(world, client_for):
    (pk,) = _notify([world.member])
    response = client_for(world.lab_admin).post(reverse("notifications:open", args=[pk]))
    assert response.status_code == 404
    assert Notification.objects.get(pk=pk).read_at is None


def test_mark_all_read(world, client_for):
    _notify([world.member])
    _notify([world.member], key="k2")
    client_for(world.member).post(reverse("notifications:read_all"))
    assert not Notification.objects.unread().exists()


@pytest.mark.parametrize("name", ["notifications:read_all"])
def test_mutations_are_post_only(world, client_for, name):
    assert client_for(world.member).get(reverse(name)).status_code == 405


def test_open_is_post_only(world, client_for):
    (pk,) = _notify([world.member])
    url = reverse("notifications:open", args=[pk])
    assert client_for(world.member).get(url).status_code == 405


@pytest.mark.parametrize("name", ["notifications:list", "notifications:badge"])
def test_anonymous_goes_to_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_list_query_count_is_flat(world, client_for, django_assert_num_queries):
    client = client_for(world.member)
    _notify([world.member], key="first")
    # session, user, the role scope (nav), the page's count, the page
    with django_assert_num_queries(5):
        client.get(reverse("notifications:list"))
    for i in range(30):
        _notify([world.member], key=f"more{i}")
    with django_assert_num_queries(5):
        client.get(reverse("notifications:list"))


@pytest.mark.parametrize("title", ["GPU\r\nBcc: victim@example.com", "a\nb", "a\rb", "a\u2028b"])
def test_a_line_break_in_a_title_does_not_break_its_critical_email(
    db, title, django_capture_on_commit_callbacks
):
    """Found in issue 9: Django refuses a header with CR/LF in it, so the critical email of a
    request titled that way raised and waited for the digest; now it goes out at once."""
    a = UserFactory()
    with django_capture_on_commit_callbacks(execute=True):
        _notify([a], subject=f"Request #7 could not be created: {title}", severity="critical")
    (sent,) = mail.outbox
    assert "\r" not in sent.subject and "\n" not in sent.subject and "\u2028" not in sent.subject
    assert sent.subject.startswith("[labgov] Request #7 could not be created: ")
    assert sent.message()["Bcc"] is None
    assert Notification.objects.get().emailed_at is not None
