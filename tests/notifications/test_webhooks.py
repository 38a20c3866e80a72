"""A lab's webhook: one Slack-compatible post per event, at most once, retried when the other
side is down, and its URL kept secret."""

import json

import pytest

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.notifications.models import LabWebhook, WebhookDelivery
from labgov.notifications.services import (
    WEBHOOK_MAX_ATTEMPTS,
    notify,
    webhook_deliver,
    webhook_save,
    webhook_send_test,
)


@pytest.fixture
def webhook(world, hook_server):
    return webhook_save(actor=world.lab_admin, lab=world.lab, url=hook_server.url)


def _notify(world, key="e1", severity="warning", lab="lab", **kw):
    return notify(
        recipients=[world.member, world.lab_admin],
        kind="test.event",
        subject="Budget <almost> spent & more",
        body="Vision has 5% left.",
        url="/spend/labs/1/",
        dedupe_key=key,
        severity=severity,
        lab=getattr(world, lab) if lab else None,
        **kw,
    )


def test_one_post_per_event_in_slack_shape(
    world, webhook, hook_server, settings, django_capture_on_commit_callbacks
):
    settings.LABGOV_BASE_URL = "https://labgov.example.edu"
    with django_capture_on_commit_callbacks(execute=True):
        _notify(world)
    assert len(hook_server.posts) == 1
    payload = hook_server.posts[0]
    assert payload["text"] == "[Warning] Budget <almost> spent & more"
    section = payload["blocks"][0]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert section["text"]["text"] == (
        "*Budget &lt;almost&gt; spent &amp; more*\nVision has 5% left.\n"
        "<https://labgov.example.edu/spend/labs/1/|Open in labgov>"
    )
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "sent" and delivery.attempts == 1 and delivery.sent_at
    assert delivery.dedupe_key == "e1"


def test_renotifying_the_same_event_does_not_post_again(
    world, webhook, hook_server, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        _notify(world)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        _notify(world)
    assert callbacks == []
    assert len(hook_server.posts) == 1
    assert webhook_deliver(delivery_id=WebhookDelivery.objects.get().pk) is False
    assert len(hook_server.posts) == 1


def test_below_the_minimum_severity_nothing_is_posted(world, webhook, hook_server):
    _notify(world, severity="info")
    assert not WebhookDelivery.objects.exists()


def test_no_lab_or_inactive_webhook_posts_nothing(world, webhook, hook_server):
    _notify(world, key="nolab", lab=None)
    _notify(world, key="other", lab="other_lab")
    webhook_save(actor=world.lab_admin, lab=world.lab, is_active=False)
    _notify(world, key="off")
    assert not WebhookDelivery.objects.exists()


def test_the_event_reaches_the_webhook_even_with_nobody_to_notify(world, webhook, hook_server):
    notify(recipients=[], kind="t", subject="s", dedupe_key="k", severity="critical", lab=world.lab)
    assert WebhookDelivery.objects.count() == 1


def test_a_500_is_retried_then_sent(
    world, webhook, hook_server, eager_retries, django_capture_on_commit_callbacks
):
    hook_server.fail_next = 1
    with django_capture_on_commit_callbacks(execute=True):
        _notify(world)
    assert len(hook_server.posts) == 1
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "sent" and delivery.attempts == 2


def test_a_429_is_retried_and_a_400_fails_at_once(world, webhook, hook_server, eager_retries):
    from labgov.notifications.tasks import deliver_webhook

    _notify(world, key="a")
    _notify(world, key="b")
    a, b = (WebhookDelivery.objects.get(dedupe_key=k) for k in "ab")
    hook_server.fail_next, hook_server.fail_status = 1, 429
    deliver_webhook.delay(a.pk)
    hook_server.fail_next, hook_server.fail_status = 1, 400
    deliver_webhook.delay(b.pk)
    a.refresh_from_db(), b.refresh_from_db()
    assert (a.status, a.attempts) == ("sent", 2)
    assert (b.status, b.attempts) == ("failed", 1)
    assert b.last_error == "127.0.0.1 answered HTTP 400 Bad Request"


def test_it_gives_up_in_words_after_the_last_attempt(
    world, webhook, hook_server, eager_retries, django_capture_on_commit_callbacks
):
    hook_server.fail_next = 100
    with django_capture_on_commit_callbacks(execute=True):
        _notify(world)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "failed" and delivery.attempts == WEBHOOK_MAX_ATTEMPTS
    assert delivery.last_error == (
        "127.0.0.1 answered HTTP 500 Internal Server Error "
        f"(gave up after {WEBHOOK_MAX_ATTEMPTS} attempts)"
    )
    assert hook_server.fail_next == 100 - WEBHOOK_MAX_ATTEMPTS


def test_an_unreachable_webhook_is_retried_and_never_names_the_url(world, hook_server):
    hook = webhook_save(actor=world.lab_admin, lab=world.lab, url=hook_server.url)
    hook_server.close()  # nothing listens on the port any more
    _notify(world)
    delivery = WebhookDelivery.objects.get(webhook=hook)
    from labgov.notifications.services import WebhookTransientError

    with pytest.raises(WebhookTransientError):
        webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 1
    assert delivery.last_error.startswith("Could not reach 127.0.0.1: ConnectError")
    assert "secretXYZ9" not in delivery.last_error


def test_a_delivery_being_sent_is_not_sent_by_another_worker(world, webhook, hook_server):
    _notify(world)
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status="sending")
    assert webhook_deliver(delivery_id=delivery.pk) is False
    assert hook_server.posts == []


def test_the_url_is_stored_encrypted_shown_masked_and_audited_by_host_only(
    world, webhook, hook_server
):
    assert "secretXYZ9" not in webhook.url_encrypted
    assert webhook.url_display == "127.0.0.1 …XYZ9"
    webhook_save(actor=world.inst_admin, lab=world.lab, url=hook_server.url + "0")
    events = list(AuditEvent.objects.filter(action__startswith="lab_webhook.").order_by("id"))
    assert [e.action for e in events] == ["lab_webhook.create", "lab_webhook.update"]
    assert events[0].after["url_host"] == "127.0.0.1"
    assert events[1].note == "URL replaced"
    for event in events:
        recorded = json.dumps([event.before, event.after, event.note, event.target_repr])
        assert "secretXYZ9" not in recorded and "/services/" not in recorded


def test_saving_unchanged_settings_records_nothing(world, webhook, hook_server):
    webhook_save(actor=world.lab_admin, lab=world.lab, url=hook_server.url)
    webhook_save(actor=world.lab_admin, lab=world.lab)
    assert AuditEvent.objects.filter(action__startswith="lab_webhook.").count() == 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "Enter the webhook's URL."),
        ("http://hooks.example.com/x", "must use https://"),
        ("ftp://hooks.example.com/x", "must start with https://"),
        ("https:///nohost", "must start with https://"),
        ("https://hooks.example.com:99999/x", "does not look like"),
        ("https://hooks.example.com/a b", "does not look like"),
    ],
)
def test_bad_urls_are_refused(world, url, message):
    with pytest.raises(DomainError, match=message) as caught:
        webhook_save(actor=world.lab_admin, lab=world.lab, url=url)
    assert caught.value.field == "url"
    assert not LabWebhook.objects.exists()


@pytest.mark.parametrize(
    "url",
    ["https://hooks.slack.com/services/T/B/x", "http://localhost:9000/h", "http://127.0.0.1/h"],
)
def test_good_urls_are_taken(world, url, fake_dns):
    fake_dns.table["hooks.slack.com"] = ["54.161.77.20"]
    assert webhook_save(actor=world.lab_admin, lab=world.lab, url=url).url_host in url


def test_plain_http_only_to_the_hosts_allowed_for_it(world, settings, fake_dns):
    fake_dns.table["hooks.internal.test"] = ["10.0.0.5"]
    settings.LABGOV_WEBHOOK_HTTP_HOSTS = ["hooks.internal.test"]
    hook = webhook_save(actor=world.lab_admin, lab=world.lab, url="http://hooks.internal.test/x")
    assert hook.url_host == "hooks.internal.test"
    settings.LABGOV_WEBHOOK_HTTP_HOSTS = []
    with pytest.raises(DomainError, match="must use https://"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url="http://127.0.0.1:8000/x")


def test_send_test_message(world, webhook, hook_server):
    ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
    assert ok and message == "127.0.0.1 accepted the test message."
    assert hook_server.posts[0]["text"].startswith("[Info] Test message from labgov for Vision")
    hook_server.fail_next = 1
    ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
    assert not ok and message == "127.0.0.1 answered HTTP 500 Internal Server Error"


@pytest.mark.parametrize(
    "url",
    [
        "https://10.1.2.3/hook",
        "https://192.168.0.9/h",
        "https://169.254.169.254/latest",
        "https://[::1]/h",
    ],
)
def test_private_addresses_are_refused(world, url, settings):
    settings.LABGOV_WEBHOOK_HTTP_HOSTS = []
    with pytest.raises(DomainError, match="private address"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url=url)


def test_a_host_that_turned_private_is_refused_before_posting(
    world, webhook, hook_server, settings
):
    """The receiver (on 127.0.0.1) was allowed when saved; once it is not, nothing is posted
    and the delivery fails in words."""
    settings.LABGOV_WEBHOOK_HTTP_HOSTS = []
    ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
    assert not ok and "private address" in message
    assert hook_server.posts == []
