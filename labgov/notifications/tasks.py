import smtplib

from celery import shared_task


@shared_task(
    acks_late=True,
    autoretry_for=(smtplib.SMTPException, OSError),
    retry_backoff=60,
    max_retries=5,
)
def send_notification_email(notification_id: int) -> bool:
    from labgov.notifications.services import notification_email_send

    return notification_email_send(notification_id=notification_id)
