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
        "accounts.Institution", on_delete=models.PROTECT, related_name="+"
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
        "funding.FundingSource", on_delete=models.PROTECT, related_name="+"
    )
    to_funding_source = models.ForeignKey(
        "funding.FundingSource", on_delete=models.PROTECT, related_name="+"
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
