import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection
from django.db.models import Case, F, Sum, When
from django.db.models.functions import Coalesce, TruncDay

from labgov.core.bulk import insert_rows
from labgov.core.money import ZERO, grouped_multi_sums, split_by_shares
from labgov.core.periods import UTC
from labgov.funding.models import Allocation
from labgov.runpod.locks import account_lock_serial
from labgov.runpod.models import Assignment, AssignmentShare, BillingRecord, ResourceKind
from labgov.usage.models import (
    Category,
    DailySpend,
    LabDailySpend,
    MonthlySpend,
    SourceMonthlySpend,
    SpendVersion,
)

COLUMNS = [
    "total_usd",
    "gpu_usd",
    "cpu_usd",
    "disk_usd",
    "storage_standard_usd",
    "storage_high_performance_usd",
    "credit_usd",
    "adjustment_usd",
]


def categories_of(kind: str, sums: list[Decimal]) -> list[tuple[str, Decimal]]:
    """Split one kind's summed record columns into categories that add up to the total."""
    total, gpu, cpu, disk, standard, high, credit, adjustment = sums
    if kind == ResourceKind.POD:
        parts = [
            (Category.GPU_COMPUTE, gpu),
            (Category.CPU_COMPUTE, cpu),
            (Category.POD_DISK, disk),
        ]
    elif kind == ResourceKind.NETWORK_VOLUME:
        parts = [(Category.NETWORK_STANDARD, standard), (Category.NETWORK_HIGH_PERFORMANCE, high)]
    elif kind == ResourceKind.CLOUD:
        # A FOCUS record keeps compute in cpu_usd and storage in storage_standard_usd, the
        # provider's credits and adjustments apart in credit_usd and adjustment_usd
        # (labgov/runpod/focus.py); the rest of its total is the provider's other services.
        parts = [
            (Category.CLOUD_COMPUTE, cpu),
            (Category.CLOUD_STORAGE, standard),
            (Category.CLOUD_OTHER, total - cpu - standard - credit - adjustment),
            (Category.CLOUD_CREDIT, credit),
            (Category.CLOUD_ADJUSTMENT, adjustment),
        ]
    elif kind in (ResourceKind.SERVERLESS, ResourceKind.ENDPOINT):
        parts = [(Category.SERVERLESS, total)]
    else:
        parts = [(Category.CLUSTERS, total)]
    rest = total - sum((amount for _, amount in parts), ZERO)
    return [(c, a) for c, a in [*parts, (Category.OTHER, rest)] if a]


@dataclass
class SpanSums:
    """One scan of an account's billing records of some UTC days, which the ledger's usage,
    the rollups and the unattributed queue all follow (labgov/runpod/providers.py:
    span_written): grouped by day, kind and allocation, and by resource where nobody owns
    the spend. PostgreSQL sums numeric exactly; the groups are added in Python, as Decimal."""

    days: list[dt.date]
    start: dt.datetime
    end: dt.datetime
    # {(day, category, allocation id or None): amount}: what the records say, split funding
    # moved to its shares (split_deltas), zeros dropped. The rollups' rows.
    categories: dict[tuple[dt.date, str, int | None], Decimal]
    # {resource id: the spend of its unattributed records in the span}.
    unowned: dict[int, Decimal]

    def usage(self) -> dict[tuple[int, dt.date], Decimal]:
        """{(allocation id, day): amount}: the attributed spend the ledger's usage follows.
        The categories of a kind add up to its records' total (categories_of), and split
        moves of a day add up to zero between its shares, so this is the records' total per
        allocation and day with each split share's part, to the last digit."""
        usage: dict[tuple[int, dt.date], Decimal] = defaultdict(lambda: ZERO)
        for (day, _, allocation_id), amount in self.categories.items():
            if allocation_id is not None:
                usage[(allocation_id, day)] += amount
        return {k: v for k, v in usage.items() if v}


def span_sums(*, account, days, unowned: bool = True, written: dict | None = None) -> SpanSums:
    """Sum the account's billing records of these UTC days once (see SpanSums); without
    `unowned`, not per resource (its `unowned` is then empty). `written`: the days' records
    summed already, {(UTC day, kind, allocation id): sums of COLUMNS}, by the writer that
    wrote every one of them (billing_store.write_slice's day_sums); not read again then."""
    if written is not None and unowned:
        raise TypeError("the writer's sums are not per resource")
    days = sorted(set(days))
    if not days:
        epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
        return SpanSums([], epoch, epoch, {}, {})
    start = dt.datetime.combine(days[0], dt.time(), tzinfo=UTC)
    end = dt.datetime.combine(days[-1] + dt.timedelta(days=1), dt.time(), tzinfo=UTC)
    wanted = set(days)
    if written is not None:
        sums = written
    else:
        records = BillingRecord.objects.filter(
            resource__account=account, bucket_start__gte=start, bucket_start__lt=end
        ).annotate(day=TruncDay("bucket_start", tzinfo=UTC))
        keys = ["day", "kind", "allocation_id"]
        if unowned:
            # The resource is a key only of spend nobody owns: the attributed records of a
            # day, kind and allocation stay one group.
            records = records.annotate(
                unowned=Case(When(allocation__isnull=True, then=F("resource_id")), default=None)
            )
            keys.append("unowned")
        sums = grouped_multi_sums(records, keys, COLUMNS)

    categories: dict[tuple, Decimal] = defaultdict(lambda: ZERO)
    by_resource: dict[int, Decimal] = defaultdict(lambda: ZERO)
    for (moment, kind, allocation_id, *resource), columns in sums.items():
        day = moment.astimezone(UTC).date() if isinstance(moment, dt.datetime) else moment
        if day not in wanted:
            continue
        for category, amount in categories_of(kind, columns):
            categories[(day, category, allocation_id)] += amount
        if resource and resource[0] is not None:
            by_resource[resource[0]] += columns[0]

    for key, delta in split_deltas(account=account, start=start, end=end, days=wanted).items():
        categories[key] += delta
    return SpanSums(
        days,
        start,
        end,
        {k: v for k, v in categories.items() if v},
        {k: v for k, v in by_resource.items() if v},
    )


def rollups_rebuild(*, account, days, sums: SpanSums | None = None) -> None:
    """Recompute the account's daily and monthly rollups (and the daily ones by lab,
    lab_days_rebuild) for these UTC days from its billing
    records (`sums`, when the caller has summed them already: span_sums of these days). Runs
    in the caller's transaction (the one that wrote the records), under the account row's
    lock (taken here if the caller has not): slices of one sync rebuild each month they touch
    from all its days, one at a time, each seeing the others' committed days.
    """
    days = sorted(set(days))
    if not days:
        return
    account_lock_serial(account.pk)
    if sums is None:
        sums = span_sums(account=account, days=days)
    elif sums.days != days:
        raise ValueError("the sums are of other days than the rollups rebuilt")
    amounts = sums.categories

    owners = _owners({k[2] for k in amounts if k[2] is not None})
    # Cost transfers' rows are not made from records: they stay (labgov/transfers).
    DailySpend.objects.filter(account=account, day__in=days).exclude(
        category=Category.TRANSFER
    ).delete()
    unowned = (None, account.lab_id, None)  # its account's lab's, when the account has one
    insert_rows(
        DailySpend,
        [*_ROLLUP_FIELDS, "day", "funding_source_id", "lab_id", "user_id"],
        (
            (account.pk, account.institution_id, category, allocation_id, amount, day)
            + owners.get(allocation_id, unowned)
            for (day, category, allocation_id), amount in amounts.items()
            if amount
        ),
    )
    lab_days_rebuild(account=account, days=days)
    months_rebuild(account=account, months={d.replace(day=1) for d in days})
    spend_changed(account_id=account.pk, days=days)


def lab_days_rebuild(*, account, days) -> None:
    """Recompute the account's LabDailySpend rows of these UTC days from its daily rollups,
    under the account row's lock (taken here if the caller has not): the rows are the
    account's own, as its DailySpend rows are, so no other account's writer meets them."""
    days = sorted(set(days))
    if not days:
        return
    account_lock_serial(account.pk)
    attributed = DailySpend.objects.filter(
        account=account, day__in=days, allocation__isnull=False, lab__isnull=False
    )
    sums = grouped_multi_sums(attributed, ["lab_id", "day", "category"], ["amount_usd"])
    LabDailySpend.objects.filter(account=account, day__in=days).delete()
    insert_rows(
        LabDailySpend,
        ["account_id", "lab_id", "day", "category", "amount_usd"],
        (
            (account.pk, lab_id, day, category, total[0])
            for (lab_id, day, category), total in sums.items()
            if total[0]
        ),
    )


def spend_changed(*, account_id: int, days) -> None:
    """Count a change of the account's spend on these UTC days (SpendVersion), in the caller's
    transaction and under the account lock the rollups' writers hold."""
    table = SpendVersion._meta.db_table
    with connection.cursor() as cursor:
        # Only the model's own table name goes into the SQL; the values are parameters.
        cursor.executemany(
            f"INSERT INTO {table} (account_id, day, version) VALUES (%s, %s, 1)"  # noqa: S608
            f" ON CONFLICT (account_id, day) DO UPDATE SET version = {table}.version + 1",
            [(account_id, day) for day in sorted(set(days))],
        )


def spend_version(institution_id: int, first_day: dt.date, last_day: dt.date) -> int:
    """A number that changes whenever spend of the institution's accounts on a UTC day in
    [first_day, last_day] changes."""
    version = SpendVersion.objects.filter(
        account__institution_id=institution_id, day__gte=first_day, day__lte=last_day
    ).aggregate(v=Coalesce(Sum("version"), 0))["v"]
    return int(version)


@dataclass(frozen=True)
class SplitSegment:
    """A piece [start, end) of one resource's timeline paid in shares; end None = open.
    `primary` is the allocation its billing records name; `shares` are (allocation id,
    percent) in a fixed order."""

    resource_id: int
    start: dt.datetime
    end: dt.datetime | None
    primary: int
    shares: tuple[tuple[int, Decimal], ...]


def split_segments(
    *,
    start: dt.datetime,
    end: dt.datetime,
    account=None,
    resource_ids=None,
    institution_id: int | None = None,
) -> list[SplitSegment]:
    """The split pieces of the timelines (of an account's resources, the given ones, or an
    institution's) that overlap [start, end). Usually none: one query answers that."""
    splits = Assignment.objects.filter(shares__isnull=False, starts_at__lt=end)
    if institution_id is not None:
        splits = splits.filter(resource__account__institution_id=institution_id)
    if account is not None:
        splits = splits.filter(resource__account=account)
    if resource_ids is not None:
        splits = splits.filter(resource_id__in=resource_ids)
    split_ids = set(splits.values_list("pk", flat=True))
    if not split_ids:
        return []
    shares: dict[int, list[tuple[int, Decimal]]] = defaultdict(list)
    for share in AssignmentShare.objects.filter(assignment_id__in=split_ids).order_by(
        "assignment_id", "-share_percent", "allocation_id"
    ):
        shares[share.assignment_id].append((share.allocation_id, share.share_percent))
    timelines: dict[int, list[Assignment]] = defaultdict(list)
    for a in Assignment.objects.filter(
        resource_id__in=Assignment.objects.filter(pk__in=split_ids).values("resource_id")
    ).order_by("resource_id", "starts_at", "pk"):
        timelines[a.resource_id].append(a)
    segments = []
    for resource_id, assignments in timelines.items():
        for i, a in enumerate(assignments):
            if a.pk not in split_ids:
                continue
            later = [b.starts_at for b in assignments[i + 1 :]]
            if later and later[0] == a.starts_at:
                continue  # a later assignment from the same moment decides instead
            seg_end = later[0] if later else None
            if seg_end is not None and seg_end <= start:
                continue
            segments.append(
                SplitSegment(
                    resource_id, a.starts_at, seg_end, a.allocation_id, tuple(shares[a.pk])
                )
            )
    return segments


def split_deltas(
    *, start: dt.datetime, end: dt.datetime, days: set[dt.date], account=None, resource_ids=None
) -> dict[tuple[dt.date, str, int], Decimal]:
    """What split funding moves on these UTC days, per (day, category, allocation): each split
    piece's amount of a day and category leaves the allocation its records name and goes to
    its shares (split_by_shares: the parts add up to the amount exactly). The rollups and the
    ledger's usage both add these to what the records say, so they agree to the last digit."""
    deltas: dict[tuple, Decimal] = defaultdict(lambda: ZERO)
    for (_, day, category, allocation_id), delta in split_moves(
        start=start, end=end, account=account, resource_ids=resource_ids
    ).items():
        if day in days:
            deltas[(day, category, allocation_id)] += delta
    return {k: v for k, v in deltas.items() if v}


def split_moves(
    *, start: dt.datetime, end: dt.datetime, account=None, resource_ids=None, institution_id=None
) -> dict[tuple[int, dt.date, str, int], Decimal]:
    """split_deltas per resource: {(resource id, UTC day, category, allocation id): amount}
    to add to what the billing records of [start, end) say (grouped by the allocation they
    name) to pay split resources in their shares. For readers of raw records, such as
    invoices: the moves of one resource, day and category add up to zero exactly."""
    deltas: dict[tuple, Decimal] = defaultdict(lambda: ZERO)
    segments = split_segments(
        start=start,
        end=end,
        account=account,
        resource_ids=resource_ids,
        institution_id=institution_id,
    )
    for segment in segments:
        records = BillingRecord.objects.filter(
            resource_id=segment.resource_id,
            bucket_start__gte=max(start, segment.start),
            bucket_start__lt=min(end, segment.end) if segment.end else end,
        ).annotate(day=TruncDay("bucket_start", tzinfo=UTC))
        percents = [percent for _, percent in segment.shares]
        resource_id = segment.resource_id
        for (moment, kind), columns in grouped_multi_sums(
            records, ["day", "kind"], COLUMNS
        ).items():
            day = moment.astimezone(UTC).date() if isinstance(moment, dt.datetime) else moment
            for category, amount in categories_of(kind, columns):
                deltas[(resource_id, day, category, segment.primary)] -= amount
                parts = split_by_shares(amount, percents)
                for (allocation_id, _), part in zip(segment.shares, parts, strict=True):
                    deltas[(resource_id, day, category, allocation_id)] += part
    return {k: v for k, v in deltas.items() if v}


def _owners(allocation_ids) -> dict[int, tuple]:
    """Each allocation's (funding source id, lab id, user id), which its rollups copy."""
    return {
        pk: (fs, lab, user)
        for pk, fs, lab, user in Allocation.objects.filter(pk__in=allocation_ids).values_list(
            "pk", "funding_source_id", "funding_source__lab_id", "user_id"
        )
    }


# The fields every rollup row starts with, in insert_rows' order.
_ROLLUP_FIELDS = ["account_id", "institution_id", "category", "allocation_id", "amount_usd"]


def months_rebuild(*, account, months: set[dt.date]) -> None:
    """Recompute the account's monthly rollups of these months from its daily ones, under the
    account row's lock (taken here if the caller has not)."""
    account_lock_serial(account.pk)
    for month in sorted(months):
        following = (month + dt.timedelta(days=32)).replace(day=1)
        days = DailySpend.objects.filter(account=account, day__gte=month, day__lt=following)
        keys = ["category", "allocation_id", "funding_source_id", "lab_id", "user_id"]
        sums = grouped_multi_sums(days, keys, ["amount_usd"])
        MonthlySpend.objects.filter(account=account, month=month).delete()
        insert_rows(
            MonthlySpend,
            [*_ROLLUP_FIELDS, "month", "funding_source_id", "lab_id", "user_id"],
            (
                (account.pk, account.institution_id, category, allocation_id, total[0], month)
                + (fs_id, lab_id, user_id)
                for (category, allocation_id, fs_id, lab_id, user_id), total in sums.items()
                if total[0]
            ),
        )
    source_months_rebuild(account=account, months=months)


def source_months_rebuild(*, account, months) -> None:
    """Recompute the account's SourceMonthlySpend rows of these months from its monthly
    rollups, under the account row's lock (taken here if the caller has not): the rows are
    the account's own, as its MonthlySpend rows are, so no other account's writer meets them."""
    months = sorted(set(months))
    if not months:
        return
    account_lock_serial(account.pk)
    rollups = MonthlySpend.objects.filter(account=account, month__in=months)
    sums = grouped_multi_sums(rollups, ["funding_source_id", "month"], ["amount_usd"])
    SourceMonthlySpend.objects.filter(account=account, month__in=months).delete()
    insert_rows(
        SourceMonthlySpend,
        ["account_id", "institution_id", "funding_source_id", "month", "amount_usd"],
        (
            (account.pk, account.institution_id, fs_id, month, total[0])
            # A month whose rollups net to zero keeps its row: the funding source had spend
            # in it, and finance's page lists it as it listed the monthly rollups' sum.
            for (fs_id, month), total in sums.items()
        ),
    )
