"""A billing period reconciled, per Runpod account: what labgov holds (attributed +
unattributed) against Runpod's own account total (`/v2/billing`), per category and per day
of the institution's calendar.

A day counts as *matched* when labgov holds it (every hour of it lies inside successful
syncs' windows taken together) and its two totals agree to the cent. A period is reconciled
when every day that has ended is matched and the period's totals agree to the cent; an
invoice line is reconciled when every day from its first to its last record is matched.
"""

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import BooleanField, ExpressionWrapper, Max, Min, Q
from django.utils import timezone

from labgov.core.money import ZERO, grouped_multi_sums, to_cents
from labgov.runpod.models import AccountBillingRecord, BillingRecord, RunpodAccount
from labgov.runpod.partitions import detached_within
from labgov.runpod.reconcile import held_spans_by_account
from labgov.usage.models import Category, DailySpend
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
    # A FOCUS billing source's own daily totals (labgov/runpod/focus.py), by ServiceCategory.
    "focusComputeCost": Category.CLOUD_COMPUTE,
    "focusStorageCost": Category.CLOUD_STORAGE,
    "focusOtherCost": Category.CLOUD_OTHER,
    "focusCreditCost": Category.CLOUD_CREDIT,
    "focusAdjustmentCost": Category.CLOUD_ADJUSTMENT,
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


def _utc_midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def _utc_days(days) -> bool:
    """Whether the calendar's days are UTC days (UTC itself, or a zone at UTC+0 all month):
    then the daily rollups, kept per UTC day, hold each of them whole."""
    return all(
        start == _utc_midnight(day) and end == _utc_midnight(day + dt.timedelta(days=1))
        for day, start, end in days
    )


@dataclass
class _RecordSums:
    attributed_usd: Decimal = ZERO
    unattributed_usd: Decimal = ZERO
    by_day: dict = field(default_factory=lambda: defaultdict(lambda: ZERO))
    by_category: dict = field(default_factory=lambda: defaultdict(lambda: ZERO))

    def add(self, day: dt.date, attributed: bool, total: Decimal, categories) -> None:
        if attributed:
            self.attributed_usd += total
        else:
            self.unattributed_usd += total
        self.by_day[day] += total
        for category, amount in categories:
            self.by_category[category] += amount

    @property
    def total_usd(self) -> Decimal:
        return self.attributed_usd + self.unattributed_usd


def _spans_of(days: list[tuple]) -> list[tuple[dt.datetime, dt.datetime]]:
    """The UTC spans of these local days (in order), contiguous ones merged."""
    spans: list[tuple[dt.datetime, dt.datetime]] = []
    for _, start, end in days:
        if spans and spans[-1][1] == start:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def _record_sums(account_ids, days, *, rollups: bool) -> dict[int, _RecordSums]:
    """What labgov holds of each account per day and category, attributed or not.

    The billing records are the truth; summing a month of them costs a pass over most of the
    month's rows. Their daily rollups (labgov.usage DailySpend, rebuilt with the records in
    one transaction, so equal to their sums to the last digit) hold the same figures when the
    calendar's days are UTC days (`rollups`): each day with rollup rows is read from them, and
    only the others (days nothing has rolled up, normally days without records) from the
    records themselves. A split moves spend between allocations, never to or from
    unattributed, and its parts of a day and category add up exactly; cost transfers are no
    records' spend and are left out.
    """
    sums = {pk: _RecordSums() for pk in account_ids}
    from_records = {pk: list(days) for pk in account_ids}
    if rollups and days:
        rows = (
            DailySpend.objects.filter(
                account_id__in=account_ids, day__gte=days[0][0], day__lte=days[-1][0]
            )
            .exclude(category=Category.TRANSFER)
            .annotate(
                attributed=ExpressionWrapper(
                    Q(allocation__isnull=False), output_field=BooleanField()
                )
            )
        )
        rolled: dict[int, set[dt.date]] = defaultdict(set)
        for (account_id, day, category, attributed), (amount,) in grouped_multi_sums(
            rows, ["account_id", "day", "category", "attributed"], ["amount_usd"]
        ).items():
            rolled[account_id].add(day)
            sums[account_id].add(day, attributed, amount, [(category, amount)])
        from_records = {pk: [d for d in days if d[0] not in rolled[pk]] for pk in account_ids}

    # The rest from the records, grouped by hour (so the cost does not grow with the number
    # of resources), in one query for every account.
    by_spans: dict[tuple, list[int]] = defaultdict(list)
    for pk, pending in from_records.items():
        if pending:
            by_spans[tuple(_spans_of(pending))].append(pk)
    if not by_spans:
        return sums
    wanted = Q()
    for spans, ids in by_spans.items():
        within = Q()
        for start, end in spans:
            within |= Q(bucket_start__gte=start, bucket_start__lt=end)
        wanted |= Q(resource__account_id__in=ids) & within
    records = BillingRecord.objects.filter(wanted).annotate(
        attributed=ExpressionWrapper(Q(allocation__isnull=False), output_field=BooleanField())
    )
    day_of = _day_index(days)
    keys = ["resource__account_id", "bucket_start", "kind", "attributed"]
    for (account_id, hour, kind, attributed), columns in grouped_multi_sums(
        records, keys, COLUMNS
    ).items():
        sums[account_id].add(
            day_of(_hour(hour)), attributed, columns[0], categories_of(kind, columns)
        )
    return sums


def _runpod_sums(account_ids, start, end, day_of) -> dict[int, _RecordSums]:
    """Runpod's own account totals (`/v2/billing`), per day and category."""
    sums = {pk: _RecordSums() for pk in account_ids}
    for account_id, hour, total, components in AccountBillingRecord.objects.filter(
        account_id__in=account_ids, bucket_start__gte=start, bucket_start__lt=end
    ).values_list("account_id", "bucket_start", "total_usd", "components"):
        categories = []
        known = ZERO
        for key, value in (components or {}).items():
            category = ACCOUNT_COMPONENTS.get(key)
            if category is not None:
                amount = Decimal(str(value))
                categories.append((category, amount))
                known += amount
        if total - known:
            categories.append((Category.OTHER, total - known))
        sums[account_id].add(day_of(_hour(hour)), True, total, categories)
    return sums


def _accounts_periods(
    accounts, month: dt.date, time_zone: str, *, now: dt.datetime, archived: Sequence[dt.date]
) -> list[AccountPeriod]:
    """Reconcile these accounts over one billing period, in a fixed number of queries."""
    start, end = billing_period(month.year, month.month, time_zone)
    days = period_days(month.year, month.month, time_zone)
    ids = [account.pk for account in accounts]
    # An archived month's records are gone from the table (its partition detached) while its
    # rollups stay: it is read from the records, as before, so that it shows as archived.
    records = _record_sums(ids, days, rollups=_utc_days(days) and not archived)
    runpod = _runpod_sums(ids, start, end, _day_index(days))
    spans = held_spans_by_account(ids, start)
    results = []
    for account in accounts:
        ours, theirs = records[account.pk], runpod[account.pk]
        result = AccountPeriod(
            account=account,
            month=month,
            archived_months=list(archived),
            attributed_usd=ours.attributed_usd,
            unattributed_usd=ours.unattributed_usd,
            runpod_usd=theirs.total_usd,
        )
        for day, day_start, day_end in days:
            held = any(a <= day_start and day_end <= b for a, b in spans[account.pk])
            result.days.append(
                DayRow(
                    day=day,
                    records_usd=ours.by_day.get(day, ZERO),
                    runpod_usd=theirs.by_day.get(day, ZERO),
                    due=day_end <= now,
                    held=held,
                )
            )
        result.categories = [
            CategoryRow(c.value, ours.by_category.get(c, ZERO), theirs.by_category.get(c, ZERO))
            for c in Category
            if ours.by_category.get(c) or theirs.by_category.get(c)
        ]
        results.append(result)
    return results


def account_period(
    account,
    month: dt.date,
    time_zone: str,
    *,
    now: dt.datetime | None = None,
    archived: Sequence[dt.date] = (),
) -> AccountPeriod:
    """Reconcile one account over one billing period."""
    now = now or timezone.now()
    return _accounts_periods([account], month, time_zone, now=now, archived=archived)[0]


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def period_reconciliation(institution, month: dt.date, *, now=None) -> list[AccountPeriod]:
    """Every Runpod account of the institution over one period."""
    archived = detached_within(*billing_period(month.year, month.month, institution.time_zone))
    accounts = list(RunpodAccount.objects.filter(institution=institution).order_by("name"))
    if not accounts:
        return []
    return _accounts_periods(
        accounts, month, institution.time_zone, now=now or timezone.now(), archived=archived
    )


# An invoice's lines now --------------------------------------------------------------------


@dataclass
class InvoiceReconciliation:
    """Which of an invoice's lines are reconciled now, and in words why the others are not.

    A line is marked reconciled when generated if its days were matched then; an issued
    invoice never changes, so a line generated while a day was missing becomes reconciled
    here, when its days are matched later (synced whole and agreeing to the cent)."""

    line_ids: set[int]  # the lines reconciled now
    why_not: list[str]

    @property
    def reconciled(self) -> bool:
        return not self.why_not


def _extents(resource_ids, start, end) -> dict[int, tuple[dt.datetime, dt.datetime]]:
    return {
        row[0]: (row[1], row[2])
        for row in BillingRecord.objects.filter(
            resource_id__in=resource_ids, bucket_start__gte=start, bucket_start__lt=end
        )
        .values("resource_id")
        .order_by()
        .annotate(first=Min("bucket_start"), last=Max("bucket_start"))
        .values_list("resource_id", "first", "last")
    }


def invoices_reconciliation(invoices) -> dict[int, InvoiceReconciliation]:
    """invoice_reconciliation for many invoices of one institution in a fixed number of
    queries: those with a line generated provisional (`has_unreconciled`, annotated by the
    caller), their lines and their resources' extents read at once, each month reconciled
    once. Invoices generated reconciled throughout are not in the answer."""
    from labgov.invoicing.models import InvoiceLine

    pending = [invoice for invoice in invoices if invoice.has_unreconciled]
    if not pending:
        return {}
    lines: dict[int, list] = defaultdict(list)
    for line in InvoiceLine.objects.filter(invoice__in=pending).order_by("invoice_id", "position"):
        lines[line.invoice_id].append(line)
    extents: dict[tuple, dict] = {}
    for span in {(i.period_start, i.period_end) for i in pending}:
        ids = {
            line.resource_id
            for i in pending
            if (i.period_start, i.period_end) == span
            for line in lines[i.pk]
            if line.resource_id and not line.reconciled
        }
        extents[span] = _extents(ids, *span)
    periods: dict = {}
    return {
        i.pk: invoice_reconciliation(
            i, lines[i.pk], periods=periods, extents=extents[(i.period_start, i.period_end)]
        )
        for i in pending
    }


def _days_text(days) -> str:
    return ", ".join(f"{d.day} {d:%b}" for d in sorted(days))


def invoice_reconciliation(
    invoice, lines, *, now: dt.datetime | None = None, periods=None, extents=None
):
    """`lines`: the invoice's lines (read once by the caller). `periods`: a dict the caller
    keeps across invoices of one institution, so each month is reconciled once for all;
    `extents`: the first and last record of each resource in the invoice's period, when the
    caller read them for several invoices at once (invoices_reconciliation)."""
    from labgov.invoicing.lines import local_days
    from labgov.invoicing.models import InvoiceLine

    lines = list(lines)
    pending = [line for line in lines if not line.reconciled]
    if not pending:
        return InvoiceReconciliation({line.pk for line in lines}, [])
    institution = invoice.institution
    periods = {} if periods is None else periods  # month -> {account id: AccountPeriod}

    def period_of(month: dt.date) -> dict[int, AccountPeriod]:
        if month not in periods:
            periods[month] = {
                a.account.pk: a for a in period_reconciliation(institution, month, now=now)
            }
        return periods[month]

    # The days each resource billed in the period: a line's days are among them.
    if extents is None:
        extents = _extents(
            {line.resource_id for line in pending if line.resource_id},
            invoice.period_start,
            invoice.period_end,
        )
    reconciled = {line.pk for line in lines if line.reconciled}
    missing: dict[tuple[str, str], set] = defaultdict(set)  # (account, what) -> days
    whole_months: dict[str, set[dt.date]] = defaultdict(set)  # account -> months not reconciled
    for line in pending:
        if line.kind == InvoiceLine.Kind.INDIRECT:
            continue
        month = line.corrects_month or invoice.month
        account = period_of(month).get(line.account_id)
        if account is None:
            continue
        if line.kind == InvoiceLine.Kind.USAGE and line.resource_id in extents:
            first, last = extents[line.resource_id]
            days = local_days(first, last, institution.time_zone)
            by_day = {d.day: d for d in account.days}
            open_days = [by_day[d] for d in days if d in by_day and not by_day[d].matched]
            for d in open_days:
                what = "not ended" if not d.due else "not synced whole" if not d.held else "differ"
                missing[(account.account.name, what)].add(d.day)
            if not open_days:
                reconciled.add(line.pk)
        elif account.reconciled:
            reconciled.add(line.pk)
        else:
            whole_months[account.account.name].add(month)
    direct = [line for line in lines if line.kind != InvoiceLine.Kind.INDIRECT]
    if all(line.pk in reconciled for line in direct):
        reconciled |= {line.pk for line in lines}
    why = [
        f"{name}: {_days_text(days)} "
        + {
            "not ended": "has not ended yet" if len(days) == 1 else "have not ended yet",
            "not synced whole": "not synced whole yet",
            "differ": "differs from Runpod" if len(days) == 1 else "differ from Runpod",
        }[what]
        for (name, what), days in sorted(missing.items())
    ]
    why += [
        f"{name}: {', '.join(f'{m:%B %Y}' for m in sorted(months))} not reconciled yet"
        for name, months in sorted(whole_months.items())
    ]
    if not why and len(reconciled) < len(lines):
        why = ["some lines' days are not matched with Runpod yet"]
    return InvoiceReconciliation(reconciled, why)
