from decimal import Decimal

from django import forms

from labgov.core.bounds import BoundedForm
from labgov.provisioning.assessment import IDLE_TIMEOUT_MAX, endpoint_workers_problems
from labgov.provisioning.models import (
    Cloud,
    ClusterType,
    DeploymentModel,
    ProvisioningPolicy,
    ProvisioningRequest,
    ScalingType,
)
from labgov.provisioning.services.policies import POLICY_FIELDS
from labgov.provisioning.services.requests import REQUEST_FIELDS

R = ProvisioningRequest


def _dec(label, *, required=False, places=2, help_text="", minimum=Decimal(0), initial=None):
    return forms.DecimalField(
        label=label,
        required=required,
        min_value=minimum,
        decimal_places=places,
        max_digits=12,
        help_text=help_text,
        initial=initial,
    )


def _int(label, *, initial=0, minimum=0, help_text="", required=False):
    return forms.IntegerField(
        label=label, min_value=minimum, initial=initial, help_text=help_text, required=required
    )


class RequestForm(BoundedForm):
    """What a requester fills in. Blank numbers count as 0 (or "not given" where that
    differs), so a half-filled form still yields an estimate."""

    bounded_model = R

    allocation = forms.ModelChoiceField(queryset=None, empty_label=None, label="Paid by")
    title = forms.CharField(max_length=120, help_text="e.g. Fine-tune an 8B model")
    deployment_model = forms.ChoiceField(choices=DeploymentModel.choices, label="Deployment")
    gpu_type_id = forms.ChoiceField(label="GPU type")
    gpu_count = _int("GPUs", initial=1, minimum=1, help_text="Per pod, worker or node.")
    cloud = forms.ChoiceField(choices=Cloud.choices)
    interruptible = forms.BooleanField(required=False, label="Interruptible (spot) capacity")
    image = forms.CharField(max_length=300, required=False, label="Container image")
    data_center_id = forms.CharField(
        max_length=60, required=False, label="Data center", help_text="e.g. US-KS-2"
    )
    expected_hours = _dec("Expected active hours", help_text="Pods and clusters.")
    node_count = _int("Nodes", initial=1, minimum=1, help_text="Clusters only.")
    requests_per_day = _dec("Requests per day", help_text="Serverless.")
    seconds_per_request = _dec("Seconds per request", places=3, help_text="Serverless.")
    idle_workers = _int("Always-on workers", help_text="Serverless: workers kept running.")
    duration_days = _dec("Days of service", help_text="Serverless.")
    template_id = forms.CharField(
        max_length=100,
        required=False,
        label="Runpod template id",
        help_text="Serverless: a template instead of (or beside) the container image.",
    )
    workers_max = _int("Most workers", initial=3, help_text="Serverless: workers.max.")
    idle_timeout_seconds = _int(
        "Idle timeout (seconds)",
        initial=5,
        minimum=1,
        help_text="Serverless: how long a worker idles before it stops (1 to 3,600).",
    )
    scaling_type = forms.ChoiceField(
        choices=ScalingType.choices, required=False, label="Scale by", help_text="Serverless."
    )
    scaling_value = _int(
        "Scaling threshold",
        initial=4,
        minimum=1,
        help_text="Serverless: seconds of queue delay, or requests per worker.",
    )
    cluster_type = forms.ChoiceField(
        choices=ClusterType.choices, required=False, label="Cluster type", help_text="Clusters."
    )
    network_volume_id = forms.CharField(
        max_length=100,
        required=False,
        label="Existing network volume id",
        help_text="Endpoints and clusters: mount this volume of the lab's Runpod account "
        "(in the data center above) instead of a new one.",
    )
    container_disk_gb = _int("Container disk (GB)", initial=20, help_text="Erased on stop.")
    volume_disk_gb = _int("Volume disk (GB)", help_text="0, or at least 10. Bills double stopped.")
    network_volume_gb = _int(
        "Network volume (GB)", help_text="0, or 10 to 4,096. Secure Cloud only."
    )
    storage_kept_days = _dec(
        "Storage kept after the work (days)",
        help_text="How long the volume disk or network volume stays after the run ends.",
    )
    model_params_billion = _dec("Model size (billion parameters)", places=3)
    bytes_per_param = _dec(
        "Bytes per parameter", help_text="≈14 for a full mixed-precision fine-tune with Adam."
    )
    checkpoint_size_gb = _dec("…or checkpoint size (GB)", places=3)
    write_mb_per_s = _dec("Write rate (MB/s)", help_text="Network volumes: 200–400 MB/s.")
    checkpoint_interval_minutes = _dec("Checkpoint every (minutes)")
    restart_minutes = _dec("Restart and restore (minutes)", initial=Decimal(10))
    runs_distributed = forms.BooleanField(
        required=False, label="The software runs distributed across nodes (clusters)"
    )
    data_exchange = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="How the nodes exchange data",
        help_text="Clusters: e.g. NCCL all-reduce over the cluster network.",
    )
    shared_files_location = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Where shared model files live",
        help_text="Clusters: e.g. on the cluster's network volume.",
    )
    gpu_memory_needed_gb = _int("GPU memory needed (GB)", help_text="Clusters.")
    spending_limit_raised = forms.BooleanField(
        required=False, label="Runpod has raised our spending limit for a larger cluster"
    )
    check_image_starts = forms.BooleanField(required=False, label="The container image starts")
    check_model_fits = forms.BooleanField(required=False, label="The model fits in GPU memory")
    checkpoint_location = forms.ChoiceField(
        choices=R.CheckpointLocation.choices, required=False, label="Checkpoints survive a stop on"
    )
    interruption_tolerance = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        help_text="What happens to the work if the pod stops without warning?",
    )
    cost_measurement = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        label="Representative cost measurement",
        help_text="e.g. a 30-minute trial cost $2.20 for 1/20 of the data.",
    )
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)

    def __init__(self, *args, allocations, gpus, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["allocation"].queryset = allocations
        self.gpus_by_id = {g.gpu_id: g for g in gpus}
        self.fields["gpu_type_id"].choices = [
            (g.gpu_id, f"{g.name} ({g.memory_gb} GB)") for g in gpus
        ]
        # Each field is described by its help text and by its error, which the live estimate
        # fills in beside it (templates/provisioning/field.html).
        for name, field in self.fields.items():
            described = [f"id_{name}-help"] if field.help_text else []
            field.widget.attrs["aria-describedby"] = " ".join([*described, f"id_{name}-error"])

    def clean(self):
        data = super().clean()
        volume = data.get("volume_disk_gb") or 0
        if 0 < volume < 10:
            self.add_error("volume_disk_gb", "A volume disk is at least 10 GB.")
        network = data.get("network_volume_gb") or 0
        if 0 < network < 10 or network > 4096:
            self.add_error("network_volume_gb", "A network volume is 10 to 4,096 GB.")
        if data.get("deployment_model") == DeploymentModel.SERVERLESS:
            self._check_workers(data)
        else:
            idle = data.get("idle_timeout_seconds")
            if idle is not None and idle > IDLE_TIMEOUT_MAX:
                self.add_error("idle_timeout_seconds", "An idle timeout is 1 to 3,600 seconds.")
        for name in ("template_id", "network_volume_id"):
            value = (data.get(name) or "").strip()
            if value and not value.replace("-", "").replace("_", "").isalnum():
                self.add_error(name, "A Runpod id has only letters, digits, - and _.")
        return data

    def _check_workers(self, data) -> None:
        """An endpoint's workers as Runpod takes them (max ≥ min, …), each beside its field;
        a blank counts as the default it stands for."""
        defaults = R()

        def given(name):
            value = data.get(name)
            return getattr(defaults, name) if value is None else value

        if any(name in self.errors for name in ("idle_workers", "workers_max")):
            return  # already refused in the field's own words
        problems = endpoint_workers_problems(
            workers_min=given("idle_workers"),
            workers_max=given("workers_max"),
            idle_timeout_seconds=data.get("idle_timeout_seconds"),
        )
        for name, message in problems.items():
            if name not in self.errors:
                self.add_error(name, message)

    def values(self) -> dict:
        """The valid fields as request values; blanks become the model's defaults."""
        defaults = R()
        out = {}
        for name in REQUEST_FIELDS:
            if name not in self.cleaned_data:
                continue
            value = self.cleaned_data[name]
            if value is None or (value == "" and name in ("scaling_type", "cluster_type")):
                value = getattr(defaults, name)
            out[name] = value
        return out

    @classmethod
    def initial_from(cls, req: ProvisioningRequest) -> dict:
        initial = {name: getattr(req, name) for name in REQUEST_FIELDS}
        initial["allocation"] = req.allocation_id
        return initial


class DenyForm(BoundedForm):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.TextInput(attrs={"size": 30, "aria-label": "Reason for denying"}),
    )


class MarkProvisionedForm(BoundedForm):
    bounded_model = R

    account = forms.ModelChoiceField(queryset=None, empty_label=None, label="Runpod account")
    runpod_id = forms.CharField(max_length=100, label="Runpod id of the endpoint or cluster")

    def __init__(self, *args, accounts, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["account"].queryset = accounts


class PolicyForm(BoundedForm):
    bounded_model = ProvisioningPolicy

    allowed_models = forms.MultipleChoiceField(
        choices=DeploymentModel.choices, widget=forms.CheckboxSelectMultiple
    )
    allowed_clouds = forms.MultipleChoiceField(
        choices=Cloud.choices, widget=forms.CheckboxSelectMultiple
    )
    allowed_gpu_types = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Allowed GPU types",
        help_text="None ticked: every GPU type in the synced catalog.",
    )
    max_gpus = forms.IntegerField(
        required=False, min_value=1, label="Maximum GPUs per request", help_text="Blank: none."
    )
    max_usd_per_hour = forms.DecimalField(
        required=False, decimal_places=2, label="Maximum $/hour", help_text="Blank: none."
    )
    max_request_usd = forms.DecimalField(
        required=False, decimal_places=2, label="Maximum $ per request", help_text="Blank: none."
    )
    auto_approve_under_usd = forms.DecimalField(
        decimal_places=2,
        min_value=0,
        initial=0,
        label="Approve automatically under $",
        help_text="0: every request needs a lab admin.",
    )
    second_approval_over_usd = forms.DecimalField(
        required=False,
        decimal_places=2,
        min_value=0,
        label="Second approver above $",
        help_text="Blank: one approver is enough.",
    )

    def __init__(self, *args, gpus, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["allowed_gpu_types"].choices = [(g.gpu_id, g.name) for g in gpus]

    @classmethod
    def initial_from(cls, policy) -> dict:
        return {name: getattr(policy, name) for name in POLICY_FIELDS}
