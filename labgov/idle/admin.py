from django.contrib import admin

from labgov.idle.models import AutoStopMark, AutoStopPolicy, StopNotice


class ReadOnly(admin.ModelAdmin):
    """Changes go through the services (audited); the admin only shows them."""

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AutoStopPolicy)
class AutoStopPolicyAdmin(ReadOnly):
    list_display = ("lab", "enabled", "idle_hours", "warn_minutes", "keep_hours", "updated_at")
    readonly_fields = [f.name for f in AutoStopPolicy._meta.fields]


@admin.register(AutoStopMark)
class AutoStopMarkAdmin(ReadOnly):
    list_display = ("resource", "kind", "until", "created_by", "ended_at")
    readonly_fields = [f.name for f in AutoStopMark._meta.fields]


@admin.register(StopNotice)
class StopNoticeAdmin(ReadOnly):
    list_display = ("resource", "lab", "owner", "state", "idle_since", "stop_at")
    list_filter = ("state",)
    readonly_fields = [f.name for f in StopNotice._meta.fields]
