"""Alerts on waste and risk, and the settings that tune them per lab (defaults per
institution). The rules that raise them live in `rules.py`; `evaluation.py` keeps one open
alert per kind and subject."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from labgov.accounts import access
from labgov.core.money import PreciseMoneyField
from labgov.notifications.kinds import Severity

__all__ = ["Alert", "AlertSettings", "Kind", "Severity", "WASTE_KINDS"]


class Kind(models.TextChoices):
    STOPPED_POD_DISK = "stopped_pod_disk", "Stopped pod billing for its volume disk"
    IDLE_NETWORK_VOLUME = "idle_network_volume", "Network volume no running pod uses"
    BUDGET_THRESHOLD = "budget_threshold", "Budget threshold crossed"
    FORECAST_OVERRUN = "forecast_overrun", "Money runs out before the end date"
    FUNDING_ENDING = "funding_ending", "Funding ending with data on it"
    BALANCE_RISK = "balance_risk", "Runpod balance running low"
    UNATTRIBUTED_SPEND = "unattributed_spend", "Unattributed spend"
    SYNC_FAILING = "sync_failing", "Runpod sync failing"
    RUNNING_IDLE = "running_idle", "Pod running idle"
    IDLE_ENDPOINT_WORKERS = "idle_endpoint_workers", "Endpoint's always-on workers serving nothing"


# Alerts about storage that bills while nothing runs: the waste labgov exists to catch.
WASTE_KINDS = (Kind.STOPPED_POD_DISK, Kind.IDLE_NETWORK_VOLUME)


class AlertQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.alerts_q(user))

    def unresolved(self):
        return self.exclude(state=Alert.State.RESOLVED)

    def needing_attention(self, now=None):
        """Open alerts, and snoozed ones whose snooze has run out."""
        now = now or timezone.now()
        return self.filter(
            Q(state=Alert.State.OPEN) | Q(state=Alert.State.SNOOZED, snoozed_until__lte=now)
        )


class Alert(models.Model):
    class State(models.TextChoices):
        OPEN = "open", "Open"
        ACKNOWLEDGED = "acknowledged", "Acknowledged"
        SNOOZED = "snoozed", "Snoozed"
        RESOLVED = "resolved", "Resolved"

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    lab = models.ForeignKey(
        "accounts.Lab",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    kind = models.CharField(max_length=30, choices=Kind.choices)
    # What the alert is about, as "<type>:<id>" ("resource:12", "funding_source:3",
    # "allocation:7", "account:2"): one unresolved alert per kind and subject.
    subject_key = models.CharField(max_length=100)
    subject_label = models.CharField(max_length=300)
    # The subject itself, for links, actions and who may see the alert.
    resource = models.ForeignKey(
        "runpod.Resource", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    funding_source = models.ForeignKey(
        "funding.FundingSource", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    allocation = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The person whose resource or allocation it is: they see the alert and are told.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    severity = models.CharField(max_length=10, choices=Severity.choices)
    # For thresholds: the highest percentage crossed; a higher one notifies again.
    level = models.PositiveIntegerField(default=0)
    title = models.CharField(max_length=300)
    detail = models.TextField(blank=True)
    monthly_cost_usd = PreciseMoneyField(null=True, blank=True)
    facts = models.JSONField(default=dict, blank=True)

    state = models.CharField(max_length=20, choices=State.choices, default=State.OPEN)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    snoozed_until = models.DateTimeField(null=True, blank=True)
    snoozed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Null with resolved_at set: resolved automatically, when the condition cleared.
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolution = models.CharField(max_length=500, blank=True)

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "subject_key"],
                condition=~Q(state="resolved"),
                name="alert_one_unresolved_per_subject",
            )
        ]
        indexes = [
            models.Index(fields=["institution", "state"]),
            models.Index(fields=["lab", "state"]),
            models.Index(fields=["owner", "state"]),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.subject_label}"

    @property
    def is_resolved(self) -> bool:
        return self.state == self.State.RESOLVED

    def state_words(self) -> str:
        if self.state == self.State.SNOOZED and self.snoozed_until:
            return f"Snoozed until {self.snoozed_until:%Y-%m-%d %H:%M} UTC"
        if self.state == self.State.RESOLVED:
            return "Resolved" if self.resolved_by_id else "Resolved (condition cleared)"
        return self.get_state_display()


class AlertSettings(models.Model):
    """Alert settings of an institution (lab empty: the defaults) or of one lab. Empty fields
    take the institution's value, and the institution's empty fields the built-in default."""

    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, related_name="+"
    )
    lab = models.OneToOneField(
        "accounts.Lab", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    disabled_kinds = models.JSONField(
        null=True, blank=True, help_text="Alert kinds switched off (a list of kind values)."
    )
    idle_volume_days = models.PositiveIntegerField(null=True, blank=True)
    budget_thresholds = models.CharField(max_length=100, blank=True)
    funding_ending_days = models.PositiveIntegerField(null=True, blank=True)
    balance_days = models.PositiveIntegerField(null=True, blank=True)
    unattributed_threshold_usd = PreciseMoneyField(null=True, blank=True)
    sync_failing_hours = models.PositiveIntegerField(null=True, blank=True)
    idle_gpu_util_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    idle_memory_util_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    idle_grace_hours = models.PositiveSmallIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        verbose_name = "alert settings"
        verbose_name_plural = "alert settings"
        constraints = [
            models.UniqueConstraint(
                fields=["institution"],
                condition=Q(lab__isnull=True),
                name="alert_settings_one_default_per_institution",
            )
        ]

    def __str__(self) -> str:
        return f"Alert settings of {self.lab or self.institution}"
