from django.contrib import admin

from labgov.core.admin import ReadOnlyAdmin
from labgov.transfers.models import CostTransfer


@admin.register(CostTransfer)
class CostTransferAdmin(ReadOnlyAdmin):
    list_display = ["pk", "month", "from_allocation", "to_allocation", "amount_usd", "state"]
    list_filter = ["state"]
