"""Here rather than in core beside ReadOnlyAdmin: it writes audit events, and core imports
no app."""

from django.contrib import admin

from labgov.audit.services import audit_record
from labgov.core.snapshots import snapshot


class AuditedAdmin(admin.ModelAdmin):
    """Admin edits of governance objects are audited like any other change, and nothing is
    deleted from here: ending, closing or cancelling goes through the app's services."""

    def has_delete_permission(self, request, obj=None):
        return False

    def audit_institution_id(self, obj) -> int | None:
        return None

    def save_model(self, request, obj, form, change):
        before = None
        if change:
            before = snapshot(type(obj).objects.get(pk=obj.pk))
        super().save_model(request, obj, form, change)
        audit_record(
            actor=request.user,
            action=f"admin.{obj._meta.model_name}.{'change' if change else 'create'}",
            target=obj,
            institution_id=self.audit_institution_id(obj),
            before=before,
        )
