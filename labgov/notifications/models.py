from django.conf import settings
from django.db import models
from django.utils import timezone

from labgov.accounts import access


class NotificationQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.notifications_q(user))

    def unread(self):
        return self.filter(read_at__isnull=True)


class Notification(models.Model):
    """Something a person should know, shown in the app and sent once by email."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="notifications"
    )
    kind = models.CharField(max_length=60)
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True)
    # The same event never notifies the same person twice, however often it is reported.
    dedupe_key = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)
    emailed_at = models.DateTimeField(null=True, blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "dedupe_key"], name="notification_unique_dedupe_key"
            )
        ]
        indexes = [models.Index(fields=["recipient", "read_at"])]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.subject}"
