import secrets

from django.conf import settings
from django.db import models
from django.db.models import F, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from labgov.accounts import access
from labgov.core.append_only import AppendOnlyModel, AppendOnlyQuerySet
from labgov.core.money import ZERO, BudgetField, PreciseMoneyField

# Annotations over money columns: room for sums of many of them (a column holds < 10^10).
_PRECISE = models.DecimalField(max_digits=30, decimal_places=10)


class FundingSourceQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.funding_sources_q(user))

    def with_figures(self):
        """Annotate allocated, committed and spent (USD) without a query per row."""
        return self.annotate(
            allocated_usd=Coalesce(
                Subquery(
                    Allocation.objects.filter(funding_source=OuterRef("pk"))
                    .values("funding_source")
                    .annotate(total=Sum("cap_usd"))
                    .values("total")
                ),
                ZERO,
                output_field=_PRECISE,
            ),
            **_ledger_annotations("funding_source"),
        ).annotate(remaining_usd=F("amount_usd") - F("committed_usd") - F("spent_usd"))

    def for_dashboard(self, user):
        return (
            self.visible_to(user)
            .select_related("lab", "lab__institution")
            .with_figures()
            .order_by("end_date", "name")
        )


class FundingSource(models.Model):
    class Kind(models.TextChoices):
        GRANT = "grant", "Grant"
        LAB_BUDGET = "lab_budget", "Lab budget"
        COURSE_BUDGET = "course_budget", "Course budget"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        ON_HOLD = "on_hold", "On hold (no new commitments)"
        CLOSED = "closed", "Closed"

    # The institution is the lab's; it is kept here too so an award number can be unique per
    # institution in the database.
    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, related_name="funding_sources"
    )
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, related_name="funding_sources"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.GRANT)
    name = models.CharField(max_length=200)
    sponsor = models.CharField(max_length=200, blank=True)
    award_number = models.CharField(max_length=100, blank=True)
    cost_center = models.CharField(
        "cost center / chart-of-accounts string", max_length=200, blank=True
    )
    start_date = models.DateField()
    end_date = models.DateField(help_text="Last day of the funding period (included).")
    amount_usd = BudgetField()
    indirect_cost_rate_percent = models.DecimalField(
        max_digits=5, decimal_places=2, null=True, blank=True
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = FundingSourceQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["institution", "award_number"],
                condition=~Q(award_number=""),
                name="funding_unique_award_number",
            ),
            models.CheckConstraint(
                condition=Q(end_date__gte=F("start_date")), name="funding_end_after_start"
            ),
            models.CheckConstraint(condition=Q(amount_usd__gte=0), name="funding_amount_positive"),
            models.CheckConstraint(
                condition=Q(indirect_cost_rate_percent__isnull=True)
                | Q(indirect_cost_rate_percent__gte=0, indirect_cost_rate_percent__lte=200),
                name="funding_indirect_rate_range",
            ),
        ]
        ordering = ["end_date", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.award_number})" if self.award_number else self.name


def new_tag_code() -> str:
    """An allocation's Runpod tag: `LABGOV_ALLOCATION=<code>` in a pod's environment asks for
    the pod to be paid by the allocation. Random (96 bits), so it cannot be guessed from ids."""
    return f"lga-{secrets.token_hex(12)}"


class AllocationQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.allocations_q(user))

    def with_figures(self):
        return self.annotate(**_ledger_annotations("allocation")).annotate(
            remaining_usd=F("cap_usd") - F("committed_usd") - F("spent_usd")
        )

    def for_dashboard(self, user):
        return (
            self.visible_to(user)
            .select_related("funding_source", "funding_source__lab", "user")
            .with_figures()
            .order_by("end_date", "pk")
        )


class Allocation(models.Model):
    """A slice of a funding source for one person or a named project, with a cap and dates."""

    funding_source = models.ForeignKey(
        FundingSource, on_delete=models.PROTECT, related_name="allocations"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="allocations",
    )
    project_name = models.CharField(max_length=200, blank=True)
    cap_usd = BudgetField()
    start_date = models.DateField()
    end_date = models.DateField(help_text="Last day of the allocation (included).")
    tag_code = models.CharField(max_length=40, unique=True, default=new_tag_code, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False) | ~Q(project_name=""),
                name="allocation_has_holder",
            ),
            models.CheckConstraint(
                condition=Q(end_date__gte=F("start_date")), name="allocation_end_after_start"
            ),
            models.CheckConstraint(condition=Q(cap_usd__gte=0), name="allocation_cap_positive"),
        ]
        ordering = ["end_date", "pk"]

    def __str__(self) -> str:
        return f"{self.holder_name} on {self.funding_source.name}"

    @property
    def holder_name(self) -> str:
        if self.user_id is None:
            return self.project_name
        name = str(self.user)
        return f"{name} – {self.project_name}" if self.project_name else name


class LedgerEntry(AppendOnlyModel):
    """Money committed, released, consumed or corrected against a funding source.

    Append-only: balances are sums, and a correction is a new entry. `allocation` is set when
    the money belongs to one allocation of the funding source.
    """

    class Kind(models.TextChoices):
        COMMITMENT = "commitment", "Commitment"
        RELEASE = "release", "Commitment released"
        USAGE = "usage", "Usage"
        ADJUSTMENT = "adjustment", "Adjustment"

    funding_source = models.ForeignKey(
        FundingSource,
        on_delete=models.PROTECT,
        related_name="ledger_entries",
        db_index=False,  # Meta leads an index with it
    )
    allocation = models.ForeignKey(
        Allocation,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="ledger_entries",
        db_index=False,  # Meta leads an index with it
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    amount_usd = PreciseMoneyField()
    occurred_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    memo = models.CharField(max_length=300, blank=True)
    # Set by automated posters (sync, approvals) so a retried post cannot count twice.
    idempotency_key = models.CharField(max_length=200, blank=True)
    # What posted it, for entries owned by a process: "runpod-account:<id>" for the usage a
    # Runpod account's sync keeps equal to its attributed billing records.
    source = models.CharField(max_length=100, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="ledger_unique_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(fields=["funding_source", "kind"]),
            models.Index(fields=["allocation", "kind"]),
            models.Index(
                fields=["source", "occurred_at"],
                condition=~Q(source=""),
                name="ledger_source_idx",
            ),
        ]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.amount_usd} on {self.funding_source_id}"


COMMITTED_KINDS = (LedgerEntry.Kind.COMMITMENT, LedgerEntry.Kind.RELEASE)
SPENT_KINDS = (LedgerEntry.Kind.USAGE, LedgerEntry.Kind.ADJUSTMENT)


class LedgerTotal(models.Model):
    """The sums of the ledger's entries, committed and spent, for one funding source or one
    allocation: what every page, alert and the API show as committed, spent and remaining.

    The ledger is append-only, so these only ever grow by the entries added; a database
    trigger on the ledger adds each inserted entry here in the inserting statement's own
    transaction (`labgov/funding/totals.py`), whichever code inserts it. Reading a balance is
    then one index probe instead of a sum over years of daily usage entries.
    `manage.py ledger_totals --check` compares them with the sums of the entries.
    """

    class Owner(models.TextChoices):
        FUNDING_SOURCE = "funding_source", "Funding source"
        ALLOCATION = "allocation", "Allocation"

    owner_kind = models.CharField(max_length=20, choices=Owner.choices)
    owner_id = models.BigIntegerField()
    committed_usd = models.DecimalField(max_digits=30, decimal_places=10, default=0)
    spent_usd = models.DecimalField(max_digits=30, decimal_places=10, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner_kind", "owner_id"], name="ledger_total_owner")
        ]

    def __str__(self) -> str:
        return f"{self.owner_kind} {self.owner_id}: {self.committed_usd} / {self.spent_usd}"


def _ledger_annotations(owner_field: str) -> dict:
    totals = LedgerTotal.objects.filter(owner_kind=owner_field, owner_id=OuterRef("pk"))

    def total(column):
        return Coalesce(Subquery(totals.values(column)[:1]), ZERO, output_field=_PRECISE)

    return {"committed_usd": total("committed_usd"), "spent_usd": total("spent_usd")}


class FundingProposalQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.funding_proposals_q(user))


class FundingProposal(models.Model):
    """A lab admin's proposal of a new funding source, or of a change to one of their lab's.

    It changes nothing until finance or an institution admin (never the proposer) approves
    it; then the funding source is created or changed by the approver, and both names are in
    the audit log. The proposed values are kept whole; `changed_fields` names the ones a change
    proposal alters, and only those are applied, so an approval never undoes what finance
    changed on the source meanwhile.
    """

    class State(models.TextChoices):
        PENDING = "pending", "Waiting for finance"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="funding_proposals",
        db_index=False,  # Meta leads an index with it
    )
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, related_name="funding_proposals"
    )
    # The source to change; empty for a proposed new source (set once it is approved).
    funding_source = models.ForeignKey(
        FundingSource,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="proposals",
    )
    is_new_source = models.BooleanField(default=False)
    changed_fields = models.JSONField(default=list, blank=True)
    kind = models.CharField(max_length=20, choices=FundingSource.Kind.choices)
    name = models.CharField(max_length=200)
    sponsor = models.CharField(max_length=200, blank=True)
    award_number = models.CharField(max_length=100, blank=True)
    cost_center = models.CharField(max_length=200, blank=True)
    start_date = models.DateField()
    end_date = models.DateField()
    amount_usd = BudgetField()
    indirect_cost_rate_percent = models.DecimalField(
        max_digits=5, decimal_places=2, null=True, blank=True
    )
    status = models.CharField(max_length=20, choices=FundingSource.Status.choices)
    reason = models.CharField(max_length=1000, blank=True)
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

    objects = FundingProposalQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(decided_by__isnull=True) | ~Q(decided_by=F("proposed_by")),
                name="funding_proposal_not_self_decided",
            ),
            models.CheckConstraint(
                condition=Q(state="pending", decided_by__isnull=True)
                | (~Q(state="pending") & Q(decided_by__isnull=False)),
                name="funding_proposal_decided_by_someone",
            ),
            models.CheckConstraint(
                condition=Q(is_new_source=True) | Q(funding_source__isnull=False),
                name="funding_proposal_change_has_source",
            ),
            models.CheckConstraint(
                condition=Q(end_date__gte=F("start_date")),
                name="funding_proposal_end_after_start",
            ),
            models.CheckConstraint(
                condition=Q(amount_usd__gte=0), name="funding_proposal_amount_positive"
            ),
        ]
        indexes = [models.Index(fields=["institution", "state"])]
        ordering = ["-proposed_at", "-pk"]

    def __str__(self) -> str:
        what = "new funding source" if self.is_new_source else f"change to {self.funding_source}"
        return f"Proposal #{self.pk}: {what}"
