"""A lab's automatic stop policy for idle pods, the marks that exempt a pod from it (or allow
stopping one with only a container disk), and the notices that warn an owner before a stop."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class AutoStopPolicy(models.Model):
    """Off unless a lab admin turns it on: stop a pod idle for `idle_hours`, having warned its
    owner `warn_minutes` ahead, with a one-click "keep running for `keep_hours` hours"."""

    lab = models.OneToOneField("accounts.Lab", on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=False)
    idle_hours = models.PositiveSmallIntegerField(default=6)
    warn_minutes = models.PositiveSmallIntegerField(default=30)
    keep_hours = models.PositiveSmallIntegerField(default=2)
    # Serverless endpoints whose always-on workers serve nothing for `idle_hours`: their
    # minimum is scaled to 0 (after the same warning), never the endpoint deleted.
    scale_idle_endpoints = models.BooleanField(default=False)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        verbose_name_plural = "auto-stop policies"
        constraints = [
            models.CheckConstraint(condition=Q(idle_hours__gte=1), name="autostop_idle_hours"),
            models.CheckConstraint(condition=Q(keep_hours__gte=1), name="autostop_keep_hours"),
        ]

    def __str__(self) -> str:
        return f"Auto-stop policy of lab {self.lab_id}"


class AutoStopMark(models.Model):
    class Kind(models.TextChoices):
        # A lab admin's exemption, with a reason and an end.
        NEVER_STOP = "never_stop", "Never auto-stop"
        # The owner's confirmation that a pod whose only storage is its container disk may be
        # stopped by the policy (its data would be lost).
        OWNER_ALLOWS_STOP = "owner_allows_stop", "Owner allows stopping (container disk only)"

    # Goes with its pod when a mistaken connection is removed (the audit log keeps the story).
    resource = models.ForeignKey("runpod.Resource", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    reason = models.CharField(max_length=300, blank=True)
    until = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resource", "kind"],
                condition=Q(ended_at__isnull=True),
                name="autostop_one_live_mark_per_kind",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on resource {self.resource_id}"


class StopNotice(models.Model):
    """One idle run of one pod under a policy: warned, perhaps kept running, then stopped, or
    cleared (it worked again, stopped by itself, or became exempt), or refused (container disk
    only, without the owner's confirmation)."""

    class State(models.TextChoices):
        WARNED = "warned", "Warned"
        KEPT = "kept", "Kept running"
        STOPPED = "stopped", "Stopped"
        REFUSED = "refused", "Not stopped: container disk only"
        CLEARED = "cleared", "Cleared"

    OPEN_STATES = (State.WARNED, State.KEPT, State.REFUSED)

    # Goes with its pod when a mistaken connection is removed (the audit log keeps the story).
    resource = models.ForeignKey("runpod.Resource", on_delete=models.CASCADE, related_name="+")
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.WARNED)
    idle_since = models.DateTimeField()
    warned_at = models.DateTimeField()
    stop_at = models.DateTimeField()
    kept_until = models.DateTimeField(null=True, blank=True)
    # How many times "keep running" was pressed in this idle run: the lab's admins hear of the
    # second (each keep is the policy's hours of idle GPUs, paid).
    keeps = models.PositiveSmallIntegerField(default=0)
    kept_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    closed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-warned_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource"],
                condition=Q(state__in=["warned", "kept", "refused"]),
                name="autostop_one_open_notice_per_pod",
            )
        ]
        indexes = [models.Index(fields=["lab", "state"])]

    def __str__(self) -> str:
        return f"Stop notice for resource {self.resource_id} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN_STATES


class EndpointWorkersChange(models.Model):
    """A lab admin's change of a serverless endpoint's always-on workers (workers.min) and idle
    timeout. Fewer workers or a shorter timeout spends less and is carried out at once; a
    raise whose added always-on cost per month is above the amount over which the lab's
    provisioning policy needs a second approver waits for a different person to approve it
    (two people for powers that move money)."""

    class State(models.TextChoices):
        PENDING = "pending", "Waiting for a second person"
        APPLIED = "applied", "Applied on Runpod"
        WITHDRAWN = "withdrawn", "Withdrawn"

    resource = models.ForeignKey("runpod.Resource", on_delete=models.CASCADE, related_name="+")
    workers_min_before = models.PositiveSmallIntegerField()
    workers_min = models.PositiveSmallIntegerField()
    idle_timeout_seconds = models.PositiveSmallIntegerField(null=True, blank=True)
    added_monthly_usd = models.DecimalField(max_digits=20, decimal_places=10, default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    requested_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["resource"],
                condition=Q(state="pending"),
                name="endpoint_workers_one_pending_change",
            )
        ]

    def __str__(self) -> str:
        return f"workers.min {self.workers_min_before} → {self.workers_min} ({self.state})"
