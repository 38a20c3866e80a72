from django.contrib import admin

from labgov.retention.models import Hold, RetentionCase, RetentionPolicy


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    list_display = ("institution", "lab", "is_active", "approvers_required", "warning_days")
    readonly_fields = [f.name for f in RetentionPolicy._meta.fields]

    def has_add_permission(self, request):
        return False  # changed through labgov's pages, which audit every change


@admin.register(RetentionCase)
class RetentionCaseAdmin(admin.ModelAdmin):
    list_display = ("id", "resource", "reason", "state", "due_date", "lab")
    list_filter = ("state", "reason")
    readonly_fields = [f.name for f in RetentionCase._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Hold)
class HoldAdmin(admin.ModelAdmin):
    list_display = ("resource", "kind", "until", "lifted_at", "payer")
    readonly_fields = [f.name for f in Hold._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
