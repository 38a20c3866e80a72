from django.conf import settings
from django.db import models
from django.utils import timezone

from labgov.accounts import access
from labgov.notifications.kinds import Severity


class NotificationQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.notifications_q(user))

    def unread(self):
        return self.filter(read_at__isnull=True)

    def awaiting_email(self):
        return self.filter(emailed_at__isnull=True, email_skipped=False)


class Notification(models.Model):
    """Something a person should know: shown in the app, and emailed at most once (critical
    ones at once, the others in the daily digest), unless its kind is muted."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="notifications",
        db_index=False,  # Meta leads an index with it
    )
    kind = models.CharField(max_length=60)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.INFO)
    # The lab the event concerns, when there is one (its webhook hears of it).
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True)
    # The same event never notifies the same person twice, however often it is reported. In
    # a thread, the key of the latest event told.
    dedupe_key = models.CharField(max_length=200)
    # One story (a retention case, an alert, a provisioning request) is one notification per
    # person: each later event of it updates this row in place (its words, its time, unread
    # again) instead of adding one. Empty: a notification of its own.
    thread_key = models.CharField(max_length=200, blank=True, default="")
    # How many events of the thread this person was told (made unread by): 1 for a
    # notification of its own.
    times_told = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)
    # Set when a sender claims the row, before sending (cleared again if sending fails), so
    # that two workers or two digest runs never email it twice.
    emailed_at = models.DateTimeField(null=True, blank=True)
    # Which send claimed it: the release after a failure clears only that send's rows.
    email_claim = models.CharField(max_length=32, blank=True)
    # Set once the SMTP server accepted the email. Claimed but never confirmed means the
    # sender died mid-send: the email may or may not have gone, and is not sent again (at most
    # once); the sweep says so on the notification (`email_problem`) instead of staying quiet.
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_problem = models.CharField(max_length=300, blank=True)
    # Its kind was muted by the recipient when it was due: it will never be emailed (so that
    # unmuting later does not send a backlog).
    email_skipped = models.BooleanField(default=False)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "dedupe_key"], name="notification_unique_dedupe_key"
            ),
            models.UniqueConstraint(
                fields=["recipient", "thread_key"],
                condition=~models.Q(thread_key=""),
                name="notification_one_row_per_thread",
            ),
        ]
        indexes = [
            models.Index(fields=["recipient", "read_at"]),
            models.Index(
                fields=["recipient"],
                condition=models.Q(emailed_at__isnull=True, email_skipped=False),
                name="notification_awaiting_email",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.subject}"


class EmailChoice(models.Model):
    """How a person wants their notifications emailed. Without a row: the daily digest."""

    class Delivery(models.TextChoices):
        DIGEST = "digest", "In one digest a day (critical ones at once)"
        IMMEDIATE = "immediate", "Each at once"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="email_choice"
    )
    delivery = models.CharField(max_length=10, choices=Delivery.choices, default=Delivery.DIGEST)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.user}: {self.delivery}"


class MutedKind(models.Model):
    """A kind of notification a person does not want emailed (it still shows in the app)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="muted_kinds",
        db_index=False,  # Meta leads an index with it
    )
    kind = models.CharField(max_length=60)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["user", "kind"]
        constraints = [
            models.UniqueConstraint(fields=["user", "kind"], name="muted_kind_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} mutes {self.kind}"


class LabWebhook(models.Model):
    """A lab's incoming webhook (Slack or compatible) that hears of the lab's events at or
    above a severity. The URL is a credential: stored encrypted, shown as host and last four
    characters, never logged or audited."""

    lab = models.OneToOneField("accounts.Lab", on_delete=models.PROTECT, related_name="webhook")
    url_encrypted = models.TextField()
    url_host = models.CharField(max_length=255)
    url_last4 = models.CharField(max_length=4)
    is_active = models.BooleanField(default=True)
    min_severity = models.CharField(
        max_length=10, choices=Severity.choices, default=Severity.WARNING
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"Webhook of {self.lab}"

    @property
    def url_display(self) -> str:
        return f"{self.url_host} …{self.url_last4}"


class WebhookDelivery(models.Model):
    """One event posted to one webhook, at most once: claimed (pending → sending) with a
    conditional UPDATE before the POST."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENDING = "sending", "Sending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(
        LabWebhook, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    dedupe_key = models.CharField(max_length=200)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    # When the current attempt claimed it: still sending long after, its worker died mid-post.
    sending_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "dedupe_key"], name="webhook_delivery_unique_dedupe_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.webhook}: {self.dedupe_key} ({self.status})"
