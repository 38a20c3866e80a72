from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from labgov.accounts.models import ExternalIdentity, Institution, Lab, Membership, User
from labgov.audit.audited_admin import AuditedAdmin
from labgov.core.admin import ReadOnlyAdmin


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    pass


@admin.register(Institution)
class InstitutionAdmin(AuditedAdmin):
    list_display = ["name", "slug", "created_at"]
    prepopulated_fields = {"slug": ["name"]}

    def audit_institution_id(self, obj):
        return obj.pk


@admin.register(Lab)
class LabAdmin(AuditedAdmin):
    list_display = ["name", "institution", "kind", "department"]
    list_filter = ["institution", "kind"]
    search_fields = ["name", "department"]
    prepopulated_fields = {"slug": ["name"]}

    def audit_institution_id(self, obj):
        return obj.institution_id


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ["user", "role", "institution", "lab", "start_date", "end_date"]
    list_filter = ["role", "institution"]
    search_fields = ["user__username", "user__email", "lab__name"]
    list_select_related = ["user", "institution", "lab"]
    autocomplete_fields = ["user"]

    def audit_institution_id(self, obj):
        return obj.institution_id


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(ReadOnlyAdmin):
    """Written only by sign-in (labgov.accounts.oidc); shown so admins can see who is linked."""

    list_display = ["user", "issuer", "subject", "created_at", "last_sign_in_at"]
    search_fields = ["user__username", "subject"]
    list_select_related = ["user"]
