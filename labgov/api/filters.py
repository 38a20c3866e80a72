"""Query filters of the API's lists (django-filter). Ids are plain numbers: an id outside
what one may see filters to nothing, it is never looked up (so its existence is not told).
Windows are days, `start` included and `end` excluded."""

import datetime as dt

import django_filters as filters
from django import forms

from labgov.alerts.models import Alert, Kind
from labgov.core.periods import UTC
from labgov.funding.models import LedgerEntry
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.notifications.kinds import Severity
from labgov.provisioning.models import ProvisioningRequest
from labgov.retention.models import Reason
from labgov.retention.models import State as RetentionState
from labgov.runpod.models import ResourceKind
from labgov.usage.models import Category

MAX_ID = 2**63 - 1


class IdFilter(filters.NumberFilter):
    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


def _start(help_text):
    return filters.DateFilter(method="filter_start", help_text=help_text)


def _end(help_text):
    return filters.DateFilter(method="filter_end", help_text=help_text)


class WindowFilterSet(filters.FilterSet):
    """`start` (included) and `end` (excluded) on `window_field`."""

    window_field = "day"
    start = _start("First day of the window (included), UTC.")
    end = _end("Day after the window (excluded), UTC.")

    def _bound(self, value):
        return value

    def filter_start(self, queryset, name, value):
        return queryset.filter(**{f"{self.window_field}__gte": self._bound(value)})

    def filter_end(self, queryset, name, value):
        return queryset.filter(**{f"{self.window_field}__lt": self._bound(value)})


class SpendFilter(WindowFilterSet):
    lab = IdFilter(field_name="lab_id")
    funding_source = IdFilter(field_name="funding_source_id")
    allocation = IdFilter(field_name="allocation_id")
    user = IdFilter(field_name="user_id", help_text="The person whose allocation paid.")
    account = IdFilter(field_name="account_id")
    category = filters.ChoiceFilter(choices=Category.choices)
    unattributed = filters.BooleanFilter(
        field_name="allocation", lookup_expr="isnull", help_text="Only spend nobody owns."
    )


class DailySpendFilter(SpendFilter):
    pass


class MonthlySpendFilter(SpendFilter):
    window_field = "month"
    start = _start("First month of the window (its first day, included).")
    end = _end("First day of the month after the window (excluded).")


class LedgerFilter(WindowFilterSet):
    window_field = "occurred_at"
    funding_source = IdFilter(field_name="funding_source_id")
    allocation = IdFilter(field_name="allocation_id")
    kind = filters.ChoiceFilter(choices=LedgerEntry.Kind.choices)
    start = _start("Entries from this day on (00:00 UTC, included).")
    end = _end("Entries before this day (00:00 UTC, excluded).")

    def _bound(self, value):
        return dt.datetime.combine(value, dt.time(), tzinfo=UTC)


class LabFilter(filters.FilterSet):
    institution = IdFilter(field_name="institution_id")


class MembershipFilter(filters.FilterSet):
    lab = IdFilter(field_name="lab_id")
    user = IdFilter(field_name="user_id")


class FundingSourceFilter(filters.FilterSet):
    lab = IdFilter(field_name="lab_id")
    status = filters.ChoiceFilter(
        choices=[("active", "active"), ("on_hold", "on_hold"), ("closed", "closed")]
    )


class AllocationFilter(filters.FilterSet):
    funding_source = IdFilter(field_name="funding_source_id")
    user = IdFilter(field_name="user_id")


class RequestFilter(filters.FilterSet):
    state = filters.ChoiceFilter(choices=ProvisioningRequest.State.choices)
    lab = IdFilter(field_name="lab_id")
    mine = filters.BooleanFilter(method="filter_mine", help_text="Only your own requests.")

    def filter_mine(self, queryset, name, value):
        if value:
            return queryset.filter(requester_id=self.request.user.pk)
        return queryset


class AccountFilter(filters.FilterSet):
    lab = IdFilter(field_name="lab_id")


class ResourceFilter(filters.FilterSet):
    kind = filters.ChoiceFilter(choices=ResourceKind.choices)
    account = IdFilter(field_name="account_id")
    status = filters.CharFilter(max_length=30)
    gone = filters.BooleanFilter(
        field_name="gone_at", lookup_expr="isnull", exclude=True, help_text="Gone from Runpod."
    )
    unattributed = filters.BooleanFilter(
        field_name="current_allocation", lookup_expr="isnull", help_text="Nobody pays for it."
    )


class AlertFilter(filters.FilterSet):
    state = filters.ChoiceFilter(choices=Alert.State.choices)
    kind = filters.ChoiceFilter(choices=Kind.choices)
    severity = filters.ChoiceFilter(choices=Severity.choices)
    lab = IdFilter(field_name="lab_id")


class NotificationFilter(filters.FilterSet):
    unread = filters.BooleanFilter(field_name="read_at", lookup_expr="isnull")


class InvoiceFilter(filters.FilterSet):
    institution = IdFilter(field_name="institution_id")
    lab = IdFilter(field_name="lab_id")
    funding_source = IdFilter(field_name="funding_source_id")
    month = filters.DateFilter(
        method="filter_month", help_text="Any day of the billing period (its month)."
    )
    status = filters.ChoiceFilter(choices=Invoice.Status.choices)

    def filter_month(self, queryset, name, value):
        return queryset.filter(month=value.replace(day=1))


class InvoiceLineFilter(filters.FilterSet):
    invoice = IdFilter(field_name="invoice_id")
    allocation = IdFilter(field_name="allocation_id")
    kind = filters.ChoiceFilter(choices=InvoiceLine.Kind.choices)


class RetentionCaseFilter(filters.FilterSet):
    state = filters.ChoiceFilter(choices=RetentionState.choices)
    reason = filters.ChoiceFilter(choices=Reason.choices)
    lab = IdFilter(field_name="lab_id")
    resource = IdFilter(field_name="resource_id")
