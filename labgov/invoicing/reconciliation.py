"""A billing period reconciled, per Runpod account: what labgov holds (attributed +
unattributed) against Runpod's own account total (`/v2/billing`), per category and per day
of the institution's calendar.

A day counts as *matched* when labgov holds it (it lies wholly inside a successful sync's
window) and its two totals agree to the cent. A period is reconciled when every day that has
ended is matched and the period's totals agree to the cent; an invoice line is reconciled
when every day from its first to its last record is matched.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import BooleanField, ExpressionWrapper, Q
from django.utils import timezone

from labgov.core.money import ZERO, grouped_multi_sums, to_cents
from labgov.runpod.models import AccountBillingRecord, BillingRecord, RunpodAccount
from labgov.runpod.partitions import detached_within
from labgov.runpod.reconcile import held_spans
from labgov.usage.models import Category
from labgov.usage.periods import billing_period, period_days
from labgov.usage.services import COLUMNS, categories_of

# Runpod's account-wide components (GET /v2/billing) by labgov category; what they leave of
# the total is "other", as on labgov's side.
ACCOUNT_COMPONENTS = {
    "podGpuAmount": Category.GPU_COMPUTE,
    "podCpuAmount": Category.CPU_COMPUTE,
    "podDiskAmount": Category.POD_DISK,
    "storageStandardAmount": Category.NETWORK_STANDARD,
    "storageHighPerformanceAmount": Category.NETWORK_HIGH_PERFORMANCE,
    "serverlessGpuAmount": Category.SERVERLESS,
    "serverlessCpuAmount": Category.SERVERLESS,
    "serverlessDiskAmount": Category.SERVERLESS,
    "serverlessFeeAmount": Category.SERVERLESS,
    "endpointAmount": Category.SERVERLESS,
    "clusterGpuAmount": Category.CLUSTERS,
    "clusterDiskAmount": Category.CLUSTERS,
    "clusterNetworkingAmount": Category.CLUSTERS,
}


def cents_equal(a: Decimal, b: Decimal) -> bool:
    return to_cents(a - b) == 0


@dataclass
class DayRow:
    day: dt.date
    records_usd: Decimal
    runpod_usd: Decimal
    due: bool  # the day has ended
    held: bool

    @property
    def difference_usd(self) -> Decimal:
        return self.records_usd - self.runpod_usd

    @property
    def matched(self) -> bool:
        return self.held and cents_equal(self.records_usd, self.runpod_usd)


@dataclass
class CategoryRow:
    category: str
    records_usd: Decimal
    runpod_usd: Decimal

    @property
    def label(self) -> str:
        return Category(self.category).label

    @property
    def difference_usd(self) -> Decimal:
        return self.records_usd - self.runpod_usd


@dataclass
class AccountPeriod:
    account: RunpodAccount
    month: dt.date
    attributed_usd: Decimal = ZERO
    unattributed_usd: Decimal = ZERO
    runpod_usd: Decimal = ZERO
    categories: list[CategoryRow] = field(default_factory=list)
    days: list[DayRow] = field(default_factory=list)
    # Months of the period whose billing records are archived (labgov.runpod.archive): the
    # records side cannot be recomputed, so the period is shown as archived, not as differing.
    archived_months: list[dt.date] = field(default_factory=list)

    @property
    def records_usd(self) -> Decimal:
        return self.attributed_usd + self.unattributed_usd

    @property
    def difference_usd(self) -> Decimal:
        return self.records_usd - self.runpod_usd

    @property
    def matches_to_the_cent(self) -> bool:
        return cents_equal(self.records_usd, self.runpod_usd)

    @property
    def days_missing(self) -> list[dt.date]:
        """Days that have ended but that labgov does not hold (not yet synced whole)."""
        return [d.day for d in self.days if d.due and not d.held]

    @property
    def days_differing(self) -> list[DayRow]:
        return [d for d in self.days if d.held and not d.matched]

    @property
    def matched_days(self) -> set[dt.date]:
        return {d.day for d in self.days if d.matched}

    @property
    def complete(self) -> bool:
        """Every day of the period has ended and is held."""
        return all(d.due and d.held for d in self.days)

    @property
    def reconciled(self) -> bool:
        return self.complete and self.matches_to_the_cent and not self.days_differing


def _day_index(days):
    """A function from an hour's start to the local day holding it."""
    starts = {}
    for day, start, end in days:
        hour = start
        while hour < end:
            starts[hour] = day
            hour += dt.timedelta(hours=1)
    return starts.get


def account_period(
    account,
    month: dt.date,
    time_zone: str,
    *,
    now: dt.datetime | None = None,
    archived: Sequence[dt.date] = (),
) -> AccountPeriod:
    """Reconcile one account over one billing period (records grouped by hour in SQL, so
    the cost does not grow with the number of resources)."""
    now = now or timezone.now()
    start, end = billing_period(month.year, month.month, time_zone)
    days = period_days(month.year, month.month, time_zone)
    day_of = _day_index(days)
    result = AccountPeriod(account=account, month=month, archived_months=list(archived))

    records = BillingRecord.objects.filter(
        resource__account=account, bucket_start__gte=start, bucket_start__lt=end
    ).annotate(
        attributed=ExpressionWrapper(Q(allocation__isnull=False), output_field=BooleanField())
    )
    by_day: dict[dt.date, Decimal] = defaultdict(lambda: ZERO)
    by_category: dict[str, Decimal] = defaultdict(lambda: ZERO)
    sums = grouped_multi_sums(records, ["bucket_start", "kind", "attributed"], COLUMNS)
    for (hour, kind, attributed), columns in sums.items():
        total = columns[0]
        if attributed:
            result.attributed_usd += total
        else:
            result.unattributed_usd += total
        by_day[day_of(_hour(hour))] += total
        for category, amount in categories_of(kind, columns):
            by_category[category] += amount

    runpod_by_day: dict[dt.date, Decimal] = defaultdict(lambda: ZERO)
    runpod_by_category: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for hour, total, components in AccountBillingRecord.objects.filter(
        account=account, bucket_start__gte=start, bucket_start__lt=end
    ).values_list("bucket_start", "total_usd", "components"):
        result.runpod_usd += total
        runpod_by_day[day_of(_hour(hour))] += total
        known = ZERO
        for key, value in (components or {}).items():
            category = ACCOUNT_COMPONENTS.get(key)
            if category is not None:
                amount = Decimal(str(value))
                runpod_by_category[category] += amount
                known += amount
        if total - known:
            runpod_by_category[Category.OTHER] += total - known

    spans = held_spans(account, start)
    for day, day_start, day_end in days:
        held = any(a <= day_start and day_end <= b for a, b in spans)
        result.days.append(
            DayRow(
                day=day,
                records_usd=by_day.get(day, ZERO),
                runpod_usd=runpod_by_day.get(day, ZERO),
                due=day_end <= now,
                held=held,
            )
        )
    result.categories = [
        CategoryRow(c.value, by_category.get(c, ZERO), runpod_by_category.get(c, ZERO))
        for c in Category
        if by_category.get(c) or runpod_by_category.get(c)
    ]
    return result


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def period_reconciliation(institution, month: dt.date, *, now=None) -> list[AccountPeriod]:
    """Every Runpod account of the institution over one period."""
    archived = detached_within(*billing_period(month.year, month.month, institution.time_zone))
    return [
        account_period(account, month, institution.time_zone, now=now, archived=archived)
        for account in RunpodAccount.objects.filter(institution=institution).order_by("name")
    ]
