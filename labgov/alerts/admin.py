from django.contrib import admin

from labgov.alerts.models import Alert, AlertSettings
from labgov.audit.audited_admin import AuditedAdmin
from labgov.core.admin import ReadOnlyAdmin


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    """Alerts change through the app (acknowledge, snooze, resolve), where it is audited."""

    list_display = ("title", "kind", "severity", "state", "lab", "first_seen_at", "last_seen_at")
    list_filter = ("kind", "severity", "state")
    search_fields = ("title", "subject_label", "subject_key")
    raw_id_fields = (
        "lab",
        "resource",
        "account",
        "funding_source",
        "allocation",
        "owner",
        "acknowledged_by",
        "snoozed_by",
        "resolved_by",
    )


@admin.register(AlertSettings)
class AlertSettingsAdmin(AuditedAdmin):
    list_display = ("__str__", "institution", "lab", "updated_at", "updated_by")
    raw_id_fields = ("lab", "updated_by")

    def audit_institution_id(self, obj) -> int | None:
        return obj.institution_id
