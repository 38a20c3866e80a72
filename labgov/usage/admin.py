from django.contrib import admin

from labgov.core.admin import ReadOnlyAdmin
from labgov.usage.models import (
    ClosedPeriod,
    DailySpend,
    LabDailySpend,
    MonthlySpend,
    SourceMonthlySpend,
    SpendVersion,
)

# Rollups are derived from billing records by the sync; they are read here, never edited.


@admin.register(DailySpend)
class DailySpendAdmin(ReadOnlyAdmin):
    list_display = ["day", "account", "category", "allocation", "lab", "amount_usd"]
    list_filter = ["category", "account"]
    list_select_related = ["account", "allocation", "lab"]
    date_hierarchy = "day"


@admin.register(LabDailySpend)
class LabDailySpendAdmin(ReadOnlyAdmin):
    list_display = ["day", "account", "lab", "category", "amount_usd"]
    list_filter = ["category", "account"]
    list_select_related = ["account", "lab"]
    date_hierarchy = "day"


@admin.register(MonthlySpend)
class MonthlySpendAdmin(ReadOnlyAdmin):
    list_display = ["month", "account", "category", "allocation", "lab", "amount_usd"]
    list_filter = ["category", "account"]
    list_select_related = ["account", "allocation", "lab"]


@admin.register(SourceMonthlySpend)
class SourceMonthlySpendAdmin(ReadOnlyAdmin):
    list_display = ["month", "account", "funding_source", "amount_usd"]
    list_filter = ["account"]
    list_select_related = ["account", "funding_source"]


@admin.register(ClosedPeriod)
class ClosedPeriodAdmin(ReadOnlyAdmin):
    """Months are closed through labgov.usage.periods.period_close (audited), never here."""

    list_display = ["month", "institution", "closed_by", "closed_at"]
    list_select_related = ["institution", "closed_by"]


@admin.register(SpendVersion)
class SpendVersionAdmin(ReadOnlyAdmin):
    """Bumped with the rollups; drafts compare it to know whether they may be stale."""

    list_display = ["day", "account", "version"]
    list_filter = ["account"]
    list_select_related = ["account"]
