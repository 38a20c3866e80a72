"""The daily digest: one email per person, grouped by kind, each notification at most once."""

import smtplib

import pytest
from django.conf import settings
from django.core import mail

from labgov.notifications import services
from labgov.notifications.models import Notification
from labgov.notifications.services import digest_recipient_ids, digest_send, notify
from labgov.notifications.tasks import send_digests
from tests.factories import UserFactory


def _notify(users, kind, key, severity=None, **kw):
    return notify(
        recipients=users,
        kind=kind,
        subject=f"Subject {key}",
        body=f"Body {key}",
        url=f"/x/{key}/",
        dedupe_key=key,
        severity=severity,
        **kw,
    )


def test_info_and_warning_wait_for_the_digest(db, test_kinds, django_capture_on_commit_callbacks):
    a = UserFactory()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        _notify([a], "test.alpha", "k1")
        _notify([a], "test.beta", "k2")
    assert callbacks == []
    assert not mail.outbox
    assert Notification.objects.awaiting_email().count() == 2
    assert set(Notification.objects.values_list("severity", flat=True)) == {"info", "warning"}


def test_critical_is_emailed_at_once_and_not_again_in_the_digest(
    db, test_kinds, django_capture_on_commit_callbacks
):
    a = UserFactory()
    with django_capture_on_commit_callbacks(execute=True):
        _notify([a], "test.alpha", "k1", severity="critical")
    assert len(mail.outbox) == 1
    assert send_digests.delay().get() == 0
    assert len(mail.outbox) == 1


def test_digest_is_one_email_per_person_grouped_by_kind(db, test_kinds, settings):
    settings.LABGOV_BASE_URL = "https://labgov.example.edu"
    a, b = UserFactory(), UserFactory()
    _notify([a, b], "test.beta", "b1")
    _notify([a], "test.alpha", "a1")
    _notify([a], "test.alpha", "a2")
    assert send_digests.delay().get() == 2
    assert sorted(m.to[0] for m in mail.outbox) == sorted([a.email, b.email])
    to_a = next(m for m in mail.outbox if m.to == [a.email])
    assert to_a.subject == "[labgov] Your daily digest: 3 notifications"
    body = to_a.body
    alpha, beta = body.index("Alpha things happened"), body.index("Beta things happened")
    assert alpha < body.index("Subject a1") < body.index("Subject a2") < beta
    assert beta < body.index("Subject b1")
    assert "https://labgov.example.edu/x/a1/" in body
    assert "https://labgov.example.edu/notifications/settings/" in body
    to_b = next(m for m in mail.outbox if m.to == [b.email])
    assert "Subject b1" in to_b.body and "Subject a1" not in to_b.body
    assert to_b.subject == "[labgov] Your daily digest: 1 notification"
    assert not Notification.objects.awaiting_email().exists()


def test_a_second_run_sends_nothing(db, test_kinds):
    a = UserFactory()
    _notify([a], "test.alpha", "a1")
    send_digests.delay()
    assert send_digests.delay().get() == 0
    assert digest_send(recipient_id=a.pk) == 0
    assert len(mail.outbox) == 1


def test_overlapping_runs_do_not_send_twice(db, test_kinds, monkeypatch):
    a = UserFactory()
    _notify([a], "test.alpha", "a1")
    real_send_mail = services.send_mail
    inner = []

    def send_while_another_run_starts(**kwargs):
        # A second run starting while the first is still sending finds the rows claimed.
        inner.append(digest_send(recipient_id=a.pk))
        return real_send_mail(**kwargs)

    monkeypatch.setattr(services, "send_mail", send_while_another_run_starts)
    assert digest_send(recipient_id=a.pk) == 1
    assert inner == [0]
    assert len(mail.outbox) == 1


def test_a_failed_send_releases_the_rows_for_the_retry(db, test_kinds, monkeypatch):
    a = UserFactory()
    _notify([a], "test.alpha", "a1")
    _notify([a], "test.beta", "b1")

    def broken(**kwargs):
        raise smtplib.SMTPServerDisconnected("gone")

    monkeypatch.setattr(services, "send_mail", broken)
    with pytest.raises(smtplib.SMTPException):
        digest_send(recipient_id=a.pk)
    assert Notification.objects.awaiting_email().count() == 2
    assert set(Notification.objects.values_list("email_claim", flat=True)) == {""}
    monkeypatch.undo()
    assert digest_send(recipient_id=a.pk) == 2
    assert len(mail.outbox) == 1


def test_the_task_retries_after_an_smtp_error(db, test_kinds, monkeypatch, eager_retries):
    a = UserFactory()
    _notify([a], "test.alpha", "a1")
    real_send_mail = services.send_mail
    calls = []

    def flaky(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise smtplib.SMTPServerDisconnected("gone")
        return real_send_mail(**kwargs)

    monkeypatch.setattr(services, "send_mail", flaky)
    send_digests.delay()
    assert len(calls) == 2
    assert len(mail.outbox) == 1
    assert not Notification.objects.awaiting_email().exists()


def test_nobody_without_an_email_address_is_mailed(db, test_kinds):
    a = UserFactory(email="")
    _notify([a], "test.alpha", "a1")
    assert digest_send(recipient_id=a.pk) == 0
    assert not mail.outbox


def test_recipients_are_the_people_with_something_waiting(db, test_kinds):
    a, b, c = UserFactory(), UserFactory(), UserFactory()
    _notify([a], "test.alpha", "a1")
    _notify([b], "test.alpha", "b1", severity="critical")
    _notify([c], "test.alpha", "c1")
    Notification.objects.filter(recipient=c).update(email_skipped=True)
    assert digest_recipient_ids() == [a.pk]


def test_the_digest_runs_daily_at_the_configured_hour():
    entry = settings.CELERY_BEAT_SCHEDULE["notifications-digest"]
    assert entry["task"] == "labgov.notifications.tasks.send_digests"
    assert entry["schedule"].hour == {settings.LABGOV_DIGEST_HOUR_UTC} == {7}
    assert entry["schedule"].minute == {0}


def test_the_management_command_sends_the_digests(db, test_kinds):
    from django.core.management import call_command

    a = UserFactory()
    _notify([a], "test.alpha", "a1")
    call_command("send_digests", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert len(mail.outbox) == 1


def test_a_critical_email_that_never_went_out_joins_the_digest_later(db, test_kinds):
    """Its own email failed every retry (here: was never sent): while it may still be on its
    way the digest leaves it alone; two hours on, the digest carries it."""
    import datetime as dt

    import time_machine
    from django.utils import timezone

    a = UserFactory()
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        _notify([a], "test.alpha", "c1", severity="critical")  # on_commit never ran
        assert digest_send(recipient_id=a.pk) == 0
        clock.shift(dt.timedelta(hours=2, minutes=1))
        assert digest_send(recipient_id=a.pk) == 1
    assert "Subject c1" in mail.outbox[0].body
    assert digest_send(recipient_id=a.pk) == 0
