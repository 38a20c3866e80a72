"""Emails are sent at most once, and never lost silently: a real Celery worker killed (-9)
after the SMTP server has the message but before it answered does not send it again, and the
notification then says its email is not confirmed."""

import datetime as dt
import time

import pytest
from django.urls import reverse
from django.utils import timezone

from labgov.notifications.kinds import Severity
from labgov.notifications.models import Notification
from labgov.notifications.services import emails_unconfirmed_mark
from labgov.ops.metrics import StateCollector


def _wait_for(condition, worker, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.05)


@pytest.mark.celery_worker
@pytest.mark.usefixtures("postgres")
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_send_never_sends_twice_and_says_so(
    world, worker_process, smtp_stub, client_for
):
    smtp_stub.reset()
    smtp_stub.hold = True
    notification = Notification.objects.create(
        recipient=world.member,
        kind="provisioning.fail",
        severity=Severity.CRITICAL,
        subject="Your pod could not be created",
        dedupe_key="kill-test",
    )
    runs_before = worker_process.tail().count("send_notification_email[")
    worker_process.send("labgov.notifications.tasks.send_notification_email", notification.pk)
    assert smtp_stub.data_received.wait(60), worker_process.tail()
    worker_process.kill_child()  # the server has the message; labgov never hears back
    smtp_stub.release.set()

    # Redelivered at once (acks_late, reject_on_worker_lost): the row is still claimed, so
    # the new child sends nothing.
    def redelivered_and_done():
        log = worker_process.tail()
        return log.count("send_notification_email[") >= runs_before + 3 and log.rstrip().endswith(
            "False"
        )

    _wait_for(redelivered_and_done, worker_process)
    assert len(smtp_stub.messages) == 1
    notification.refresh_from_db()
    assert notification.emailed_at is not None and notification.email_sent_at is None

    # The sweep (every 15 minutes) says so on the notification, in the list and in /metrics.
    assert emails_unconfirmed_mark(now=timezone.now()) == 0  # not yet: it may be sending
    assert emails_unconfirmed_mark(now=timezone.now() + dt.timedelta(minutes=31)) == 1
    page = client_for(world.member).get(reverse("notifications:list"))
    assert "Email not confirmed" in page.content.decode()
    unconfirmed = next(
        m for m in StateCollector().collect() if m.name == "labgov_notification_emails_unconfirmed"
    )
    assert unconfirmed.samples[0].value == 1
    assert len(smtp_stub.messages) == 1


def test_a_confirmed_email_is_never_reported(world):
    notification = Notification.objects.create(
        recipient=world.member,
        kind="x",
        subject="s",
        dedupe_key="ok",
        emailed_at=timezone.now() - dt.timedelta(hours=2),
        email_claim="t",
        email_sent_at=timezone.now() - dt.timedelta(hours=2),
    )
    assert emails_unconfirmed_mark() == 0
    notification.refresh_from_db()
    assert notification.email_problem == ""


def test_a_webhook_post_whose_worker_died_is_marked_failed_not_posted_again(world):
    from labgov.notifications.models import LabWebhook, WebhookDelivery

    webhook = LabWebhook.objects.create(
        lab=world.lab, url_encrypted="x", url_host="example.org", url_last4="abcd"
    )
    claimed = timezone.now() - dt.timedelta(minutes=31)
    stuck = WebhookDelivery.objects.create(
        webhook=webhook, dedupe_key="a", payload={}, status="sending", sending_since=claimed
    )
    recent = WebhookDelivery.objects.create(
        webhook=webhook, dedupe_key="b", payload={}, status="sending", sending_since=timezone.now()
    )
    emails_unconfirmed_mark()
    stuck.refresh_from_db()
    recent.refresh_from_db()
    assert stuck.status == "failed" and "may not have arrived" in stuck.last_error
    assert recent.status == "sending"
