from django.contrib import admin

from labgov.core.admin import ReadOnlyAdmin
from labgov.notifications.models import Notification


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "recipient", "kind", "subject", "read_at", "emailed_at")
    list_filter = ("kind",)
    search_fields = ("subject", "recipient__username", "dedupe_key")
    raw_id_fields = ("recipient",)
