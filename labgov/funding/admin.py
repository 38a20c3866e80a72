from django.contrib import admin

from labgov.audit.audited_admin import AuditedAdmin
from labgov.core.admin import ReadOnlyAdmin
from labgov.funding.models import (
    Allocation,
    FundingProposal,
    FundingSource,
    LedgerEntry,
    LedgerTotal,
)


@admin.register(FundingSource)
class FundingSourceAdmin(AuditedAdmin):
    list_display = [
        "name",
        "award_number",
        "lab",
        "kind",
        "amount_usd",
        "start_date",
        "end_date",
        "status",
    ]
    list_filter = ["kind", "status", "institution"]
    search_fields = ["name", "award_number", "sponsor", "cost_center"]
    list_select_related = ["lab"]

    def audit_institution_id(self, obj):
        return obj.institution_id


@admin.register(Allocation)
class AllocationAdmin(AuditedAdmin):
    list_display = ["__str__", "cap_usd", "start_date", "end_date"]
    list_select_related = ["funding_source", "user"]
    search_fields = ["project_name", "user__username", "funding_source__name"]

    def audit_institution_id(self, obj):
        return obj.funding_source.institution_id


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["occurred_at", "kind", "amount_usd", "funding_source", "allocation", "memo"]
    list_filter = ["kind"]
    list_select_related = ["funding_source", "allocation"]


@admin.register(LedgerTotal)
class LedgerTotalAdmin(ReadOnlyAdmin):
    """Read-only: kept by the ledger's trigger (`manage.py ledger_totals` checks them)."""

    list_display = ["owner_kind", "owner_id", "committed_usd", "spent_usd"]
    list_filter = ["owner_kind"]


@admin.register(FundingProposal)
class FundingProposalAdmin(ReadOnlyAdmin):
    """Read-only: a proposal is decided on its page, where the proposer cannot decide it."""

    list_display = ["__str__", "lab", "amount_usd", "state", "proposed_by", "decided_by"]
    list_filter = ["state", "institution"]
    list_select_related = ["lab", "funding_source", "proposed_by", "decided_by"]
