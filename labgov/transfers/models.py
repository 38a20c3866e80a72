from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from labgov.core.money import PreciseMoneyField


class CostTransfer(models.Model):
    """Spend of one open month moved from one allocation (and its funding source) to another,
    with a justification.

    Finance and institution admins transfer directly; a lab admin's transfer is a proposal
    that finance or an institution admin (never the proposer) approves. Once applied it is two
    ledger adjustments (out of one, into the other) and two daily rollup rows of the category
    "Cost transfers" on the month's first day, on the Runpod account whose spend moved; it is
    never edited (a transfer back is a new transfer).
    """

    class State(models.TextChoices):
        PENDING = "pending", "Waiting for finance"
        APPLIED = "applied", "Applied"
        REJECTED = "rejected", "Rejected"

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    account = models.ForeignKey("runpod.RunpodAccount", on_delete=models.PROTECT, related_name="+")
    # Optional: narrows the spend moved (and the amount available) to one resource's.
    resource = models.ForeignKey(
        "runpod.Resource", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    month = models.DateField(help_text="The first day of the month whose spend moves.")
    from_allocation = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, related_name="+"
    )
    to_allocation = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, related_name="+"
    )
    # Copied from the allocations, so invoices find a source's transfers without joins.
    from_funding_source = models.ForeignKey(
        "funding.FundingSource",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    to_funding_source = models.ForeignKey(
        "funding.FundingSource",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    amount_usd = PreciseMoneyField()
    justification = models.CharField(max_length=1000)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    # False when the mover holds the money role (finance, institution admin): applied at once.
    needs_approval = models.BooleanField(default=True)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    proposed_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.CharField(max_length=1000, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(amount_usd__gt=0), name="transfer_amount_positive"),
            models.CheckConstraint(
                condition=~Q(from_allocation=F("to_allocation")), name="transfer_two_allocations"
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="transfer_month_start"),
            models.CheckConstraint(
                condition=Q(state="pending", decided_by__isnull=True)
                | (~Q(state="pending") & Q(decided_by__isnull=False)),
                name="transfer_decided_by_someone",
            ),
            # The second person: a proposal is never decided by its proposer.
            models.CheckConstraint(
                condition=Q(needs_approval=False)
                | Q(decided_by__isnull=True)
                | ~Q(decided_by=F("proposed_by")),
                name="transfer_not_self_approved",
            ),
        ]
        indexes = [
            models.Index(fields=["institution", "state"]),
            models.Index(fields=["from_funding_source", "month"]),
            models.Index(fields=["to_funding_source", "month"]),
        ]
        ordering = ["-proposed_at", "-pk"]

    def __str__(self) -> str:
        return f"Cost transfer #{self.pk} ({self.month:%Y-%m})"


class SpendMove(models.Model):
    """A lab admin's re-assignment of a resource's spend that starts before today (a back-dated
    split, a retention case's move to other funding): it moves spend already incurred, so,
    like a cost transfer, it waits for finance or an institution admin (never the proposer).
    Approved, it becomes the resource's assignment from `starts_at` with these shares
    (labgov/transfers/splits.py); the checks of a cost transfer run again then."""

    State = CostTransfer.State

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    resource = models.ForeignKey("runpod.Resource", on_delete=models.PROTECT, related_name="+")
    starts_at = models.DateTimeField()
    note = models.CharField(max_length=300, blank=True)
    # What asked for it, when not the shares editor: "retention-case:<id>" (settings
    # LABGOV_SPEND_MOVE_ORIGINS names who finishes it once applied).
    origin = models.CharField(max_length=100, blank=True)
    # What the proposal moved when made, {"<allocation id>:<YYYY-MM>": "<USD>"}: shown to
    # the approver, measured again when applied.
    moves = models.JSONField(default=dict)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    proposed_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.CharField(max_length=1000, blank=True)
    assignment = models.ForeignKey(
        "runpod.Assignment", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state="pending", decided_by__isnull=True)
                | (~Q(state="pending") & Q(decided_by__isnull=False)),
                name="spend_move_decided_by_someone",
            ),
            models.CheckConstraint(
                condition=Q(decided_by__isnull=True) | ~Q(decided_by=F("proposed_by")),
                name="spend_move_not_self_approved",
            ),
            models.CheckConstraint(
                condition=~Q(state="applied") | Q(assignment__isnull=False),
                name="spend_move_applied_has_assignment",
            ),
        ]
        indexes = [models.Index(fields=["institution", "state"])]
        ordering = ["-proposed_at", "-pk"]

    def __str__(self) -> str:
        return f"Back-dated move #{self.pk} ({self.starts_at:%Y-%m-%d})"


class SpendMoveShare(models.Model):
    move = models.ForeignKey(
        SpendMove, on_delete=models.PROTECT, related_name="shares", db_index=False
    )
    allocation = models.ForeignKey("funding.Allocation", on_delete=models.PROTECT, related_name="+")
    share_percent = models.DecimalField(max_digits=5, decimal_places=2)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["move", "allocation"], name="spend_move_share_unique_allocation"
            ),
            models.CheckConstraint(
                condition=Q(share_percent__gt=0, share_percent__lte=100),
                name="spend_move_share_between_0_and_100",
            ),
        ]
        ordering = ["move", "-share_percent", "allocation"]

    def __str__(self) -> str:
        return f"{self.share_percent}% by {self.allocation_id}"
