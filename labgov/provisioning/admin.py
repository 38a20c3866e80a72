from django.contrib import admin

from labgov.audit.audited_admin import AuditedAdmin
from labgov.core.admin import ReadOnlyAdmin
from labgov.provisioning.models import ProvisioningPolicy, ProvisioningRequest


@admin.register(ProvisioningPolicy)
class ProvisioningPolicyAdmin(AuditedAdmin):
    list_display = ("__str__", "auto_approve_under_usd", "second_approval_over_usd", "updated_at")
    list_filter = ("institution",)
    raw_id_fields = ("lab", "updated_by")

    def audit_institution_id(self, obj) -> int | None:
        return obj.institution_id


@admin.register(ProvisioningRequest)
class ProvisioningRequestAdmin(ReadOnlyAdmin):
    """Requests change state only through the app's services (they move money and are
    audited), so the admin only shows them."""

    list_display = ("pk", "title", "requester", "lab", "deployment_model", "state", "created_at")
    list_filter = ("state", "deployment_model", "lab")
    search_fields = ("title", "requester__username", "runpod_id")
