import datetime as dt
import ipaddress
import logging
import re
import socket
import ssl
import uuid
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F, Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from labgov.accounts.models import Lab
from labgov.audit.services import audit_record
from labgov.core import dataversion
from labgov.core.crypto import SecretUnreadable, decrypt, encrypt
from labgov.core.errors import DomainError
from labgov.core.queue import task_enqueue_on_commit
from labgov.core.snapshots import snapshot
from labgov.core.tls import default_context
from labgov.notifications.kinds import (
    SEVERITY_RANK,
    Severity,
    all_kinds,
    get_kind,
    label_for,
    severity_at_least,
)
from labgov.notifications.models import (
    EmailChoice,
    LabWebhook,
    MutedKind,
    Notification,
    WebhookDelivery,
)

log = logging.getLogger(__name__)


def tidy(text: str) -> str:
    """A text put together from pieces reads as one: a sentence that ended in a note that
    ended in a full stop gets one full stop, not two, and no space before punctuation
    (an ellipsis "..." is left alone)."""
    text = _DOUBLE_STOP.sub(".", text)
    text = _STOP_AFTER_MARK.sub("", text)
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text)


_DOUBLE_STOP = re.compile(r"(?<!\.)\.\.(?!\.)")
_STOP_AFTER_MARK = re.compile(r"(?<=[!?])\.(?!\.)")
_SPACE_BEFORE_PUNCTUATION = re.compile(r"[ \t]+([.,;:!?])(?=\s|$)")


def notify(
    *,
    recipients: Iterable,
    kind: str,
    subject: str,
    body: str = "",
    url: str = "",
    dedupe_key: str,
    severity: str | None = None,
    lab: Lab | None = None,
    thread_key: str | None = None,
    quiet_recipients: Iterable = (),
) -> list[int]:
    """Notify each recipient once per dedupe key, in the app; email it after commit when it
    is critical or the person chose to have each notification emailed at once (the others
    wait for the daily digest); and when `lab` has an active webhook that wants this
    severity, post the event there once (not once per recipient).

    With `thread_key`, the events of one story (a retention case, an alert, a provisioning
    request) are one notification per person that each event updates: its words, kind and
    severity become the latest event's, it is unread again (`times_told` counts how often),
    and it is emailed again as above. The same event, or one whose words are those the
    person's notification shows already, tells nobody twice. `quiet_recipients` are people
    who follow the story but are not concerned by this event: a notification of the thread
    they have already shows the latest words, and stays as read as it was. The webhook
    still hears of every event.

    `severity` defaults to the kind's registered default ("info" for unregistered kinds).
    Returns the ids of the notifications created or updated now (none for ones that
    existed)."""
    severity = severity or get_kind(kind).default_severity
    if severity not in SEVERITY_RANK:
        raise ValueError(f"Unknown severity {severity!r}")
    subject, body, url = tidy(subject)[:200], tidy(body), url[:500]
    if lab is not None:
        _webhook_enqueue(
            lab=lab, severity=severity, subject=subject, body=body, url=url, dedupe_key=dedupe_key
        )
    people = {r.pk: r for r in recipients if r is not None and r.pk is not None}
    fields = dict(kind=kind, severity=severity, subject=subject, body=body, url=url)
    if thread_key is not None:
        quiet = {r.pk for r in quiet_recipients if r is not None and r.pk is not None}
        return _notify_thread(
            people=list(people),
            quiet=list(quiet - set(people)),
            lab=lab,
            dedupe_key=dedupe_key,
            thread_key=thread_key,
            **fields,
        )
    if not people:
        return []
    existing = set(
        Notification.objects.filter(dedupe_key=dedupe_key, recipient_id__in=people).values_list(
            "recipient_id", flat=True
        )
    )
    fresh = [pk for pk in people if pk not in existing]
    if not fresh:
        return []
    now = timezone.now()
    _create(fresh, dedupe_key=dedupe_key, created_at=now, lab=lab, **fields)
    ids = list(
        Notification.objects.filter(
            dedupe_key=dedupe_key, recipient_id__in=fresh, created_at=now
        ).values_list("pk", flat=True)
    )
    _email_now(severity, ids)
    return ids


def _create(people, **fields) -> None:
    # A concurrent notify of the same event may have won the race: that is fine.
    Notification.objects.bulk_create(
        [Notification(recipient_id=pk, **fields) for pk in people], ignore_conflicts=True
    )


def _email_now(severity: str, ids: list[int]) -> None:
    """Email at once what is critical, and everything of people who want each at once."""
    if not ids:
        return
    if severity != Severity.CRITICAL:
        ids = list(
            Notification.objects.filter(
                pk__in=ids, recipient__email_choice__delivery=EmailChoice.Delivery.IMMEDIATE
            ).values_list("pk", flat=True)
        )
    for pk in ids:
        task_enqueue_on_commit("labgov.notifications.tasks.send_notification_email", pk)


def _notify_thread(
    *, people, quiet, kind, severity, lab, subject, body, url, dedupe_key, thread_key
) -> list[int]:
    now = timezone.now()
    words = dict(kind=kind, severity=severity, subject=subject, body=body, url=url)
    thread = Notification.objects.filter(thread_key=thread_key)
    if quiet:
        thread.filter(recipient_id__in=quiet).exclude(subject=subject, body=body, url=url).update(
            **words
        )
    if not people:
        return []
    rows = thread.filter(recipient_id__in=people)
    existing = set(rows.values_list("recipient_id", flat=True))
    # Not the same event again, and not the words the person's notification shows already
    # (a plain UPDATE: a notify outside a transaction must work, and a race tells twice at
    # worst).
    told = rows.exclude(dedupe_key=dedupe_key).exclude(subject=subject, body=body)
    told_ids = list(told.values_list("pk", flat=True))
    Notification.objects.filter(pk__in=told_ids).update(
        **words,
        dedupe_key=dedupe_key,
        created_at=now,
        read_at=None,
        emailed_at=None,
        email_claim="",
        email_sent_at=None,
        email_problem="",
        email_skipped=False,
        times_told=F("times_told") + 1,
    )
    fresh = [pk for pk in people if pk not in existing]
    _create(fresh, lab=lab, dedupe_key=dedupe_key, thread_key=thread_key, created_at=now, **words)
    if fresh:
        told_ids += list(
            thread.filter(
                recipient_id__in=fresh, created_at=now, dedupe_key=dedupe_key
            ).values_list("pk", flat=True)
        )
    _email_now(severity, told_ids)
    return told_ids


def _link(url: str) -> str:
    return f"{settings.LABGOV_BASE_URL}{url}" if url else ""


def _one_line(text: str) -> str:
    # A subject is a mail header: a line break in it (a request titled "a\r\nBcc: x") would
    # make Django refuse the whole email, so every kind of line break becomes a space.
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _send_email(*, subject: str, body: str, to: str) -> None:
    """Every email labgov sends is built here."""
    send_mail(
        subject=f"[labgov] {_one_line(subject)}",
        message=body,
        from_email=None,
        recipient_list=[to],
    )


def _claim_token() -> str:
    return uuid.uuid4().hex


def _release(token: str) -> None:
    Notification.objects.filter(email_claim=token).update(emailed_at=None, email_claim="")


def _confirm(token: str) -> None:
    """The SMTP server accepted the email of these rows."""
    Notification.objects.filter(email_claim=token).update(email_sent_at=timezone.now())


# Longer than any one send can take (EMAIL_TIMEOUT for each SMTP step), so a row still
# unconfirmed after this lost its sender mid-send.
UNCONFIRMED_AFTER = dt.timedelta(minutes=30)
UNCONFIRMED_PROBLEM = (
    "labgov stopped while emailing this (its worker was killed or restarted), so the email "
    "may not have arrived. It is not sent again, so that nobody gets it twice."
)


WEBHOOK_UNCONFIRMED = (
    "labgov stopped while posting this (its worker was killed or restarted), so it may not "
    "have arrived. It is not posted again, so that the channel never gets it twice."
)


def emails_unconfirmed_mark(*, now: dt.datetime | None = None) -> int:
    """Emails (and webhook posts) whose sender died between claiming and the server's answer:
    say so on each (the notification list, the lab's deliveries, /metrics), never send them
    again. Returns how many emails it marked."""
    now = now or timezone.now()
    WebhookDelivery.objects.filter(
        status=WebhookDelivery.Status.SENDING, sending_since__lt=now - UNCONFIRMED_AFTER
    ).update(status=WebhookDelivery.Status.FAILED, last_error=WEBHOOK_UNCONFIRMED)
    return (
        Notification.objects.filter(
            emailed_at__lt=now - UNCONFIRMED_AFTER, email_sent_at__isnull=True, email_problem=""
        )
        .exclude(email_claim="")
        .update(email_problem=UNCONFIRMED_PROBLEM)
    )


def _skip_muted(recipient_id: int, rows) -> set[str]:
    """Mark the recipient's due notifications of muted kinds as never to be emailed."""
    muted = set(MutedKind.objects.filter(user_id=recipient_id).values_list("kind", flat=True))
    if muted:
        rows.filter(kind__in=muted).update(email_skipped=True)
    return muted


def _recipients_institutions(**match) -> frozenset[int]:
    """The institutions of a person's pages (access.institutions_of): what marking their
    notifications emailed may show on."""
    from labgov.accounts import access
    from labgov.accounts.models import User

    person = User.objects.filter(**match).first()
    return access.institutions_of(person) if person is not None else frozenset()


@dataversion.scoped(
    lambda *, notification_id, **_: _recipients_institutions(notifications__pk=notification_id)
)
def notification_email_send(*, notification_id: int) -> bool:
    """Send one notification's email, at most once: the row is claimed with a conditional
    UPDATE before sending, released again only if sending fails, and confirmed once the SMTP
    server accepted it (a claim never confirmed is reported by `emails_unconfirmed_mark`)."""
    notification = (
        Notification.objects.select_related("recipient").filter(pk=notification_id).first()
    )
    if notification is None or not notification.recipient.email:
        return False
    due = Notification.objects.filter(pk=notification_id).awaiting_email()
    if notification.kind in _skip_muted(notification.recipient_id, due):
        return False
    token = _claim_token()
    if due.update(emailed_at=timezone.now(), email_claim=token) != 1:
        return False
    link = _link(notification.url)
    body = notification.body + (f"\n\n{link}" if link else "")
    try:
        _send_email(subject=notification.subject, body=body, to=notification.recipient.email)
    except Exception:
        _release(token)
        raise
    _confirm(token)
    return True


# A notification emailed at once (critical, or its person wants each at once) that is still
# unsent this long after (its email failed every retry) goes out with the next digest
# instead of never.
CRITICAL_FALLBACK = dt.timedelta(hours=2)


def _for_digest(notifications):
    """Waiting notifications the digest sends: all but those still in their own email's
    hands."""
    recent = timezone.now() - CRITICAL_FALLBACK
    at_once = Q(severity=Severity.CRITICAL) | Q(
        recipient__email_choice__delivery=EmailChoice.Delivery.IMMEDIATE
    )
    return notifications.awaiting_email().exclude(at_once & Q(created_at__gt=recent))


def digest_recipient_ids() -> list[int]:
    """People with notifications waiting for the digest (critical ones are sent at once)."""
    return list(
        _for_digest(Notification.objects.all())
        .values_list("recipient_id", flat=True)
        .distinct()
        .order_by("recipient_id")
    )


@dataversion.scoped(lambda *, recipient_id, **_: _recipients_institutions(pk=recipient_id))
def digest_send(*, recipient_id: int) -> int:
    """Email one person every waiting, unmuted, non-critical notification in one message,
    grouped by kind. The rows are claimed in one conditional UPDATE before sending, so an
    overlapping run finds nothing to send; a failed send releases them for the retry.
    Returns how many notifications the email listed."""
    from labgov.accounts.models import User

    recipient = User.objects.filter(pk=recipient_id).first()
    if recipient is None or not recipient.email:
        return 0
    due = _for_digest(Notification.objects.filter(recipient_id=recipient_id))
    muted = _skip_muted(recipient_id, due)
    token = _claim_token()
    if not due.exclude(kind__in=muted).update(emailed_at=timezone.now(), email_claim=token):
        return 0
    rows = list(Notification.objects.filter(email_claim=token).order_by("created_at", "id"))
    groups: dict[str, list[Notification]] = {}
    for row in rows:
        groups.setdefault(row.kind, []).append(row)
    sections = sorted(
        (
            {
                "label": label_for(kind),
                "items": [{"n": n, "link": _link(n.url)} for n in items],
            }
            for kind, items in groups.items()
        ),
        key=lambda s: s["label"].lower(),
    )
    count = len(rows)
    try:
        _send_email(
            subject=f"Your daily digest: {count} notification{'s' if count > 1 else ''}",
            body=render_to_string(
                "notifications/digest_email.txt",
                {
                    "recipient": recipient,
                    "sections": sections,
                    "count": count,
                    "settings_link": _link(reverse("notifications:settings")),
                },
            ),
            to=recipient.email,
        )
    except Exception:
        _release(token)
        raise
    _confirm(token)
    return count


def notification_mark_read(*, user, notification: Notification) -> None:
    Notification.objects.filter(pk=notification.pk, recipient=user, read_at__isnull=True).update(
        read_at=timezone.now()
    )


def notifications_mark_all_read(*, user) -> int:
    return Notification.objects.filter(recipient=user, read_at__isnull=True).update(
        read_at=timezone.now()
    )


@transaction.atomic
def muted_kinds_save(*, actor, kinds: Iterable[str]) -> set[str]:
    """Replace the kinds a person does not want emailed. A personal preference, not
    governance: not audited."""
    wanted = set(kinds)
    known = {k.key for k in all_kinds()}
    unknown = wanted - known
    if unknown:
        raise DomainError(f"Unknown kinds of notification: {', '.join(sorted(unknown))}.")
    MutedKind.objects.filter(user=actor).exclude(kind__in=wanted).delete()
    MutedKind.objects.bulk_create(
        [MutedKind(user=actor, kind=kind) for kind in sorted(wanted)], ignore_conflicts=True
    )
    return wanted


def email_delivery_save(*, actor, delivery: str) -> str:
    """How a person wants their notifications emailed: each at once, or in the daily digest
    (critical ones at once either way). A personal preference, not governance: not
    audited."""
    if delivery not in EmailChoice.Delivery.values:
        raise DomainError("Choose at once or the daily digest.", field="delivery")
    EmailChoice.objects.update_or_create(
        user=actor, defaults={"delivery": delivery, "updated_at": timezone.now()}
    )
    return delivery


def email_delivery_of(user) -> str:
    choice = EmailChoice.objects.filter(user=user).values_list("delivery", flat=True).first()
    return choice or EmailChoice.Delivery.DIGEST


# Webhooks.

WEBHOOK_AUDIT_FIELDS = ["lab_id", "url_host", "is_active", "min_severity"]
WEBHOOK_MAX_ATTEMPTS = 5


class WebhookTransientError(Exception):
    """The webhook could not take the message now (network, 5xx, 429): try again later."""


class WebhookAddressRefused(Exception):
    """The webhook's host is on a private network, or cannot be resolved: labgov does not
    post there."""


class WebhookHostUnresolvable(WebhookAddressRefused):
    """The webhook's host name does not resolve (now: a delivery retries later)."""


# NAT64 prefixes (RFC 6052's well-known one and RFC 8215's local-use one): the last 32 bits
# are the IPv4 address the gateway connects to.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: IPv4-mapped ::ffff:a.b.c.d,
    IPv4-compatible ::a.b.c.d, NAT64, 6to4 (2002::/16) and Teredo (server and client)."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in _IPV4_COMPATIBLE or any(ip in net for net in _NAT64):
        found.append(low32)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def _is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A public unicast address: multicast ones (224.0.0.0/4, ff00::/8) count as global to
    Python, but a post to one reaches whatever listens on the local network."""
    if not ip.is_global or ip.is_multicast:
        return False
    if ip.version == 6:
        return all(inner.is_global for inner in _embedded_ipv4(ip))
    return True


def _resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to now (tests replace socket.getaddrinfo)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0].split("%")[0] for info in infos))


def _checked_address(host: str, port: int) -> str:
    """Resolve `host` once and return the address to connect to, so the name cannot point
    elsewhere between the check and the connection (DNS rebinding). A lab admin must not be
    able to make labgov post into its own network: a host that does not resolve, or that
    resolves to any loopback, private, link-local or otherwise non-public address (IPv6 forms
    judged by the IPv4 address inside them) is refused, unless it is named in
    LABGOV_WEBHOOK_HTTP_HOSTS (a local test receiver). Checked when the webhook is saved and
    again before every post."""
    try:
        addresses = _resolve(host, port)
    except (OSError, UnicodeError):
        addresses = []
    if not addresses:
        raise WebhookHostUnresolvable(f"{host} could not be resolved; check the webhook's URL.")
    if host not in settings.LABGOV_WEBHOOK_HTTP_HOSTS:
        for address in addresses:
            ip = ipaddress.ip_address(address)
            if not _is_public(ip):
                what = "a multicast" if ip.is_multicast else "a private"
                raise WebhookAddressRefused(
                    f"{host} is {what} address ({ip}); labgov posts only to public hosts."
                )
    return addresses[0]


def _clean_webhook_url(url: str) -> tuple[str, str]:
    """The URL and its host, or a DomainError saying what is wrong with it."""
    url = (url or "").strip()
    if not url:
        raise DomainError("Enter the webhook's URL.", field="url")
    if len(url) > 2000 or any(c.isspace() for c in url):
        raise DomainError("That does not look like a webhook URL.", field="url")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise DomainError("That does not look like a webhook URL.", field="url") from None
    if parts.scheme not in ("https", "http") or not host:
        raise DomainError("The webhook URL must start with https:// and name a host.", field="url")
    if parts.scheme == "http" and host not in settings.LABGOV_WEBHOOK_HTTP_HOSTS:
        raise DomainError("The webhook URL must use https://.", field="url")
    try:
        _checked_address(host, parts.port or (443 if parts.scheme == "https" else 80))
    except WebhookAddressRefused as exc:
        raise DomainError(str(exc), field="url") from None
    return url, host


@transaction.atomic
def webhook_save(
    *,
    actor,
    lab: Lab,
    url: str | None = None,
    is_active: bool = True,
    min_severity: str = Severity.WARNING,
) -> LabWebhook:
    """Create or change a lab's webhook. An empty url keeps the stored one. Audited, with the
    URL's host only."""
    if min_severity not in SEVERITY_RANK:
        raise DomainError("Choose a severity.", field="min_severity")
    webhook = LabWebhook.objects.select_for_update().filter(lab=lab).first()
    if webhook is None and not url:
        raise DomainError("Enter the webhook's URL.", field="url")
    before = snapshot(webhook, WEBHOOK_AUDIT_FIELDS) if webhook else None
    if webhook is None:
        webhook = LabWebhook(lab=lab, created_by=actor if actor.is_authenticated else None)
    url_changed = False
    if url:
        clean, host = _clean_webhook_url(url)
        url_changed = webhook.pk is None or decrypt(webhook.url_encrypted) != clean
        webhook.url_encrypted = encrypt(clean)
        webhook.url_host = host
        webhook.url_last4 = clean[-4:]
    webhook.is_active = is_active
    webhook.min_severity = min_severity
    after = snapshot(webhook, WEBHOOK_AUDIT_FIELDS)
    if before is not None and after == before and not url_changed:
        return webhook
    webhook.updated_at = timezone.now()
    webhook.save()
    audit_record(
        actor=actor,
        action="lab_webhook.create" if before is None else "lab_webhook.update",
        target=webhook,
        institution_id=lab.institution_id,
        before=before,
        after=after,
        note="URL replaced" if before is not None and url_changed else "",
    )
    return webhook


def _mrkdwn(text: str) -> str:
    # Slack reads &, < and > as markup: escaped, they are shown as typed.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(
    *, subject: str, body: str = "", url: str = "", severity: str, lab_name: str
) -> dict:
    """Slack-compatible JSON: `text` for notifications and clients without blocks, and one
    section block with the subject, the body and a link to labgov."""
    lines = [f"*{_mrkdwn(subject)}*"]
    if body:
        lines.append(_mrkdwn(body))
    link = _link(url)
    if link.startswith(("https://", "http://")):
        lines.append(f"<{link}|Open in labgov>")
    label = Severity(severity).label
    return {
        "text": f"[{label}] {subject}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:3000]}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": _mrkdwn(f"{label} · {lab_name}")}],
            },
        ],
    }


def _webhook_enqueue(
    *, lab: Lab, severity: str, subject: str, body: str, url: str, dedupe_key: str
) -> None:
    webhook = LabWebhook.objects.filter(lab=lab, is_active=True).first()
    if webhook is None or not severity_at_least(severity, webhook.min_severity):
        return
    delivery, created = WebhookDelivery.objects.get_or_create(
        webhook=webhook,
        dedupe_key=dedupe_key,
        defaults={
            "payload": slack_payload(
                subject=subject, body=body, url=url, severity=severity, lab_name=lab.name
            )
        },
    )
    if created:
        task_enqueue_on_commit("labgov.notifications.tasks.deliver_webhook", delivery.pk)


def _tls_context() -> ssl.SSLContext | bool:
    return default_context()  # httpx's default trust, made once (tests trust their own CA here)


def _post(webhook: LabWebhook, payload: dict) -> httpx.Response:
    """Connect to the address that was checked, not to whatever the name resolves to a moment
    later: the URL is rewritten to that address, while the Host header and, for https, the TLS
    server name (SNI, and so the certificate check) keep the host's name. Proxies from the
    environment are ignored, since a proxy would resolve the name itself."""
    url = httpx.URL(decrypt(webhook.url_encrypted))
    host = url.raw_host.decode("ascii")
    address = _checked_address(host, url.port or (443 if url.scheme == "https" else 80))
    timeout = httpx.Timeout(settings.LABGOV_WEBHOOK_TIMEOUT_SECONDS, connect=5.0)
    with httpx.Client(
        timeout=timeout, follow_redirects=False, trust_env=False, verify=_tls_context()
    ) as client:
        return client.post(
            url.copy_with(host=address),
            json=payload,
            headers={"Host": url.netloc.decode("ascii")},
            extensions={"sni_hostname": host} if url.scheme == "https" else {},
        )


def _network_error(webhook: LabWebhook, exc: Exception) -> str:
    # httpx's messages do not carry the URL, but make sure the secret part never leaks, also
    # from the URL rewritten to the checked address.
    url = decrypt(webhook.url_encrypted)
    parts = urlsplit(url)
    secret = parts.path + (f"?{parts.query}" if parts.query else "")
    detail = str(exc).replace(url, webhook.url_host)
    if len(secret) > 1:
        detail = detail.replace(secret, "/…")
    return f"Could not reach {webhook.url_host}: {type(exc).__name__}" + (
        f" ({detail})" if detail else ""
    )


def _refusal(webhook: LabWebhook, response: httpx.Response) -> str:
    # The status only: what the receiving server wrote is not labgov's to show (a lab admin
    # could read back any server's answer through it).
    return (
        f"{webhook.url_host} answered HTTP {response.status_code} {response.reason_phrase}".strip()
    )


@dataversion.scoped(
    lambda *, delivery_id, **_: WebhookDelivery.objects.filter(pk=delivery_id).values_list(
        "webhook__lab__institution_id", flat=True
    )
)
def webhook_deliver(*, delivery_id: int) -> bool:
    """POST one delivery, at most once: claimed (pending → sending) with a conditional UPDATE
    first. Network errors, 5xx and 429 put it back to pending and raise WebhookTransientError
    for the task to retry, until the last attempt marks it failed; other answers fail it at
    once. Returns whether it was sent now."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None:
        return False
    claimed = WebhookDelivery.objects.filter(
        pk=delivery_id, status=WebhookDelivery.Status.PENDING
    ).update(
        status=WebhookDelivery.Status.SENDING,
        attempts=F("attempts") + 1,
        sending_since=timezone.now(),
    )
    if claimed != 1:
        return False
    webhook = delivery.webhook
    delivery.refresh_from_db(fields=["attempts"])
    attempts = delivery.attempts
    rows = WebhookDelivery.objects.filter(pk=delivery_id, status=WebhookDelivery.Status.SENDING)
    error, transient = "", False
    if not webhook.is_active:
        rows.update(
            status=WebhookDelivery.Status.FAILED,
            last_error="The webhook was turned off before this was sent.",
        )
        return False
    try:
        response = _post(webhook, delivery.payload)
    except WebhookHostUnresolvable as exc:
        error, transient = str(exc), True  # DNS may be down for a moment
    except (SecretUnreadable, WebhookAddressRefused) as exc:
        error = str(exc)
    except httpx.HTTPError as exc:
        error, transient = _network_error(webhook, exc), True
    else:
        if response.is_success:
            rows.update(status=WebhookDelivery.Status.SENT, sent_at=timezone.now(), last_error="")
            return True
        error = _refusal(webhook, response)
        transient = response.status_code >= 500 or response.status_code == 429
    if transient and attempts < WEBHOOK_MAX_ATTEMPTS:
        rows.update(status=WebhookDelivery.Status.PENDING, last_error=error)
        log.warning("webhook delivery %s: %s (will retry)", delivery_id, error)
        raise WebhookTransientError(error)
    if transient:
        error = f"{error} (gave up after {attempts} attempts)"
    rows.update(status=WebhookDelivery.Status.FAILED, last_error=error)
    log.warning("webhook delivery %s failed: %s", delivery_id, error)
    return False


def webhook_send_test(*, actor, webhook: LabWebhook) -> tuple[bool, str]:
    """Post a test message now and say in words how it went."""
    payload = slack_payload(
        subject=f"Test message from labgov for {webhook.lab.name}",
        body=f"Sent by {actor}. Notifications of severity {webhook.min_severity} and above "
        "will arrive here.",
        severity=Severity.INFO,
        lab_name=webhook.lab.name,
    )
    try:
        response = _post(webhook, payload)
    except (SecretUnreadable, WebhookAddressRefused) as exc:
        return False, str(exc)
    except httpx.HTTPError as exc:
        return False, _network_error(webhook, exc)
    if response.is_success:
        return True, f"{webhook.url_host} accepted the test message."
    return False, _refusal(webhook, response)
