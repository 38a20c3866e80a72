import smtplib

from celery import shared_task

from labgov.notifications.services import WebhookTransientError

EMAIL_ERRORS = (smtplib.SMTPException, OSError)


@shared_task(acks_late=True, autoretry_for=EMAIL_ERRORS, retry_backoff=60, max_retries=5)
def send_notification_email(notification_id: int) -> bool:
    from labgov.notifications.services import notification_email_send

    return notification_email_send(notification_id=notification_id)


@shared_task
def send_digests() -> int:
    """Daily (CELERY_BEAT_SCHEDULE): one task per person with notifications waiting."""
    from labgov.notifications.services import digest_recipient_ids

    recipient_ids = digest_recipient_ids()
    for recipient_id in recipient_ids:
        send_digest.delay(recipient_id)
    return len(recipient_ids)


@shared_task(acks_late=True, autoretry_for=EMAIL_ERRORS, retry_backoff=60, max_retries=5)
def send_digest(recipient_id: int) -> int:
    from labgov.notifications.services import digest_send

    return digest_send(recipient_id=recipient_id)


# The service gives up (marks the delivery failed) on its fifth attempt; max_retries only
# has to let it get there.
@shared_task(
    acks_late=True,
    autoretry_for=(WebhookTransientError,),
    retry_backoff=30,
    retry_backoff_max=900,
    max_retries=10,
)
def deliver_webhook(delivery_id: int) -> bool:
    from labgov.notifications.services import webhook_deliver

    return webhook_deliver(delivery_id=delivery_id)


@shared_task
def mark_unconfirmed_emails() -> int:
    """Every 15 minutes (CELERY_BEAT_SCHEDULE): emails whose sender died mid-send."""
    from labgov.notifications.services import emails_unconfirmed_mark

    return emails_unconfirmed_mark()
