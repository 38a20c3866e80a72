"""Invoices: one per funding source and billing period, built from billing records.

An invoice is a draft until issued; issuing gives it the next number of its institution and
year and freezes it (services refuse, and on PostgreSQL a trigger refuses, any change to an
issued invoice or its lines but voiding it). A voided invoice keeps its number; its
replacement gets a new one.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Coalesce, Concat, NullIf
from django.utils import timezone

from labgov.accounts import access
from labgov.core.money import BudgetField, PreciseMoneyField
from labgov.usage.models import Category as UsageCategory


def person_name(prefix: str = ""):
    """A person's name as invoices print it: "first last", else the username."""
    return Coalesce(
        NullIf(Concat(f"{prefix}first_name", Value(" "), f"{prefix}last_name"), Value(" ")),
        f"{prefix}username",
        Value(""),
    )


class InvoiceQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.invoices_q(user))


class Invoice(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        ISSUED = "issued", "Issued"
        VOID = "void", "Void"

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="invoices",
        db_index=False,  # Meta leads an index with it
    )
    funding_source = models.ForeignKey(
        "funding.FundingSource", on_delete=models.PROTECT, related_name="invoices"
    )
    # Copied from the funding source when generated, so an issued invoice keeps what it said.
    lab = models.ForeignKey("accounts.Lab", on_delete=models.PROTECT, related_name="+")
    cost_center = models.CharField(max_length=200, blank=True)
    award_number = models.CharField(max_length=100, blank=True)
    month = models.DateField(help_text="The first day of the billing period (a calendar month).")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    # Sum of the lines' rounded amounts (the invoice total), and of their exact amounts.
    total_usd = BudgetField(default=0)
    exact_total_usd = PreciseMoneyField(default=0)
    # Numbered when issued: `<year>-<seq>` per institution, gap-free (InvoiceCounter).
    number_year = models.PositiveIntegerField(null=True, blank=True)
    number_seq = models.PositiveIntegerField(null=True, blank=True)
    number = models.CharField(max_length=30, blank=True)
    replaces = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="replaced_by"
    )
    generated_at = models.DateTimeField(default=timezone.now)
    # The spend version of the days the draft was generated from (invoicing/staleness.py):
    # while it holds, the draft is what regenerating would give, without computing it again.
    generated_spend_version = models.PositiveBigIntegerField(default=0)
    # The names it was issued under, so an issued invoice reads the same after a rename
    # ("" on drafts, which show today's names).
    institution_name = models.CharField(max_length=200, blank=True)
    lab_name = models.CharField(max_length=200, blank=True)
    funding_source_name = models.CharField(max_length=300, blank=True)
    generated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    issued_at = models.DateTimeField(null=True, blank=True)
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    voided_at = models.DateTimeField(null=True, blank=True)
    voided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    void_reason = models.TextField(blank=True)
    # The people who changed its lines by hand (added or removed a credit or an adjustment,
    # voided the invoice it replaces): the change is theirs, so another person issues it.
    changed_by = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")

    objects = InvoiceQuerySet.as_manager()

    class Meta:
        ordering = ["month", "cost_center", "pk"]
        constraints = [
            # One live invoice per funding source and period; void ones stay beside it.
            models.UniqueConstraint(
                fields=["funding_source", "month"],
                condition=~Q(status="void"),
                name="invoice_one_live_per_source_month",
            ),
            models.UniqueConstraint(
                fields=["institution", "number_year", "number_seq"],
                name="invoice_number_unique",
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="invoice_month_start"),
            models.CheckConstraint(
                condition=Q(status="draft", number_seq__isnull=True, issued_at__isnull=True)
                | Q(
                    ~Q(status="draft"),
                    number_seq__isnull=False,
                    number_year__isnull=False,
                    issued_at__isnull=False,
                ),
                name="invoice_numbered_iff_issued",
            ),
            models.CheckConstraint(
                condition=~Q(status="void") | ~Q(void_reason=""), name="invoice_void_has_reason"
            ),
        ]
        indexes = [models.Index(fields=["institution", "month"])]

    def __str__(self) -> str:
        label = self.number or f"draft #{self.pk}"
        return f"Invoice {label} {self.month:%Y-%m}"

    @property
    def shown_institution_name(self) -> str:
        return self.institution_name or self.institution.name

    @property
    def shown_lab_name(self) -> str:
        return self.lab_name or self.lab.name

    @property
    def shown_funding_source_name(self) -> str:
        return self.funding_source_name or self.funding_source.name

    @property
    def rounding_difference_usd(self):
        """The invoice total (sum of rounded lines) minus the exact sum of the lines."""
        return self.total_usd - self.exact_total_usd

    @property
    def is_reconciled(self) -> bool:
        return all(line.reconciled for line in self.lines.all())


class InvoiceCounter(models.Model):
    """The last number issued per institution and year; issuing locks this row."""

    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, db_index=False
    )
    year = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["institution", "year"], name="invoice_counter_unique")
        ]

    def __str__(self) -> str:
        return f"{self.year}: {self.last_seq}"


class LineCategory(models.TextChoices):
    GPU_COMPUTE = UsageCategory.GPU_COMPUTE.value, UsageCategory.GPU_COMPUTE.label
    CPU_COMPUTE = UsageCategory.CPU_COMPUTE.value, UsageCategory.CPU_COMPUTE.label
    POD_DISK = UsageCategory.POD_DISK.value, UsageCategory.POD_DISK.label
    NETWORK_STANDARD = UsageCategory.NETWORK_STANDARD.value, UsageCategory.NETWORK_STANDARD.label
    NETWORK_HIGH_PERFORMANCE = (
        UsageCategory.NETWORK_HIGH_PERFORMANCE.value,
        UsageCategory.NETWORK_HIGH_PERFORMANCE.label,
    )
    SERVERLESS = UsageCategory.SERVERLESS.value, UsageCategory.SERVERLESS.label
    CLUSTERS = UsageCategory.CLUSTERS.value, UsageCategory.CLUSTERS.label
    # Other providers' FOCUS records (labgov/runpod/focus.py).
    CLOUD_COMPUTE = UsageCategory.CLOUD_COMPUTE.value, UsageCategory.CLOUD_COMPUTE.label
    CLOUD_STORAGE = UsageCategory.CLOUD_STORAGE.value, UsageCategory.CLOUD_STORAGE.label
    CLOUD_OTHER = UsageCategory.CLOUD_OTHER.value, UsageCategory.CLOUD_OTHER.label
    CLOUD_CREDIT = UsageCategory.CLOUD_CREDIT.value, UsageCategory.CLOUD_CREDIT.label
    CLOUD_ADJUSTMENT = UsageCategory.CLOUD_ADJUSTMENT.value, UsageCategory.CLOUD_ADJUSTMENT.label
    # What a record holds beyond its known components: Runpod's fees and networking.
    FEES = UsageCategory.OTHER.value, "Fees and other"
    TRANSFER = UsageCategory.TRANSFER.value, UsageCategory.TRANSFER.label
    INDIRECT = "indirect", "Indirect costs (F&A)"
    CREDIT = "credit", "Credit"
    ADJUSTMENT = "adjustment", "Adjustment"


class InvoiceLine(models.Model):
    class Kind(models.TextChoices):
        USAGE = "usage", "Usage"
        # Usage of a closed period that changed after it closed (late record, correction).
        LATE_USAGE = "late_usage", "Correction of a closed period"
        INDIRECT = "indirect", "Indirect costs (F&A)"
        CREDIT = "credit", "Credit"
        MANUAL = "manual", "Manual adjustment"
        # Spend moved into (+) or out of (−) the source by a cost transfer (labgov/transfers).
        TRANSFER = "transfer", "Cost transfer"

    # Kinds a person enters (with a reason); regenerating a draft keeps them.
    ENTERED_KINDS = (Kind.CREDIT, Kind.MANUAL)

    invoice = models.ForeignKey(
        Invoice, on_delete=models.PROTECT, related_name="lines", db_index=False
    )
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=12, choices=Kind.choices)
    category = models.CharField(max_length=30, choices=LineCategory.choices)
    description = models.CharField(max_length=300, blank=True)
    account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resource = models.ForeignKey(
        "runpod.Resource", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    allocation = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The allocation's holder (usage), or nobody for lines a person entered (see entered_by).
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The person's name when the invoice was issued ("" on drafts and lines without a person).
    person_name = models.CharField(max_length=300, blank=True)
    # Hours billed (from the records' buckets), or a rate's base; null where none applies.
    quantity = models.DecimalField(max_digits=20, decimal_places=4, null=True, blank=True)
    unit = models.CharField(max_length=20, blank=True)
    unit_rate_usd = PreciseMoneyField(null=True, blank=True)
    exact_amount_usd = PreciseMoneyField()
    amount_usd = BudgetField()
    reconciled = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    entered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Late usage: the closed month it corrects, and that month's invoice when there was one.
    corrects_month = models.DateField(null=True, blank=True)
    corrects_invoice = models.ForeignKey(
        Invoice, on_delete=models.PROTECT, null=True, blank=True, related_name="corrected_by"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["invoice", "position"]
        constraints = [
            models.UniqueConstraint(fields=["invoice", "position"], name="invoice_line_position"),
            models.CheckConstraint(
                condition=~Q(kind__in=["credit", "manual"])
                | (~Q(reason="") & Q(entered_by__isnull=False)),
                name="invoice_line_entered_has_reason",
            ),
            models.CheckConstraint(
                condition=~Q(kind="credit") | Q(amount_usd__lte=0), name="invoice_credit_negative"
            ),
            models.CheckConstraint(
                condition=~Q(kind="late_usage") | Q(corrects_month__isnull=False),
                name="invoice_late_usage_names_month",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_category_display()} {self.amount_usd}"


class ScheduledGeneration(models.Model):
    """The monthly task's claim on one institution's month, so drafts are generated and
    finance notified once even when two schedulers run."""

    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, db_index=False
    )
    month = models.DateField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["institution", "month"], name="scheduled_generation_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} generated by the schedule"
