from django.contrib import admin

from labgov.core.admin import ReadOnlyAdmin
from labgov.transfers.models import CostTransfer, SpendMove


@admin.register(CostTransfer)
class CostTransferAdmin(ReadOnlyAdmin):
    list_display = ["pk", "month", "from_allocation", "to_allocation", "amount_usd", "state"]
    list_filter = ["state"]


@admin.register(SpendMove)
class SpendMoveAdmin(ReadOnlyAdmin):
    list_display = ["pk", "resource", "starts_at", "state", "proposed_by", "decided_by"]
    list_filter = ["state"]
