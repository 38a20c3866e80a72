from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from labgov.core.money import PreciseMoneyField
from labgov.runpod import partitions

DEFAULT_BASE_URL = "https://api.runpod.io"
RUNPOD = "Runpod"


class BillingSource(models.TextChoices):
    """Where an account's billing comes from: Runpod's API, synced; or another cloud's FOCUS
    cost-and-usage export, imported (labgov/runpod/focus.py). Both write the same resources,
    billing records and account totals (labgov/runpod/providers.py)."""

    RUNPOD_API = "runpod_api", "Runpod API"
    FOCUS = "focus", "FOCUS file"


class RunpodAccount(models.Model):
    """A connected Runpod account: an institution-wide one, or a lab's own team account; or a
    FOCUS billing source (another provider's account whose bills arrive as FOCUS files: no
    API key, never synced, never provisioned on)."""

    institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        related_name="runpod_accounts",
        db_index=False,  # Meta leads an index with it
    )
    lab = models.ForeignKey(
        "accounts.Lab",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="runpod_accounts",
        help_text="Set when the account is a lab's own team account.",
    )
    name = models.CharField(max_length=120)
    # The provider's name as people know it ("Runpod", "AWS", "Microsoft Azure", ...).
    provider = models.CharField(max_length=60, default=RUNPOD)
    billing_source = models.CharField(
        max_length=20, choices=BillingSource.choices, default=BillingSource.RUNPOD_API
    )
    # FOCUS sources: the files' BillingCurrency, and, for any currency but USD, how many USD
    # one unit is worth (records are kept in USD, converted exactly to 10 places).
    currency = models.CharField(max_length=3, default="USD")
    usd_per_unit = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    # FOCUS sources: a folder under LABGOV_FOCUS_DROP_ROOT (relative to it) whose new files
    # the worker imports (labgov/runpod/focus_folders.py); blank: uploads only.
    focus_folder = models.CharField(max_length=500, blank=True)
    base_url = models.URLField(default=DEFAULT_BASE_URL)
    # Two keys, each for one use: the sync key reads (a read-only key is enough), the write
    # key provisions and acts on pods. The write key is optional: without one, nothing is
    # created or changed on Runpod through this connection.
    api_key_encrypted = models.TextField()
    api_key_last4 = models.CharField(max_length=4)
    write_key_encrypted = models.TextField(blank=True)
    write_key_last4 = models.CharField(max_length=4, blank=True)
    # Off: not synced (by beat or by hand) and not used to provision; its history stays.
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Runpod raised this account's spending limit for clusters over 2 pods / 16 GPUs, as an
    # institution admin confirmed (audited); empty: not confirmed.
    cluster_limit_confirmed_at = models.DateTimeField(null=True, blank=True)
    cluster_limit_confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Removal takes synced spend off the ledger, so it needs two people: one institution admin
    # asks, another carries it out (labgov/runpod/removal.py).
    removal_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    removal_requested_at = models.DateTimeField(null=True, blank=True)

    # Billing buckets before this instant were complete when last fetched; the next sync
    # starts here minus an overlap, so late corrections are still picked up.
    billing_complete_through = models.DateTimeField(null=True, blank=True)
    # The sync lock: claimed with a conditional UPDATE so that two workers, on any machines,
    # never sync the same account at once. It expires, so a killed worker cannot hold it forever.
    sync_lock_token = models.CharField(max_length=64, blank=True)
    sync_locked_until = models.DateTimeField(null=True, blank=True)
    # The balance Runpod reported (GraphQL `myself`, while it exists), read by each sync.
    balance_usd = PreciseMoneyField(null=True, blank=True)
    balance_spend_per_hr_usd = PreciseMoneyField(null=True, blank=True)
    balance_fetched_at = models.DateTimeField(null=True, blank=True)
    # Admin-entered balance, used by balance alerts when the API offers none.
    manual_balance_usd = PreciseMoneyField(null=True, blank=True)
    manual_balance_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["institution", "name"], name="runpod_account_unique_name"
            )
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_focus(self) -> bool:
        return self.billing_source == BillingSource.FOCUS


class SyncRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped (another sync was running)"

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule", "Schedule"
        MANUAL = "manual", "Manual"
        COMMAND = "command", "Command"
        IMPORT = "import", "FOCUS file import"

    account = models.ForeignKey(
        RunpodAccount, on_delete=models.PROTECT, related_name="sync_runs", db_index=False
    )
    trigger = models.CharField(max_length=20, choices=Trigger.choices, default=Trigger.SCHEDULE)
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    phase = models.CharField(max_length=60, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["account", "status", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.account} sync {self.started_at:%Y-%m-%d %H:%M} {self.status}"

    @property
    def progress_percent(self) -> int:
        if not self.progress_total:
            return 0
        return min(100, round(100 * self.progress_done / self.progress_total))


class ResourceKind(models.TextChoices):
    POD = "pod", "Pod"
    NETWORK_VOLUME = "network_volume", "Network volume"
    SERVERLESS = "serverless", "Serverless endpoint"
    CLUSTER = "cluster", "Cluster"
    # /v2/billing/endpoints bills without resource ids: one pseudo-resource per account holds it.
    ENDPOINT = "endpoint", "Endpoints (account-wide)"
    # Anything another provider bills in a FOCUS file (its ResourceId; rows without one go
    # to one pseudo-resource per service and sub-account).
    CLOUD = "cloud", "Cloud resource (FOCUS)"


class ResourceQuerySet(models.QuerySet):
    def present(self):
        return self.filter(gone_at__isnull=True)


class Resource(models.Model):
    """Anything Runpod bills: a pod, network volume, serverless endpoint or cluster.

    Rows are never deleted: a resource that disappears from Runpod's lists keeps its history
    and gets `gone_at`. Kind-specific fields are blank where they do not apply.
    """

    # No index of its own: the unique (account, kind, runpod_id) and (account, kind, gone_at)
    # lead with it. Every index is one more write each time a sync slice moves a resource's
    # unattributed_usd.
    account = models.ForeignKey(
        RunpodAccount, on_delete=models.PROTECT, related_name="resources", db_index=False
    )
    kind = models.CharField(max_length=20, choices=ResourceKind.choices)
    runpod_id = models.CharField(max_length=400)  # FOCUS ResourceIds (ARNs) run long
    name = models.CharField(max_length=300, blank=True)  # Runpod's (as synced)
    # What it was asked for as, when labgov provisioned it (the request's title): Runpod's
    # name carries the request's marker (labgov-r12-3f9a…-fine-tune-8b), which people need not
    # read. Pages show `label`.
    requested_name = models.CharField(max_length=120, blank=True)
    status = models.CharField(max_length=30, blank=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)
    cost_per_hr_usd = PreciseMoneyField(default=0)
    gpu_type_id = models.CharField(max_length=100, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    cloud = models.CharField(max_length=20, blank=True)
    data_center_id = models.CharField(max_length=60, blank=True)
    template_id = models.CharField(max_length=100, blank=True)
    image = models.CharField(max_length=300, blank=True)
    env = models.JSONField(default=dict, blank=True)
    container_disk_gb = models.PositiveIntegerField(default=0)
    volume_disk_gb = models.PositiveIntegerField(default=0)
    network_volume_id = models.CharField(max_length=100, blank=True)
    cluster_id = models.CharField(max_length=100, blank=True)
    size_gb = models.PositiveIntegerField(default=0)  # network volumes
    volume_type = models.CharField(max_length=30, blank=True)  # network volumes
    details = models.JSONField(default=dict, blank=True)
    created_at_runpod = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    gone_at = models.DateTimeField(null=True, blank=True)
    # All of its billed spend that nobody owns, kept by the sync and by re-assignments, so the
    # unattributed queue need not add up millions of records.
    unattributed_usd = PreciseMoneyField(default=0)
    # Why the allocation tag in its environment (LABGOV_ALLOCATION) was not honoured; blank
    # when it carries none or it was.
    tag_refusal = models.CharField(max_length=300, blank=True)
    # Who pays for it now (the latest assignment); past buckets keep the attribution they had.
    current_allocation = models.ForeignKey(
        "funding.Allocation",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # Meta.indexes has it
    )

    objects = ResourceQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "kind", "runpod_id"], name="resource_unique_runpod_id"
            )
        ]
        indexes = [
            models.Index(fields=["account", "kind", "gone_at"]),
            models.Index(fields=["current_allocation"]),
            # Which running pod mounts a network volume (the dashboards' idle storage, "no
            # running pod of its account mounts it"): one probe per volume, where PostgreSQL
            # otherwise read every running pod of every account on each page.
            models.Index(
                fields=["account", "network_volume_id"],
                name="resource_running_mounts",
                condition=Q(kind="pod", status="RUNNING", gone_at__isnull=True),
            ),
        ]
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.label}"

    @property
    def label(self) -> str:
        """What people call it: the name it was requested under, else Runpod's, else its id."""
        return self.requested_name or self.name or self.runpod_id

    @property
    def billing_only(self) -> bool:
        """Billed but never listed by Runpod (gone before labgov's first sync): no name, no
        status, only its billing records tell what it was."""
        return self.status == "" and self.kind != ResourceKind.ENDPOINT


class ChargeCategory(models.TextChoices):
    """FOCUS's ChargeCategory, in the order a record of several takes the first of."""

    USAGE = "Usage"
    PURCHASE = "Purchase"
    TAX = "Tax"
    CREDIT = "Credit"
    ADJUSTMENT = "Adjustment"


class ChargeClass(models.TextChoices):
    NONE = "", "—"
    CORRECTION = "Correction"


class BillingRecordQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):
        # On PostgreSQL each month is a partition that must exist before a row lands in it
        # (labgov.runpod.partitions); the sync's bulk writer makes its own, this is for
        # everything else (the generic writer, the admin, tests).
        objs = list(objs)
        months = partitions.months_of(obj.bucket_start for obj in objs)
        return partitions.write_months(
            months, lambda: super(BillingRecordQuerySet, self).bulk_create(objs, *args, **kwargs)
        )


class BillingRecord(models.Model):
    """One hourly (or coarser) bucket [bucket_start, bucket_end) of one resource's spend,
    stored exactly as Runpod sent it, with the allocation it is attributed to (null:
    unattributed).

    The natural key (resource, bucket start) is the primary key: a sync upserts on it, and a
    table of millions of rows carries no index it does not need. Its two references carry no
    database constraint, which would cost a check per row on every sync: rows are written only
    by `billing_store`, which takes resource ids from a join with `runpod_resource` and
    allocation ids from `runpod_assignment` (whose own foreign keys hold), and resources are
    never deleted (a trigger refuses it on PostgreSQL).
    """

    pk = models.CompositePrimaryKey("resource", "bucket_start")
    resource = models.ForeignKey(
        Resource,
        on_delete=models.PROTECT,
        related_name="billing_records",
        db_index=False,
        db_constraint=False,
    )
    kind = models.CharField(max_length=20, choices=ResourceKind.choices)
    bucket_start = models.DateTimeField()
    bucket_end = models.DateTimeField()
    total_usd = PreciseMoneyField()
    gpu_usd = PreciseMoneyField(default=0)
    cpu_usd = PreciseMoneyField(default=0)
    disk_usd = PreciseMoneyField(default=0)
    storage_standard_usd = PreciseMoneyField(default=0)
    storage_high_performance_usd = PreciseMoneyField(default=0)
    fee_usd = PreciseMoneyField(default=0)
    networking_usd = PreciseMoneyField(default=0)
    # FOCUS sources' records (labgov/runpod/focus.py): the FOCUS ChargeCategory and ChargeClass
    # of the rows summed into the record, and the credits and adjustments among them, so
    # invoices and the reconciliation show them as such. One record is one resource's charges
    # of one charge period: where a usage row and its credit share one, the record is Usage
    # and its credit_usd holds the credit. Runpod's records are Usage. Database defaults: the
    # sync's raw inserts do not name these columns.
    charge_category = models.CharField(
        max_length=12, choices=ChargeCategory.choices, default="Usage", db_default="Usage"
    )
    charge_class = models.CharField(
        max_length=12, choices=ChargeClass.choices, blank=True, default="", db_default=""
    )
    credit_usd = PreciseMoneyField(default=0, db_default=Decimal(0))
    adjustment_usd = PreciseMoneyField(default=0, db_default=Decimal(0))
    allocation = models.ForeignKey(
        "funding.Allocation",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    synced_at = models.DateTimeField(default=timezone.now)

    objects = BillingRecordQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(bucket_end__gt=models.F("bucket_start")), name="billing_bucket_order"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource_id} {self.bucket_start:%Y-%m-%d %H:%M} {self.total_usd}"

    def save(self, *args, **kwargs):
        # Storage, not business: the row's month partition must exist (see bulk_create).
        partitions.write_months(
            partitions.months_of([self.bucket_start]),
            lambda: super(BillingRecord, self).save(*args, **kwargs),
        )


class AccountBillingRecord(models.Model):
    """Runpod's own total for the whole account per bucket: the figure to reconcile against."""

    account = models.ForeignKey(
        RunpodAccount, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    bucket_start = models.DateTimeField()
    bucket_end = models.DateTimeField()
    total_usd = PreciseMoneyField()
    components = models.JSONField(default=dict)
    synced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account", "bucket_start"], name="account_billing_unique_bucket"
            )
        ]

    def __str__(self) -> str:
        return f"{self.account_id} {self.bucket_start:%Y-%m-%d %H:%M} {self.total_usd}"


class FocusFile(models.Model):
    """One FOCUS file imported into a FOCUS billing source: what it said, for idempotence (the
    same file again changes nothing), for corrections (a new file of the month replaces the
    records the earlier one wrote) and for the reconciliation (the file's own totals)."""

    account = models.ForeignKey(
        RunpodAccount, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    run = models.ForeignKey(SyncRun, on_delete=models.PROTECT, related_name="+")
    file_name = models.CharField(max_length=255, blank=True)
    sha256 = models.CharField(max_length=64)
    focus_version = models.CharField(max_length=10, blank=True)
    period_start = models.DateTimeField()  # BillingPeriodStart
    period_end = models.DateTimeField()
    rows = models.PositiveIntegerField(default=0)
    records = models.PositiveIntegerField(default=0)
    currency = models.CharField(max_length=3)
    usd_per_unit = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    billed_total = PreciseMoneyField()  # the sum of BilledCost, in the file's currency
    total_usd = PreciseMoneyField()
    # BilledCost per ChargeCategory (Usage, Purchase, Tax, Credit, Adjustment), as text.
    charge_categories = models.JSONField(default=dict, blank=True)
    # A file of a closed month: its differences became late usage in the first open month.
    late = models.BooleanField(default=False)
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-imported_at", "-id"]
        indexes = [models.Index(fields=["account", "period_start", "-imported_at"])]

    def __str__(self) -> str:
        return f"{self.account} FOCUS {self.period_start:%Y-%m} {self.sha256[:12]}"


class FocusDrop(models.Model):
    """A file the worker found in a FOCUS source's folder, once per content (SHA-256): what
    became of it, in words, shown beside the uploaded files. A file is never read twice."""

    class Outcome(models.TextChoices):
        IMPORTING = "importing"
        IMPORTED = "imported"
        UNCHANGED = "unchanged", "unchanged (imported already)"
        REFUSED = "refused"

    account = models.ForeignKey(
        RunpodAccount, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    file_name = models.CharField(max_length=255)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField(default=0)
    # The file's modification time when read: a file of the same name, size and time is not
    # hashed again on the next round (a folder keeps months of large files).
    modified_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=12, choices=Outcome.choices)
    message = models.TextField(blank=True)
    file = models.ForeignKey(
        FocusFile, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    found_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-found_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["account", "sha256"], name="focus_drop_once"),
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.file_name} {self.outcome}"


class GpuType(models.Model):
    """Runpod's GPU catalog, refreshed by the sync; prices in USD per GPU-hour."""

    gpu_id = models.CharField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    memory_gb = models.PositiveIntegerField(default=0)
    secure_price_per_hr_usd = PreciseMoneyField(default=0)
    community_price_per_hr_usd = PreciseMoneyField(default=0)
    serverless_price_per_hr_usd = PreciseMoneyField(null=True, blank=True)
    secure_available = models.BooleanField(default=False)
    community_available = models.BooleanField(default=False)
    max_count_secure = models.PositiveIntegerField(default=0)
    max_count_community = models.PositiveIntegerField(default=0)
    # The serverless pool the type belongs to (what an endpoint asks for), blank if in none.
    pool = models.CharField(max_length=60, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AttributionRule(models.Model):
    """A lab admin's rule: resources matching it are paid by `allocation`."""

    class Kind(models.TextChoices):
        NAME_PREFIX = "name_prefix", "Name starts with"
        ENV_VAR = "env_var", "Environment variable equals"
        TEMPLATE = "template", "Template is"
        ACCOUNT = "account", "Everything in the Runpod account"
        # FOCUS sources (a Resource's FOCUS tags are its env; SubAccountId is in details).
        RESOURCE_ID = "resource_id", "Resource id is"
        TAG = "tag", "Tag equals"
        SUB_ACCOUNT = "sub_account", "Sub-account is"

    # Checked in this order; within a kind, the longest (most specific) pattern wins.
    PRECEDENCE = (
        Kind.RESOURCE_ID,
        Kind.ENV_VAR,
        Kind.TAG,
        Kind.TEMPLATE,
        Kind.NAME_PREFIX,
        Kind.SUB_ACCOUNT,
        Kind.ACCOUNT,
    )

    lab = models.ForeignKey("accounts.Lab", on_delete=models.PROTECT, related_name="+")
    account = models.ForeignKey(
        RunpodAccount,
        on_delete=models.PROTECT,
        related_name="attribution_rules",
        help_text="The Runpod account the rule applies to.",
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # NAME_PREFIX: the prefix; ENV_VAR and TAG: "NAME=value"; TEMPLATE: the template id;
    # RESOURCE_ID: the id; SUB_ACCOUNT: the SubAccountId; ACCOUNT: "".
    pattern = models.CharField(max_length=300, blank=True)
    allocation = models.ForeignKey("funding.Allocation", on_delete=models.PROTECT, related_name="+")
    is_active = models.BooleanField(default=True)
    # Spend from this moment on is the rule's: when it was made, or an earlier start an
    # institution admin chose (within an open period).
    starts_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["kind", "pattern"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.pattern}".strip()


class Assignment(models.Model):
    """From `starts_at` on, `resource`'s spend belongs to `allocation` (null: explicitly
    unattributed). The latest assignment starting at or before a bucket decides that bucket,
    so re-assigning a resource never rewrites spend before the new start."""

    class Source(models.TextChoices):
        PROVISIONED = "provisioned", "Provisioned by labgov"
        RULE = "rule", "Attribution rule"
        MANUAL = "manual", "Assigned by hand"

    # Its index leads Meta.indexes' (resource, starts_at): the foreign key needs no other.
    resource = models.ForeignKey(
        Resource, on_delete=models.PROTECT, related_name="assignments", db_index=False
    )
    allocation = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    starts_at = models.DateTimeField()
    source = models.CharField(max_length=20, choices=Source.choices)
    rule = models.ForeignKey(
        AttributionRule, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["resource", "starts_at", "id"]
        indexes = [models.Index(fields=["resource", "starts_at"])]

    def __str__(self) -> str:
        who = self.allocation or "unattributed"
        return f"{self.resource} → {who} from {self.starts_at:%Y-%m-%d %H:%M}"


class AssignmentShare(models.Model):
    """Split funding: a share of the spend of an assignment's period paid by one allocation.

    An assignment with shares pays its resource's spend from several allocations in fixed
    percentages (summing to exactly 100); its `allocation` is the largest share, the one the
    billing records name. The rollups and the ledger split each day's amounts by the shares
    (labgov/usage/services.py: split_deltas), so every part adds up to the records exactly.
    Shares are never edited: a new split is a new assignment, so the timeline keeps history.
    """

    assignment = models.ForeignKey(
        Assignment, on_delete=models.PROTECT, related_name="shares", db_index=False
    )
    allocation = models.ForeignKey("funding.Allocation", on_delete=models.PROTECT, related_name="+")
    share_percent = models.DecimalField(max_digits=5, decimal_places=2)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["assignment", "allocation"], name="assignment_share_unique_allocation"
            ),
            models.CheckConstraint(
                condition=Q(share_percent__gt=0, share_percent__lt=100),
                name="assignment_share_between_0_and_100",
            ),
        ]
        ordering = ["assignment", "-share_percent", "allocation"]

    def __str__(self) -> str:
        return f"{self.share_percent}% by {self.allocation_id}"


class TagClaim(models.Model):
    """A resource on a Runpod account several labs share, carrying an allocation's tag
    (`LABGOV_ALLOCATION`). Anyone on the Runpod team can read a tag (a pod's env is listed by
    `GET /v2/pods`) and put it on a pod of their own, so on a shared account the tag is only a
    claim: the resource stays unattributed until the allocation's holder or a lab admin of its
    lab confirms it (labgov/runpod/tag_claims.py). On a lab's own account a tag counts at once.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for confirmation"
        CONFIRMED = "confirmed", "Confirmed"
        REJECTED = "rejected", "Rejected"

    resource = models.ForeignKey(
        Resource, on_delete=models.PROTECT, related_name="tag_claims", db_index=False
    )
    allocation = models.ForeignKey("funding.Allocation", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "pk"]
        constraints = [
            # One claim per resource and allocation: a rejected tag is not claimed again.
            models.UniqueConstraint(fields=["resource", "allocation"], name="tag_claim_once"),
            models.CheckConstraint(
                condition=Q(status="pending") | Q(decided_at__isnull=False),
                name="tag_claim_decided_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource} claims {self.allocation_id} ({self.status})"
