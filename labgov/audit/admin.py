from django.contrib import admin

from labgov.audit.models import AuditEvent
from labgov.core.admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "action", "target_repr", "institution"]
    list_filter = ["action", "institution"]
    search_fields = ["target_repr", "note", "actor__username"]
    list_select_related = ["actor", "institution"]
