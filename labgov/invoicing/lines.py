"""What an invoice's generated lines hold, computed from billing records (the truth) and the
attribution each record already carries: one line per Runpod resource, allocation and
category, summed exactly and rounded once."""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db import connections
from django.db.models import Count, Max, Min, Q, Sum

from labgov.core.money import ZERO, grouped_multi_sums
from labgov.runpod.models import BillingRecord
from labgov.usage.models import Category
from labgov.usage.periods import billing_period, local_day_start, zone
from labgov.usage.services import COLUMNS, categories_of, split_moves

# The record column whose non-zero buckets count the hours of a category. Serverless bills
# per second inside its buckets, so its hours would say nothing; fees have none either.
HOUR_COLUMNS = {
    Category.GPU_COMPUTE: "gpu_usd",
    Category.CPU_COMPUTE: "cpu_usd",
    Category.POD_DISK: "disk_usd",
    Category.NETWORK_STANDARD: "storage_standard_usd",
    Category.NETWORK_HIGH_PERFORMANCE: "storage_high_performance_usd",
    Category.CLUSTERS: "total_usd",
}
CATEGORY_ORDER = {c.value: i for i, c in enumerate(Category)}


@dataclass
class Usage:
    exact_usd: Decimal
    hours: int | None
    first: dt.datetime
    last: dt.datetime


# (resource_id, allocation_id, category)
Key = tuple[int, int, str]


def period_usage(institution, month: dt.date) -> dict[Key, Usage]:
    """Attributed usage of the institution's accounts in one billing period."""
    start, end = billing_period(month.year, month.month, institution.time_zone)
    records = BillingRecord.objects.filter(
        resource__account__institution=institution,
        allocation__isnull=False,
        bucket_start__gte=start,
        bucket_start__lt=end,
    )
    keys = ["resource_id", "kind", "allocation_id"]
    counts = {
        f"hours_{column}": Count("bucket_start", filter=~Q(**{column: 0}))
        for column in set(HOUR_COLUMNS.values())
    }
    extent = {"first": Min("bucket_start"), "last": Max("bucket_start"), **counts}
    grouped = records.values(*keys).order_by()
    if connections[records.db].vendor == "postgresql":
        # One pass over the period's records: sums (numeric, exact) and extents together.
        sums_of = {f"_sum{i}": Sum(column) for i, column in enumerate(COLUMNS)}
        sums, extents = {}, {}
        for row in grouped.annotate(**sums_of, **extent):
            key = (row["resource_id"], row["kind"], row["allocation_id"])
            sums[key] = [row[name] or ZERO for name in sums_of]
            extents[key] = row
    else:
        # SQLite sums decimals as floats: the sums in Python (grouped_multi_sums).
        sums = grouped_multi_sums(records, keys, COLUMNS)
        extents = {
            (row["resource_id"], row["kind"], row["allocation_id"]): row
            for row in grouped.annotate(**extent)
        }
    usage: dict[Key, Usage] = {}
    for (resource_id, kind, allocation_id), columns in sums.items():
        extent = extents[(resource_id, kind, allocation_id)]
        for category, amount in categories_of(kind, columns):
            column = HOUR_COLUMNS.get(category)
            usage[(resource_id, allocation_id, str(category))] = Usage(
                exact_usd=amount,
                hours=extent[f"hours_{column}"] if column else None,
                first=extent["first"],
                last=extent["last"],
            )
    _apply_splits(usage, institution, start, end)
    return usage


def _apply_splits(usage: dict[Key, Usage], institution, start, end) -> None:
    """Split funding: a split resource's records name its largest share; move each share's
    part to its own line (usage/services.split_moves: the parts of each day and category add
    up exactly). A share's line keeps the resource's hours: the hours were shared, not cut."""
    moves: dict[Key, Decimal] = defaultdict(lambda: ZERO)
    for (resource_id, _, category, allocation_id), amount in split_moves(
        start=start, end=end, institution_id=institution.pk
    ).items():
        moves[(resource_id, allocation_id, str(category))] += amount
    for key, amount in moves.items():
        line = usage.get(key)
        if line is None:
            primary = next(u for k, u in usage.items() if k[0] == key[0] and k[2] == key[2])
            line = usage[key] = Usage(ZERO, primary.hours, primary.first, primary.last)
        line.exact_usd += amount
    for key in [k for k, u in usage.items() if not u.exact_usd and k in moves]:
        del usage[key]


def billed_usage(institution, month: dt.date, *, excluding_month: dt.date) -> dict[Key, Decimal]:
    """What live invoices have charged so far for `month`'s usage: its own usage lines and
    the corrections of it in later invoices (but those of `excluding_month`, being redone)."""
    from labgov.invoicing.models import Invoice, InvoiceLine

    lines = (
        InvoiceLine.objects.filter(invoice__institution=institution)
        .exclude(invoice__status=Invoice.Status.VOID)
        .exclude(invoice__month=excluding_month)
        .filter(
            Q(kind=InvoiceLine.Kind.USAGE, invoice__month=month)
            | Q(kind=InvoiceLine.Kind.LATE_USAGE, corrects_month=month)
        )
    )
    sums = grouped_multi_sums(
        lines, ["resource_id", "allocation_id", "category"], ["exact_amount_usd"]
    )
    return {key: value[0] for key, value in sums.items()}


def late_usage(institution, closed_month: dt.date, *, into: dt.date) -> dict[Key, Decimal]:
    """How the usage of a closed month differs now from what was charged for it."""
    now = period_usage(institution, closed_month)
    billed = billed_usage(institution, closed_month, excluding_month=into)
    changes: dict[Key, Decimal] = defaultdict(lambda: ZERO)
    for key, usage in now.items():
        changes[key] += usage.exact_usd
    for key, amount in billed.items():
        changes[key] -= amount
    return {key: amount for key, amount in changes.items() if amount}


def local_days(first: dt.datetime, last: dt.datetime, time_zone: str) -> set[dt.date]:
    """The local days of a billing period from the one holding hour `first` to `last`'s."""
    days = set()
    day = first.astimezone(zone(time_zone)).date() - dt.timedelta(days=1)
    while local_day_start(day, time_zone) <= last:
        if local_day_start(day + dt.timedelta(days=1), time_zone) > first:
            days.add(day)
        day += dt.timedelta(days=1)
    return days
