import logging
from collections.abc import Iterable

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from labgov.notifications.models import Notification

log = logging.getLogger(__name__)


def notify(
    *,
    recipients: Iterable,
    kind: str,
    subject: str,
    body: str = "",
    url: str = "",
    dedupe_key: str,
    severity: str = "info",
    lab=None,
) -> list[int]:
    """Notify each recipient once per dedupe key: in the app, and by email after commit.
    Returns the ids of the notifications created now (none for ones that existed)."""
    people = {r.pk: r for r in recipients if r is not None and r.pk is not None}
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
    Notification.objects.bulk_create(
        [
            Notification(
                recipient_id=pk,
                kind=kind,
                subject=subject[:200],
                body=body,
                url=url[:500],
                dedupe_key=dedupe_key,
                created_at=now,
            )
            for pk in fresh
        ],
        # A concurrent notify of the same event may have won the race: that is fine.
        ignore_conflicts=True,
    )
    ids = list(
        Notification.objects.filter(
            dedupe_key=dedupe_key, recipient_id__in=fresh, created_at=now
        ).values_list("pk", flat=True)
    )
    from labgov.notifications.tasks import send_notification_email

    for pk in ids:
        transaction.on_commit(lambda pk=pk: send_notification_email.delay(pk), robust=True)
    return ids


def notification_email_send(*, notification_id: int) -> bool:
    """Send one notification's email, at most once: the row is claimed with a conditional
    UPDATE before sending, and released again only if sending fails."""
    notification = (
        Notification.objects.select_related("recipient").filter(pk=notification_id).first()
    )
    if notification is None or not notification.recipient.email:
        return False
    claimed_at = timezone.now()
    claimed = Notification.objects.filter(pk=notification_id, emailed_at__isnull=True).update(
        emailed_at=claimed_at
    )
    if claimed != 1:
        return False
    link = f"{settings.LABGOV_BASE_URL}{notification.url}" if notification.url else ""
    body = notification.body + (f"\n\n{link}" if link else "")
    try:
        send_mail(
            subject=f"[labgov] {notification.subject}",
            message=body,
            from_email=None,
            recipient_list=[notification.recipient.email],
        )
    except Exception:
        Notification.objects.filter(pk=notification_id, emailed_at=claimed_at).update(
            emailed_at=None
        )
        raise
    return True


def notification_mark_read(*, user, notification: Notification) -> None:
    Notification.objects.filter(pk=notification.pk, recipient=user, read_at__isnull=True).update(
        read_at=timezone.now()
    )


def notifications_mark_all_read(*, user) -> int:
    return Notification.objects.filter(recipient=user, read_at__isnull=True).update(
        read_at=timezone.now()
    )
