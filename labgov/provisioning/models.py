from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from labgov.accounts import access
from labgov.core.money import BudgetField, PreciseMoneyField


class DeploymentModel(models.TextChoices):
    POD = "pod", "Pod"
    SERVERLESS = "serverless", "Serverless endpoint"
    CLUSTER = "cluster", "Cluster"


class ScalingType(models.TextChoices):
    QUEUE_DELAY = "QUEUE_DELAY", "Queue delay (seconds a request may wait)"
    REQUEST_COUNT = "REQUEST_COUNT", "Request count (requests per worker)"


class ClusterType(models.TextChoices):
    TRAINING = "TRAINING", "Training (PyTorch distributed and the like)"
    SLURM = "SLURM", "Slurm"
    RAY = "RAY", "Ray"
    APPLICATION = "APPLICATION", "Application"


class Cloud(models.TextChoices):
    SECURE = "SECURE", "Secure Cloud"
    COMMUNITY = "COMMUNITY", "Community Cloud"


class ProvisioningPolicy(models.Model):
    """What a lab may request, and who must approve it. A lab without its own policy follows
    its institution's default (the row with no lab); the lab's own policy replaces the default
    whole, it does not merge with it."""

    institution = models.ForeignKey(
        "accounts.Institution", on_delete=models.PROTECT, related_name="+"
    )
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    allowed_models = models.JSONField(default=list, help_text="DeploymentModel values.")
    # Empty: every GPU type in the synced catalog.
    allowed_gpu_types = models.JSONField(default=list, blank=True)
    allowed_clouds = models.JSONField(default=list, help_text="Cloud values.")
    max_gpus = models.PositiveIntegerField(null=True, blank=True)
    max_usd_per_hour = BudgetField(null=True, blank=True)
    max_request_usd = BudgetField(null=True, blank=True)
    # Requests estimated below this are approved on submission. 0: never.
    auto_approve_under_usd = BudgetField(default=0)
    # Above this a second, different approver is needed. Null: never.
    second_approval_over_usd = BudgetField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["institution"],
                condition=Q(lab__isnull=True),
                name="policy_one_default_per_institution",
            ),
            models.UniqueConstraint(
                fields=["lab"], condition=Q(lab__isnull=False), name="policy_one_per_lab"
            ),
            models.CheckConstraint(
                condition=Q(auto_approve_under_usd__gte=0), name="policy_auto_approve_positive"
            ),
        ]
        verbose_name_plural = "provisioning policies"

    def __str__(self) -> str:
        return f"Policy of {self.lab}" if self.lab_id else f"Default policy of {self.institution}"


class RequestQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(access.provisioning_requests_q(user))


class ProvisioningRequest(models.Model):
    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        SUBMITTED = "submitted", "Submitted"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        PROVISIONING = "provisioning", "Provisioning"
        PROVISIONED = "provisioned", "Provisioned"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"

    class CheckpointLocation(models.TextChoices):
        NONE = "", "Not decided"
        NETWORK_VOLUME = "network_volume", "Network volume (survives stop and termination)"
        VOLUME_DISK = "volume_disk", "Volume disk (survives a stop, not termination)"
        OFF_PLATFORM = "off_platform", "Copied off Runpod (object storage)"
        CONTAINER_DISK = "container_disk", "Container disk (lost on every stop)"

    # Who, for what, paid by which allocation. `lab` is the allocation's lab, kept here so
    # requests can be scoped without joins.
    lab = models.ForeignKey(
        "accounts.Lab", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="provisioning_requests",
        db_index=False,  # Meta leads an index with it
    )
    allocation = models.ForeignKey(
        "funding.Allocation", on_delete=models.PROTECT, related_name="provisioning_requests"
    )
    title = models.CharField(max_length=120)
    deployment_model = models.CharField(
        max_length=20, choices=DeploymentModel.choices, default=DeploymentModel.POD
    )
    gpu_type_id = models.CharField(max_length=100)
    gpu_count = models.PositiveIntegerField(default=1, help_text="Per pod, worker or node.")
    node_count = models.PositiveIntegerField(default=1, help_text="Clusters only.")
    cloud = models.CharField(max_length=20, choices=Cloud.choices, default=Cloud.SECURE)
    interruptible = models.BooleanField(default=False)
    image = models.CharField(max_length=300, blank=True)
    data_center_id = models.CharField(max_length=60, blank=True)
    # Pods and clusters.
    expected_hours = models.DecimalField(max_digits=10, decimal_places=2, default=0)
    # Serverless: a representative request pattern.
    requests_per_day = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    seconds_per_request = models.DecimalField(max_digits=10, decimal_places=3, default=0)
    idle_workers = models.PositiveIntegerField(default=0)
    duration_days = models.DecimalField(max_digits=8, decimal_places=2, default=0)
    # Serverless: what labgov creates (workers.min is idle_workers).
    template_id = models.CharField(max_length=100, blank=True)
    workers_max = models.PositiveIntegerField(default=3)
    idle_timeout_seconds = models.PositiveIntegerField(default=5)
    scaling_type = models.CharField(
        max_length=20, choices=ScalingType.choices, default=ScalingType.QUEUE_DELAY
    )
    scaling_value = models.PositiveIntegerField(default=4)
    # Clusters: what labgov creates.
    cluster_type = models.CharField(
        max_length=20, choices=ClusterType.choices, default=ClusterType.TRAINING
    )
    # An existing network volume to mount (endpoints and clusters), instead of a new one.
    network_volume_id = models.CharField(max_length=100, blank=True)
    # Storage.
    container_disk_gb = models.PositiveIntegerField(default=20)
    volume_disk_gb = models.PositiveIntegerField(default=0)
    network_volume_gb = models.PositiveIntegerField(default=0)
    storage_kept_days = models.DecimalField(max_digits=8, decimal_places=2, default=0)
    # Checkpoint plan.
    model_params_billion = models.DecimalField(
        max_digits=10, decimal_places=3, null=True, blank=True
    )
    bytes_per_param = models.DecimalField(max_digits=6, decimal_places=2, null=True, blank=True)
    checkpoint_size_gb = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    write_mb_per_s = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    checkpoint_interval_minutes = models.DecimalField(
        max_digits=8, decimal_places=2, null=True, blank=True
    )
    restart_minutes = models.DecimalField(max_digits=6, decimal_places=2, default=10)
    # Clusters: why more than one node.
    runs_distributed = models.BooleanField(default=False)
    data_exchange = models.TextField(blank=True)  # how the nodes exchange data
    shared_files_location = models.TextField(blank=True)  # where shared model files live
    gpu_memory_needed_gb = models.PositiveIntegerField(null=True, blank=True)
    spending_limit_raised = models.BooleanField(default=False)
    # The acceptance checklist.
    check_image_starts = models.BooleanField(default=False)
    check_model_fits = models.BooleanField(default=False)
    checkpoint_location = models.CharField(
        max_length=20, choices=CheckpointLocation.choices, blank=True
    )
    interruption_tolerance = models.TextField(blank=True)
    cost_measurement = models.TextField(blank=True)
    justification = models.TextField(blank=True)

    # The estimate as last computed (on save and on submission), in full precision.
    gpu_price_per_hr_usd = PreciseMoneyField(default=0)
    hourly_rate_usd = PreciseMoneyField(default=0)
    estimate_compute_usd = PreciseMoneyField(default=0)
    estimate_storage_running_usd = PreciseMoneyField(default=0)
    estimate_storage_after_usd = PreciseMoneyField(default=0)
    estimate_total_usd = PreciseMoneyField(default=0)
    estimate_stop_usd = PreciseMoneyField(default=0)

    state = models.CharField(max_length=20, choices=State.choices, default=State.DRAFT)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    submitted_at = models.DateTimeField(null=True, blank=True)
    first_approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    first_approved_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    auto_approved = models.BooleanField(default=False)
    decision_reason = models.TextField(blank=True)

    # This request's part of the allocation's committed money, kept equal to the sum of its
    # ledger entries (keys "request:<id>:…") in the transaction that posts them.
    commitment_usd = PreciseMoneyField(default=0)
    ledger_seq = models.PositiveIntegerField(default=0)
    # Billing records of the request's resources from this hour on are its actual spend.
    spend_counted_from = models.DateTimeField(null=True, blank=True)

    # Provisioning on Runpod.
    runpod_account = models.ForeignKey(
        "runpod.RunpodAccount", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    runpod_id = models.CharField(max_length=100, blank=True)
    resources = models.ManyToManyField(
        "runpod.Resource", blank=True, related_name="provisioning_requests"
    )
    provision_attempts = models.PositiveIntegerField(default=0)
    # Every attempt names what it creates on Runpod with a random token of its own (see
    # `marker`), so nobody can prepare a resource a retry would mistake for its own.
    provision_token = models.CharField(max_length=32, blank=True)
    provision_started_at = models.DateTimeField(null=True, blank=True)
    # Set when an attempt begins and cleared once its outcome is known: while set, Runpod may
    # hold what the attempt created, and only the next attempt may adopt it.
    provision_outcome_unknown = models.BooleanField(default=False)
    # A worker claims a provisioning attempt with a conditional UPDATE; the claim expires so a
    # killed worker does not block the retry forever.
    provision_claimed_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    provisioned_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = RequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["lab", "state"]),
            models.Index(fields=["requester", "state"]),
            models.Index(fields=["state", "submitted_at"]),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gte=1), name="request_gpu_count_positive"
            ),
            models.CheckConstraint(
                condition=Q(node_count__gte=1), name="request_node_count_positive"
            ),
            models.CheckConstraint(
                condition=Q(estimate_total_usd__gte=0), name="request_estimate_positive"
            ),
            models.CheckConstraint(
                condition=Q(commitment_usd__gte=0), name="request_commitment_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"

    @property
    def total_gpus(self) -> int:
        nodes = self.node_count if self.deployment_model == DeploymentModel.CLUSTER else 1
        return self.gpu_count * nodes

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def marker(self) -> str:
        """The prefix of the name of every Runpod resource the current attempt creates: the
        request's id for people, the attempt's random token so nobody can guess it ahead."""
        return f"labgov-r{self.pk}-{self.provision_token}-"


S = ProvisioningRequest.State
# States in which the request's money stays committed.
COMMITTED_STATES = (S.APPROVED, S.PROVISIONING, S.PROVISIONED)
OPEN_STATES = (S.DRAFT, S.SUBMITTED, S.APPROVED, S.PROVISIONING, S.FAILED)
ENDED_STATES = (S.DENIED, S.CANCELLED, S.EXPIRED)
