"""Retention: what happens to a lab's stored data when its money, its owner or its use ends.

A policy (a lab's own, or its institution's default, which it replaces whole) says after how
many days of grace a volume becomes due; a case tracks one volume from then to a decision. A
hold is kept apart from the case's state so that it blocks deletion whatever the case says.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from labgov.core.errors import DomainError
from labgov.core.money import PreciseMoneyField

DEFAULT_WARNING_DAYS = "30,7,1"


def parse_warning_days(text: str) -> tuple[int, ...]:
    """ "30, 7,1" → (30, 7, 1): whole days between 0 and 365, largest first, no repeats."""
    values = set()
    for part in (text or "").replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise DomainError(f"{part!r} is not a whole number of days", field="warning_days")
        value = int(part)
        if value > 365:
            raise DomainError(f"{value} days is more than a year ahead", field="warning_days")
        values.add(value)
    if not values:
        raise DomainError("give at least one warning step", field="warning_days")
    return tuple(sorted(values, reverse=True))


class RetentionPolicy(models.Model):
    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    # Null: the institution's default, for labs without a policy of their own.
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Off: the preview shows what it would do; no case opens and nobody is warned.
    is_active = models.BooleanField("turned on", default=False)
    funding_grace_days = models.PositiveIntegerField(
        "days of grace after a funding source ends", default=30
    )
    membership_grace_days = models.PositiveIntegerField(
        "days of grace after the owner's membership ends", default=30
    )
    idle_grace_days = models.PositiveIntegerField(
        "days a volume may sit idle before it is due", default=90
    )
    include_stopped_pod_disks = models.BooleanField(
        "stopped pods' volume disks count", default=True
    )
    warning_days = models.CharField(
        "warn owners and lab admins this many days ahead",
        max_length=60,
        default=DEFAULT_WARNING_DAYS,
    )
    approvers_required = models.PositiveSmallIntegerField(
        "approvers a deletion needs", choices=[(1, "One"), (2, "Two")], default=1
    )
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["institution", "lab"], name="retention_policy_unique_lab"
            ),
            models.UniqueConstraint(
                fields=["institution"],
                condition=Q(lab__isnull=True),
                name="retention_policy_unique_default",
            ),
            models.CheckConstraint(
                condition=Q(approvers_required__in=[1, 2]), name="retention_policy_approvers"
            ),
        ]

    def __str__(self) -> str:
        return f"Retention policy of {self.lab or 'the institution'}"

    @property
    def warning_steps(self) -> tuple[int, ...]:
        return parse_warning_days(self.warning_days)


class Reason(models.TextChoices):
    FUNDING_ENDED = "funding_ended", "Funding ended"
    OWNER_LEFT = "owner_left", "Owner left"
    IDLE = "idle", "Idle"


class State(models.TextChoices):
    OPEN = "open", "Open"
    KEPT = "kept", "Kept"
    HOLD = "hold", "On hold"
    MOVED = "moved", "Moved to other funding"
    DELETION_REQUESTED = "deletion_requested", "Deletion requested"
    DELETION_APPROVED = "deletion_approved", "Deletion approved"
    DELETED = "deleted", "Deleted"
    CANCELLED = "cancelled", "Cancelled"


CLOSED_STATES = (State.MOVED, State.DELETED, State.CANCELLED)


class RetentionCaseQuerySet(models.QuerySet):
    def active(self):
        return self.exclude(state__in=CLOSED_STATES)


class RetentionCase(models.Model):
    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resource = models.ForeignKey(
        "runpod.Resource", on_delete=models.PROTECT, related_name="retention_cases"
    )
    reason = models.CharField(max_length=20, choices=Reason.choices)
    reason_detail = models.CharField(max_length=300, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.OPEN)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Who paid for it when the case opened (its allocation then).
    payer = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    funding_source = models.ForeignKey(
        "funding.FundingSource", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    size_gb = models.PositiveIntegerField(default=0)
    monthly_cost_usd = PreciseMoneyField(default=0)
    due_date = models.DateField()
    opened_at = models.DateTimeField(default=timezone.now)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Kept: why, and when to look again (the case opens again on that day).
    kept_reason = models.CharField(max_length=300, blank=True)
    review_date = models.DateField(null=True, blank=True)
    moved_to = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    moved_from = models.DateTimeField(null=True, blank=True)
    deletion_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    deletion_requested_at = models.DateTimeField(null=True, blank=True)
    deletion_reason = models.CharField(max_length=300, blank=True)
    # The resource as labgov knew it when deletion was requested: what the re-read compares
    # with, and what the audit keeps once it is gone.
    last_known = models.JSONField(default=dict, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Stopped pods that mount the network volume, deleted with it (Runpod refuses to delete a
    # volume any pod mounts): requested and approved together with the volume.
    included_pods = models.ManyToManyField("runpod.Resource", blank=True, related_name="+")
    # Runpod's latest refusal of the deletion, in words (shown until the next request).
    refusal = models.CharField(max_length=500, blank=True)
    refused_at = models.DateTimeField(null=True, blank=True)
    # The warning steps (days ahead) already told, so each goes out once.
    warned_days = models.JSONField(default=list, blank=True)
    note = models.CharField(max_length=500, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = RetentionCaseQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resource"],
                condition=~Q(state__in=[s.value for s in CLOSED_STATES]),
                name="retention_case_one_active_per_resource",
            ),
        ]
        indexes = [models.Index(fields=["institution", "state"])]
        ordering = ["due_date", "id"]

    def __str__(self) -> str:
        return f"Retention case #{self.pk} ({self.resource_id})"

    @property
    def reason_text(self) -> str:
        """The reason as it stands today: a grant that has not ended yet "ends"."""
        if (
            self.reason == Reason.FUNDING_ENDED
            and self.funding_source_id is not None
            and self.funding_source.end_date >= timezone.now().date()
        ):
            return "Funding ends"
        return self.get_reason_display()

    @property
    def is_closed(self) -> bool:
        return self.state in CLOSED_STATES


class Approval(models.Model):
    case = models.ForeignKey(
        RetentionCase, on_delete=models.PROTECT, related_name="approvals", db_index=False
    )
    approver = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    # Approvals belong to one request: a new request after a return to review starts afresh.
    requested_at = models.DateTimeField()
    approved_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["case", "requested_at", "approver"], name="retention_approval_once"
            )
        ]
        ordering = ["approved_at", "id"]

    def __str__(self) -> str:
        return f"Approval of case {self.case_id} by {self.approver_id}"


class HoldQuerySet(models.QuerySet):
    def active(self, on=None):
        day = on or timezone.now().date()
        return self.filter(lifted_at__isnull=True).filter(Q(until__isnull=True) | Q(until__gte=day))


class Hold(models.Model):
    """A hold on a resource's data (thesis, legal, audit): no deletion while it stands."""

    class Kind(models.TextChoices):
        THESIS = "thesis", "Thesis"
        LEGAL = "legal", "Legal"
        AUDIT = "audit", "Audit"

    resource = models.ForeignKey("runpod.Resource", on_delete=models.PROTECT, related_name="+")
    case = models.ForeignKey(RetentionCase, on_delete=models.PROTECT, related_name="holds")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    reason = models.CharField(max_length=300)
    # Last day held; null until lifted.
    until = models.DateField(null=True, blank=True)
    # Who pays for the held storage from the hold on.
    payer = models.ForeignKey("funding.Allocation", on_delete=models.PROTECT, related_name="+")
    placed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    placed_at = models.DateTimeField(default=timezone.now)
    # The role it was placed in (institution admin or lab admin): a legal or audit hold is
    # lifted by an institution admin, or by someone in the role that placed it.
    placed_as = models.CharField(max_length=20, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    lifted_at = models.DateTimeField(null=True, blank=True)

    objects = HoldQuerySet.as_manager()

    class Meta:
        ordering = ["-placed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} hold on {self.resource_id}"
