"""What the API returns. Money is a decimal string with its currency beside it (never a
float); times are UTC in ISO 8601; dates are calendar days."""

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from labgov.accounts.models import Institution, Lab, Membership
from labgov.alerts.models import Alert
from labgov.api.models import ApiToken
from labgov.funding.models import Allocation, FundingSource, LedgerEntry
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.notifications.models import Notification
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services.requests import REQUEST_FIELDS
from labgov.retention.models import Hold, RetentionCase
from labgov.runpod.models import Assignment, Resource, RunpodAccount
from labgov.usage.models import DailySpend, MonthlySpend


@extend_schema_field({"type": "string", "enum": ["USD"], "description": "ISO 4217."})
class CurrencyField(serializers.Field):
    def __init__(self, **kwargs):
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, value):
        return "USD"


# Integer columns hold what PostgreSQL's integer holds, whichever database runs (SQLite's
# wider range would make the schema depend on it); forms bound them the same way.
MAX_INTEGER = 2**31 - 1


class ApiModelSerializer(serializers.ModelSerializer):
    def build_standard_field(self, field_name, model_field):
        field_class, kwargs = super().build_standard_field(field_name, model_field)
        if isinstance(model_field, models.IntegerField) and "max_value" in kwargs:
            kwargs["max_value"] = min(kwargs["max_value"], MAX_INTEGER)
        return field_class, kwargs


def money(source: str, *, places: int = 10, **kwargs) -> serializers.DecimalField:
    """A read-only amount in USD as a decimal string, with every digit labgov holds (whole
    cents for budgets people type, ten places for amounts derived from Runpod's records)."""
    return serializers.DecimalField(
        max_digits=30, decimal_places=places, source=source, read_only=True, **kwargs
    )


class InstitutionSerializer(ApiModelSerializer):
    auto_approve_ceiling = money("auto_approve_ceiling_usd", places=2)
    currency = CurrencyField()

    class Meta:
        model = Institution
        fields = ["id", "name", "slug", "auto_approve_ceiling", "currency", "created_at"]


class LabSerializer(ApiModelSerializer):
    class Meta:
        model = Lab
        fields = ["id", "institution", "name", "slug", "kind", "department", "created_at"]


class MembershipSerializer(ApiModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = [
            "id",
            "user",
            "username",
            "institution",
            "lab",
            "role",
            "start_date",
            "end_date",
        ]


class FundingSourceSerializer(ApiModelSerializer):
    amount = money("amount_usd", places=2)
    allocated = money("allocated_usd")
    committed = money("committed_usd")
    spent = money("spent_usd")
    remaining = money("remaining_usd")
    currency = CurrencyField()

    class Meta:
        model = FundingSource
        fields = [
            "id",
            "institution",
            "lab",
            "kind",
            "name",
            "sponsor",
            "award_number",
            "cost_center",
            "start_date",
            "end_date",
            "status",
            "amount",
            "allocated",
            "committed",
            "spent",
            "remaining",
            "currency",
            "indirect_cost_rate_percent",
        ]
        extra_kwargs = {"end_date": {"help_text": "The last day of the funding (included)."}}


class AllocationSerializer(ApiModelSerializer):
    cap = money("cap_usd", places=2)
    committed = money("committed_usd")
    spent = money("spent_usd")
    remaining = money("remaining_usd", help_text="cap − committed − spent")
    currency = CurrencyField()
    lab = serializers.IntegerField(source="funding_source.lab_id", read_only=True)

    class Meta:
        model = Allocation
        fields = [
            "id",
            "funding_source",
            "lab",
            "user",
            "project_name",
            "start_date",
            "end_date",
            "cap",
            "committed",
            "spent",
            "remaining",
            "currency",
        ]
        extra_kwargs = {"end_date": {"help_text": "The last day of the allocation (included)."}}


class LedgerEntrySerializer(ApiModelSerializer):
    amount = money("amount_usd")
    currency = CurrencyField()

    class Meta:
        model = LedgerEntry
        fields = [
            "id",
            "funding_source",
            "allocation",
            "kind",
            "amount",
            "currency",
            "occurred_at",
            "created_at",
            "memo",
        ]


class AssignmentSerializer(ApiModelSerializer):
    class Meta:
        model = Assignment
        fields = ["allocation", "starts_at", "source", "created_at"]


class RunpodAccountSerializer(ApiModelSerializer):
    """A connected Runpod account. Its keys are never shown, not even in part."""

    has_write_key = serializers.SerializerMethodField()
    balance = money("balance_usd", allow_null=True)
    currency = CurrencyField()

    class Meta:
        model = RunpodAccount
        fields = [
            "id",
            "institution",
            "lab",
            "name",
            "base_url",
            "is_active",
            "has_write_key",
            "billing_complete_through",
            "balance",
            "currency",
            "balance_fetched_at",
            "created_at",
        ]

    def get_has_write_key(self, account) -> bool:
        return bool(account.write_key_encrypted)


class ResourceSerializer(ApiModelSerializer):
    cost_per_hour = money("cost_per_hr_usd")
    unattributed = money("unattributed_usd", help_text="All its billed spend nobody owns.")
    currency = CurrencyField()
    assignments = AssignmentSerializer(
        many=True, read_only=True, help_text="Who paid for it from when, oldest first."
    )

    class Meta:
        model = Resource
        fields = [
            "id",
            "account",
            "kind",
            "runpod_id",
            "name",
            "status",
            "gpu_type_id",
            "gpu_count",
            "cloud",
            "data_center_id",
            "container_disk_gb",
            "volume_disk_gb",
            "size_gb",
            "volume_type",
            "cost_per_hour",
            "unattributed",
            "currency",
            "current_allocation",
            "first_seen_at",
            "gone_at",
            "assignments",
        ]


class SpendSerializer(ApiModelSerializer):
    amount = money("amount_usd")
    currency = CurrencyField()
    day = serializers.DateField(read_only=True, help_text="The UTC day.")

    class Meta:
        model = DailySpend
        fields = [
            "id",
            "day",
            "account",
            "category",
            "allocation",
            "funding_source",
            "lab",
            "user",
            "amount",
            "currency",
        ]


class MonthlySpendSerializer(SpendSerializer):
    day = None
    month = serializers.DateField(read_only=True, help_text="The month's first day (UTC).")

    class Meta(SpendSerializer.Meta):
        model = MonthlySpend
        fields = ["month", *(f for f in SpendSerializer.Meta.fields if f != "day")]


class AlertSerializer(ApiModelSerializer):
    monthly_cost = money("monthly_cost_usd", allow_null=True)
    currency = CurrencyField()

    class Meta:
        model = Alert
        fields = [
            "id",
            "institution",
            "lab",
            "kind",
            "severity",
            "state",
            "title",
            "detail",
            "subject_label",
            "resource",
            "account",
            "funding_source",
            "allocation",
            "owner",
            "monthly_cost",
            "currency",
            "first_seen_at",
            "last_seen_at",
            "acknowledged_at",
            "snoozed_until",
            "resolved_at",
            "resolution",
        ]


class NotificationSerializer(ApiModelSerializer):
    class Meta:
        model = Notification
        fields = [
            "id",
            "kind",
            "severity",
            "lab",
            "subject",
            "body",
            "url",
            "created_at",
            "read_at",
        ]


ESTIMATE_FIELDS = {
    "gpu_price_per_hour": "gpu_price_per_hr_usd",
    "hourly_rate": "hourly_rate_usd",
    "compute": "estimate_compute_usd",
    "storage_running": "estimate_storage_running_usd",
    "storage_after": "estimate_storage_after_usd",
    "one_unplanned_stop": "estimate_stop_usd",
    "total": "estimate_total_usd",
}


class EstimateSerializer(serializers.Serializer):
    """The request's cost estimate as last computed (on saving and on submission)."""

    currency = CurrencyField()

    def get_fields(self):
        fields = super().get_fields()
        for name, source in ESTIMATE_FIELDS.items():
            fields[name] = money(source)
        return fields


class ProvisioningRequestSerializer(ApiModelSerializer):
    estimate = EstimateSerializer(source="*", read_only=True)
    commitment = money("commitment_usd", help_text="Money it holds committed now.")

    class Meta:
        model = ProvisioningRequest
        fields = [
            "id",
            "lab",
            "requester",
            "allocation",
            "state",
            *REQUEST_FIELDS,
            "estimate",
            "commitment",
            "created_at",
            "submitted_at",
            "decided_at",
            "decided_by",
            "auto_approved",
            "decision_reason",
            "runpod_id",
            "last_error",
        ]
        read_only_fields = fields


class ProvisioningRequestCreatedSerializer(ProvisioningRequestSerializer):
    submission_refused = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Why submitting was refused (empty when it was not asked or went through).",
    )

    class Meta(ProvisioningRequestSerializer.Meta):
        fields = [*ProvisioningRequestSerializer.Meta.fields, "submission_refused"]
        read_only_fields = fields


class ProvisioningRequestCreateSerializer(ApiModelSerializer):
    """A new request on one of your own allocations; `submit` submits it at once."""

    submit = serializers.BooleanField(default=False, write_only=True)

    class Meta:
        model = ProvisioningRequest
        fields = ["allocation", *REQUEST_FIELDS, "submit"]
        extra_kwargs = {"allocation": {"queryset": Allocation.objects.none()}}


INVOICE_FIELDS = [
    "id",
    "institution",
    "lab",
    "funding_source",
    "cost_center",
    "award_number",
    "month",
    "period_start",
    "period_end",
    "status",
    "number",
    "total",
    "exact_total",
    "rounding_difference",
    "currency",
    "reconciled",
    "replaces",
    "generated_at",
    "issued_at",
    "voided_at",
    "void_reason",
]


class InvoiceSerializer(ApiModelSerializer):
    """An invoice: one funding source's billing period. Its total is the sum of its lines'
    amounts rounded to cents; `exact_total` the sum of their exact amounts."""

    total = money("total_usd", places=2, help_text="The sum of the lines' rounded amounts.")
    exact_total = money("exact_total_usd", help_text="The sum of the lines' exact amounts.")
    rounding_difference = money(
        "rounding_difference_usd", help_text="total − exact_total (what rounding added)."
    )
    currency = CurrencyField()
    reconciled = serializers.BooleanField(
        source="all_reconciled",
        read_only=True,
        help_text="Every line matches Runpod's billing records.",
    )

    class Meta:
        model = Invoice
        fields = INVOICE_FIELDS
        extra_kwargs = {
            "number": {"help_text": "`<year>-<seq>` once issued; empty for drafts."},
            "month": {"help_text": "The billing period's first day."},
            "period_start": {"help_text": "Start of the period (included), UTC."},
            "period_end": {"help_text": "End of the period (excluded), UTC."},
        }


class InvoiceLineSerializer(ApiModelSerializer):
    unit_rate = money("unit_rate_usd", allow_null=True)
    exact_amount = money("exact_amount_usd")
    amount = money("amount_usd", places=2, help_text="The exact amount rounded to cents.")
    currency = CurrencyField()

    class Meta:
        model = InvoiceLine
        fields = [
            "id",
            "invoice",
            "position",
            "kind",
            "category",
            "description",
            "account",
            "resource",
            "allocation",
            "person",
            "quantity",
            "unit",
            "unit_rate",
            "exact_amount",
            "amount",
            "currency",
            "reconciled",
            "reason",
            "corrects_month",
            "corrects_invoice",
            "created_at",
        ]


class InvoiceDetailSerializer(InvoiceSerializer):
    lines = InvoiceLineSerializer(many=True, read_only=True, help_text="In order.")

    class Meta(InvoiceSerializer.Meta):
        fields = [*INVOICE_FIELDS, "lines"]


class HoldSerializer(ApiModelSerializer):
    class Meta:
        model = Hold
        fields = ["id", "kind", "reason", "until", "payer", "placed_at", "lifted_at"]
        extra_kwargs = {"until": {"help_text": "The last day held."}}


class RetentionCaseSerializer(ApiModelSerializer):
    monthly_cost = money("monthly_cost_usd", help_text="What its storage costs a month.")
    currency = CurrencyField()
    holds = HoldSerializer(
        many=True, read_only=True, help_text="Holds placed on it, newest first (lifted ones too)."
    )

    class Meta:
        model = RetentionCase
        fields = [
            "id",
            "institution",
            "lab",
            "resource",
            "state",
            "reason",
            "reason_detail",
            "owner",
            "payer",
            "funding_source",
            "size_gb",
            "monthly_cost",
            "currency",
            "due_date",
            "opened_at",
            "kept_reason",
            "review_date",
            "moved_to",
            "deletion_requested_at",
            "deleted_at",
            "holds",
        ]
        extra_kwargs = {
            "payer": {"help_text": "The allocation that paid for it when the case opened."}
        }


class DenySerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class SnoozeSerializer(serializers.Serializer):
    until = serializers.DateField(help_text="Snoozed until this day's start (UTC), ≤ 90 days.")


class ResolveSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=500, required=False, allow_blank=True)


class AssignSerializer(serializers.Serializer):
    allocation = serializers.IntegerField(
        min_value=1, help_text="An allocation of a lab you manage."
    )


class SyncQueuedSerializer(serializers.Serializer):
    account = serializers.IntegerField()
    queued = serializers.BooleanField()


class TokenSerializer(ApiModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "key_id", "scope", "created_at", "expires_at", "last_used_at"]
