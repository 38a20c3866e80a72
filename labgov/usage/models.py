"""Spend rollups: what pages read instead of raw billing records.

Rebuilt by the sync for the days it wrote, in the same transaction as the records, and by
re-assignments for the days they moved; so they always equal the sums of the records.
"""

from django.conf import settings
from django.db import models

from labgov.core.money import PreciseMoneyField


class Category(models.TextChoices):
    GPU_COMPUTE = "gpu_compute", "GPU compute"
    CPU_COMPUTE = "cpu_compute", "CPU compute"
    POD_DISK = "pod_disk", "Pod disk (container + volume)"
    NETWORK_STANDARD = "network_standard", "Network storage (standard)"
    NETWORK_HIGH_PERFORMANCE = "network_high_performance", "Network storage (high-performance)"
    SERVERLESS = "serverless", "Serverless"
    CLUSTERS = "clusters", "Clusters"
    # Other providers' FOCUS records, by ServiceCategory (labgov/runpod/focus.py).
    CLOUD_COMPUTE = "cloud_compute", "Cloud compute (FOCUS)"
    CLOUD_STORAGE = "cloud_storage", "Cloud storage (FOCUS)"
    CLOUD_OTHER = "cloud_other", "Other cloud services (FOCUS)"
    # The provider's own credits and adjustments (FOCUS ChargeCategory Credit, Adjustment):
    # their own lines on invoices, a credit negative, never netted into the usage above.
    CLOUD_CREDIT = "cloud_credit", "Cloud credits (FOCUS)"
    CLOUD_ADJUSTMENT = "cloud_adjustment", "Cloud adjustments (FOCUS)"
    # Whatever a record's total holds beyond its known components (normally nothing).
    OTHER = "other", "Other"
    # Spend moved between allocations by a cost transfer (labgov/transfers): a negative row on
    # the allocation it left, a positive one on the allocation it went to. Not from records:
    # rebuilding the rollups from records keeps these rows.
    TRANSFER = "cost_transfer", "Cost transfers"


STORAGE_CATEGORIES = (
    Category.POD_DISK,
    Category.NETWORK_STANDARD,
    Category.NETWORK_HIGH_PERFORMANCE,
)


class SpendRollup(models.Model):
    """Spend of one Runpod account in one category on one day (or month), for one allocation
    (null: unattributed). Funding source, lab and person are copied from the allocation so
    pages group by them without joins.

    Its foreign keys have no index of their own: each rollup's indexes (Meta.indexes) lead
    with each of them, then the day or month, and serve a lookup by the key alone too (the
    pages' and the API's filters, a protected row's check on delete). A single-column index
    beside each was kept up by every rollup write for no reader: 14 indexes a daily row where
    8 do (tests/usage/test_rollup_indexes.py)."""

    account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    category = models.CharField(max_length=30, choices=Category.choices)
    allocation = models.ForeignKey(
        "funding.Allocation",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    funding_source = models.ForeignKey(
        "funding.FundingSource",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    lab = models.ForeignKey(
        "accounts.Lab",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    amount_usd = PreciseMoneyField()

    class Meta:
        abstract = True


class DailySpend(SpendRollup):
    day = models.DateField()

    class Meta:
        indexes = [
            models.Index(fields=["account", "day"]),
            models.Index(fields=["funding_source", "day"]),
            models.Index(fields=["allocation", "day"]),
            models.Index(fields=["institution", "day"]),
            models.Index(fields=["lab", "day"]),
            # The API's spend list: a person's own spend, and keyset pages in (day, id) order.
            models.Index(fields=["user", "day"]),
            models.Index(fields=["day", "id"]),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.category} {self.amount_usd}"


class LabDailySpend(models.Model):
    """The attributed daily rollups (DailySpend with an allocation) of one account summed by
    lab, day and category: what a lab's daily chart and a person's share of their lab read,
    about 30 rows for a lab's day instead of one per allocation and category (3,900 rows for
    30 days of a lab of 50 people). Rebuilt from DailySpend wherever DailySpend changes
    (lab_days_rebuild), in the same transaction and under the account's lock, so it always
    equals DailySpend's sums; per account, so syncs of two accounts never share a row."""

    # No index of their own: the unique constraint leads with the account, the index below
    # with the lab.
    account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    day = models.DateField()
    category = models.CharField(max_length=30, choices=Category.choices)
    amount_usd = PreciseMoneyField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "lab", "day", "category"], name="lab_daily_spend_unique"
            )
        ]
        indexes = [models.Index(fields=["lab", "day"])]

    def __str__(self) -> str:
        return f"{self.day} {self.category} {self.amount_usd}"


class SourceMonthlySpend(models.Model):
    """The monthly rollups (MonthlySpend) of one account summed by funding source and month
    (funding source null: unattributed spend): what the finance page's tables by lab, funding
    source, cost center and account read, 573 rows for six months of an institution of 200
    funding sources instead of 4,296 monthly ones. Rebuilt from MonthlySpend wherever
    MonthlySpend changes (source_months_rebuild, from months_rebuild), in the same
    transaction and under the account's lock, so it always equals MonthlySpend's sums (a
    month that nets to zero included: one row per key MonthlySpend has); per account, so
    syncs of two accounts never share a row."""

    # The account and the institution have no index of their own: the unique constraints lead
    # with the account, the index below with the institution.
    account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    funding_source = models.ForeignKey(
        "funding.FundingSource", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    month = models.DateField(help_text="The first day of the month.")
    amount_usd = PreciseMoneyField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "funding_source", "month"],
                condition=models.Q(funding_source__isnull=False),
                name="source_monthly_spend_unique",
            ),
            models.UniqueConstraint(
                fields=["account", "month"],
                condition=models.Q(funding_source__isnull=True),
                name="source_monthly_spend_unattributed_unique",
            ),
        ]
        indexes = [models.Index(fields=["institution", "month"])]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.amount_usd}"


class MonthlySpend(SpendRollup):
    month = models.DateField(help_text="The first day of the month.")

    class Meta:
        indexes = [
            models.Index(fields=["account", "month"]),
            models.Index(fields=["institution", "month"]),
            models.Index(fields=["funding_source", "month"]),
            # The API's spend list (access.spend_q): a lab's months, a person's own.
            models.Index(fields=["allocation", "month"]),
            models.Index(fields=["lab", "month"]),
            models.Index(fields=["user", "month"]),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.category} {self.amount_usd}"


class ClosedPeriod(models.Model):
    """A calendar month (in the institution's time zone) that finance has closed for an
    institution: spend in it is frozen, so nothing may move money into or out of it
    (re-attribution, removal of synced data). Late usage becomes an adjustment in the next
    open period."""

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="closed_periods",
        db_index=False,  # Meta leads an index with it
    )
    month = models.DateField(help_text="The first day of the closed month.")
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+"
    )
    closed_at = models.DateTimeField(auto_now_add=True)
    # Closing needs the month reconciled to the cent with every day held, or this: finance's
    # reason for closing anyway, with the difference it accepted (records minus Runpod).
    acceptance_reason = models.TextField(blank=True)
    accepted_difference_usd = PreciseMoneyField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["institution", "month"], name="one_close_per_month"),
            models.CheckConstraint(
                condition=models.Q(month__day=1), name="closed_period_is_a_month_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} closed"


class SpendVersion(models.Model):
    """How often an account's spend of one UTC day changed (billing records written, spend
    re-attributed or split, a cost transfer applied): bumped with the rollups, in the same
    transaction. A draft invoice keeps the sum over the days it depends on when it is
    generated, so seeing whether it may be stale costs one small query (labgov.invoicing)."""

    account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    day = models.DateField()
    version = models.PositiveBigIntegerField(default=1)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "day"], name="spend_version_account_day")
        ]

    def __str__(self) -> str:
        return f"{self.day} v{self.version}"
