from django.contrib import admin

from labgov.audit.audited_admin import AuditedAdmin
from labgov.core.admin import ReadOnlyAdmin
from labgov.runpod.models import (
    AccountBillingRecord,
    Assignment,
    AssignmentShare,
    AttributionRule,
    FocusDrop,
    FocusFile,
    GpuType,
    Resource,
    RunpodAccount,
    SyncRun,
    TagClaim,
)

# BillingRecord has a composite primary key, which Django's admin does not support; its
# records are read through the inventory, unattributed and reconciliation pages.


@admin.register(RunpodAccount)
class RunpodAccountAdmin(AuditedAdmin):
    list_display = [
        "name",
        "institution",
        "lab",
        "base_url",
        "api_key_last4",
        "write_key_last4",
        "is_active",
    ]
    list_filter = ["institution", "is_active"]
    # Keys are entered and replaced in the app, which encrypts them; never shown here. The
    # base URL too: changing it there requires the keys again (see services.account_update).
    exclude = ["api_key_encrypted", "write_key_encrypted", "sync_lock_token"]
    readonly_fields = [
        "base_url",
        "api_key_last4",
        "write_key_last4",
        "billing_complete_through",
        "sync_locked_until",
    ]

    def audit_institution_id(self, obj):
        return obj.institution_id


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ["account", "started_at", "status", "trigger", "phase", "error"]
    list_filter = ["status", "account"]
    list_select_related = ["account"]


@admin.register(Resource)
class ResourceAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "kind",
        "runpod_id",
        "status",
        "account",
        "current_allocation",
        "gone_at",
    ]
    list_filter = ["kind", "status", "account"]
    search_fields = ["name", "runpod_id"]
    list_select_related = ["account", "current_allocation"]
    exclude = ["env"]  # may hold values people consider private even after redaction


@admin.register(AccountBillingRecord)
class AccountBillingRecordAdmin(ReadOnlyAdmin):
    list_display = ["account", "bucket_start", "total_usd"]
    list_filter = ["account"]


@admin.register(GpuType)
class GpuTypeAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "gpu_id",
        "memory_gb",
        "secure_price_per_hr_usd",
        "community_price_per_hr_usd",
    ]


@admin.register(AttributionRule)
class AttributionRuleAdmin(AuditedAdmin):
    list_display = ["__str__", "account", "allocation", "lab", "is_active"]
    list_filter = ["kind", "is_active", "account"]

    def audit_institution_id(self, obj):
        return obj.account.institution_id


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ["resource", "allocation", "starts_at", "source", "created_by"]
    list_filter = ["source"]
    list_select_related = ["resource", "allocation", "created_by"]


@admin.register(AssignmentShare)
class AssignmentShareAdmin(ReadOnlyAdmin):
    list_display = ["assignment", "allocation", "share_percent"]


@admin.register(TagClaim)
class TagClaimAdmin(ReadOnlyAdmin):
    """Claims are confirmed or rejected through labgov.runpod.tag_claims (audited)."""

    list_display = ["created_at", "resource", "allocation", "status", "decided_by", "decided_at"]
    list_filter = ["status"]
    list_select_related = ["resource", "allocation", "decided_by"]


@admin.register(FocusDrop)
class FocusDropAdmin(ReadOnlyAdmin):
    """Folder files are read by the worker (labgov/runpod/focus_folders.py)."""

    list_display = ["found_at", "account", "file_name", "outcome"]
    list_filter = ["outcome"]
    list_select_related = ["account"]


@admin.register(FocusFile)
class FocusFileAdmin(ReadOnlyAdmin):
    """Files are imported through the source's page or manage.py import_focus (audited)."""

    list_display = ["imported_at", "account", "file_name", "period_start", "rows", "total_usd"]
    list_filter = ["late"]
    list_select_related = ["account"]
