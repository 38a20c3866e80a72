"""Pieces the dashboards share: rollup sums, what runs now, storage billing while idle, and
the tables and charts built from them."""

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, Sum

from labgov.core.compiled import CompiledValues
from labgov.core.money import ZERO, grouped_sums, to_cents
from labgov.dashboard.forecast import burn_window
from labgov.dashboard.tables import DATE, MONEY, NUMBER, PERCENT, Column, Row, Table, share_percent
from labgov.runpod.history import is_unseen_stop, stop_histories, stopped_at
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.pricing import resource_storage_monthly_usd
from labgov.runpod.types import PodStatus
from labgov.usage.models import Category, DailySpend

CATEGORY_LABELS = dict(Category.choices)
HOURS_PER_DAY = 24

# Chart colours, in order; the same series keeps the same colour across a page.
PALETTE = [
    "#2455c3",
    "#e07b39",
    "#2a9d8f",
    "#b5179e",
    "#8d99ae",
    "#e9c46a",
    "#6a4c93",
    "#d62828",
    "#90be6d",
    "#577590",
]


def daily_sums(
    q: Q, first: dt.date, last: dt.date, keys: list[str], *, model=DailySpend
) -> dict[tuple, Decimal]:
    """Exact sums of daily rollups (DailySpend, or LabDailySpend: `model`) matching q on the
    days first..last (included)."""
    return grouped_sums(model.objects.filter(q, day__gte=first, day__lte=last), keys, "amount_usd")


def burn_sums(q: Q, today: dt.date, key: str) -> dict:
    """Spend in the burn-rate window per `key` (funding_source_id or allocation_id)."""
    first, last = burn_window(today)
    return {k[0]: v for k, v in daily_sums(q, first, last, [key]).items()}


class DailySums:
    """daily_sums of one shape, its Q made from ids (`q_of(lab_id=…)`), for a page that reads
    it on every request: its SQL is compiled once per process (labgov/core/compiled.py).
    PostgreSQL sums numeric exactly; elsewhere daily_sums sums in Python."""

    def __init__(
        self, q_of: Callable[..., Q], keys: list[str], *, model=DailySpend, prepared=False
    ):
        """`prepared`: for sums of few rows whatever the range (one person's rollups, the
        rollups by lab), which PostgreSQL may then plan once (CompiledValues)."""
        self.q_of, self.keys, self.model = q_of, keys, model
        self._query = CompiledValues(
            lambda first, last, **ids: (
                model.objects.filter(q_of(**ids), day__gte=first, day__lte=last)
                .values(*keys)
                .annotate(_sum0=Sum("amount_usd"))
                .values_list(*keys, "_sum0")
            ),
            prepared=prepared,
        )

    def __call__(self, first: dt.date, last: dt.date, **ids) -> dict[tuple, Decimal]:
        if connection.vendor != "postgresql":
            return daily_sums(self.q_of(**ids), first, last, self.keys, model=self.model)
        n = len(self.keys)
        rows = self._query.rows(first=first, last=last, **ids)
        return {tuple(row[:n]): row[n] or ZERO for row in rows}

    def burn(self, today: dt.date, **ids) -> dict:
        """As burn_sums: spend in the burn-rate window per the one key."""
        first, last = burn_window(today)
        return {k[0]: v for k, v in self(first, last, **ids).items()}


# What "running now" means: pods Runpod reports RUNNING, and clusters, which exist only
# while their pods run.
RUNNING_Q = Q(kind=ResourceKind.POD, status=PodStatus.RUNNING) | Q(kind=ResourceKind.CLUSTER)


# The columns the dashboards show: resources carry JSON (environment, details) that would
# cost more to decode than the rest of a page's rows.
RESOURCE_FIELDS = (
    "kind",
    "runpod_id",
    "name",
    "requested_name",
    "status",
    "status_changed_at",
    "cost_per_hr_usd",
    "gpu_type_id",
    "gpu_count",
    "container_disk_gb",
    "volume_disk_gb",
    "size_gb",
    "volume_type",
    "gone_at",
    "current_allocation__project_name",
    "current_allocation__user__username",
    "current_allocation__user__first_name",
    "current_allocation__user__last_name",
    "current_allocation__funding_source__name",
    # Whose lab pays: a person may act on their own pods while they are in it.
    "current_allocation__funding_source__lab",
)


def resources_shown(owner_q: Q):
    return (
        Resource.objects.present()
        .filter(owner_q)
        .select_related("current_allocation__user", "current_allocation__funding_source")
        .only(*RESOURCE_FIELDS)
    )


def _mounted():
    return Resource.objects.present().filter(
        account=OuterRef("account"),
        kind=ResourceKind.POD,
        status=PodStatus.RUNNING,
        network_volume_id=OuterRef("runpod_id"),
    )


@dataclass(slots=True)
class ShownResource:
    """A resource as the running-now and idle-storage tables show it: read as plain values,
    which costs a fraction of building models with their allocation, person and funding."""

    pk: int
    kind: str
    runpod_id: str
    name: str
    requested_name: str
    status: str
    status_changed_at: dt.datetime | None
    cost_per_hr_usd: Decimal
    gpu_type_id: str
    gpu_count: int
    container_disk_gb: int
    volume_disk_gb: int
    size_gb: int
    volume_type: str
    gone_at: dt.datetime | None
    holder: str
    funding_name: str
    storage_monthly_usd: Decimal = ZERO
    storage_gb: int = 0
    # For stopped pods: when they stopped, from billing where labgov did not see it happen
    # (a `Before` bound where the history held does not reach back that far).
    stopped_at: dt.datetime | None = None

    def get_kind_display(self) -> str:
        return ResourceKind(self.kind).label

    @property
    def label(self) -> str:
        return self.requested_name or self.name or self.runpod_id


# ShownResource's fields read from the resource itself, in its order.
SHOWN_FIELDS = ("pk", *RESOURCE_FIELDS[: RESOURCE_FIELDS.index("gone_at") + 1])


def running_and_idle(rows) -> tuple[list[ShownResource], list[ShownResource]]:
    """What runs now (highest $/hour first), and the storage billing while idle (highest
    $/month first, each with `storage_monthly_usd` at Runpod's published prices and
    `storage_gb`), from present_query's rows that shown_and_costing keeps for them, and one
    more query for the stopped pods labgov first saw already stopped (`stop_histories`),
    when there are any."""
    running, idle, stopped = [], [], []
    shown = len(SHOWN_FIELDS)
    for row in rows:
        values = row[:shown]
        allocation_id, project, username, first, last, funding, first_seen = row[shown:]
        holder = holder_label(project, username, first, last) if allocation_id else "unattributed"
        resource = ShownResource(*values, holder=holder, funding_name=funding or "")
        if resource.kind == ResourceKind.POD and resource.status == PodStatus.EXITED:
            stopped.append((resource, first_seen))
        is_running = resource.kind == ResourceKind.CLUSTER or (
            resource.kind == ResourceKind.POD and resource.status == PodStatus.RUNNING
        )
        if is_running:
            running.append(resource)
            continue
        resource.storage_monthly_usd = resource_storage_monthly_usd(resource)
        resource.storage_gb = (
            resource.volume_disk_gb if resource.kind == ResourceKind.POD else resource.size_gb
        )
        idle.append(resource)
    # When the stopped pods stopped: from billing for those labgov first saw already stopped.
    histories = stop_histories(
        r.pk
        for r, first_seen in stopped
        if is_unseen_stop(r.kind, r.status, r.volume_disk_gb, r.status_changed_at, first_seen)
    )
    for resource, first_seen in stopped:
        last_compute, first_billed, history_from = histories.get(resource.pk, (None,) * 3)
        resource.stopped_at = stopped_at(
            last_compute=last_compute,
            first_record=first_billed,
            history_from=history_from,
            status_changed_at=resource.status_changed_at,
            first_seen_at=first_seen,
        )
    running.sort(key=lambda r: (-r.cost_per_hr_usd, r.name, r.pk))
    idle.sort(key=lambda r: (-r.storage_monthly_usd, r.name, r.pk))
    return running, idle


@dataclass
class NowRates:
    """What runs and is stored now, in USD per day, per allocation and per funding source:
    the hourly cost of running resources plus their storage and that of stopped pods and
    network volumes (at the published prices), of resources attributed to someone."""

    by_allocation: dict[int, Decimal]
    by_source: dict[int, Decimal]


# What costs money while present: running pods and clusters, and anything with storage.
_COSTING_Q = (
    RUNNING_Q
    | Q(kind=ResourceKind.POD, status=PodStatus.EXITED, volume_disk_gb__gt=0)
    | Q(kind=ResourceKind.NETWORK_VOLUME)
)
_RATE_FIELDS = (
    "kind",
    "status",
    "cost_per_hr_usd",
    "container_disk_gb",
    "volume_disk_gb",
    "size_gb",
    "volume_type",
    "gone_at",
)


@dataclass(slots=True)
class _Costing:
    kind: str
    status: str
    cost_per_hr_usd: Decimal
    container_disk_gb: int
    volume_disk_gb: int
    size_gb: int
    volume_type: str
    gone_at: dt.datetime | None


def costing_query(owner_q: Q):
    """The present resources matching owner_q that cost money now, as now_rates reads them."""
    return (
        Resource.objects.present()
        .filter(owner_q, _COSTING_Q, current_allocation__isnull=False)
        .values_list(
            "current_allocation_id", "current_allocation__funding_source_id", *_RATE_FIELDS
        )
    )


def present_query(owner_q: Q):
    """The present resources matching owner_q that run, bill while idle or cost money now, in
    one query: each row the resource's SHOWN_FIELDS, what running_and_idle reads of its
    allocation and when labgov first saw it, its funding source, and whether it is a network
    volume a running pod of its account has mounted (which costs money now and is not idle
    storage). `shown_and_costing` splits the rows for running_and_idle and now_rates.

    Storage that bills while nothing runs: stopped pods with a volume disk, and network
    volumes no running pod of the same account has mounted."""
    mounted = ExpressionWrapper(
        Q(kind=ResourceKind.NETWORK_VOLUME) & Exists(_mounted()), output_field=BooleanField()
    )
    return (
        Resource.objects.present()
        .filter(owner_q, _COSTING_Q)
        .annotate(_mounted_volume=mounted)
        .values_list(
            *SHOWN_FIELDS,
            "current_allocation_id",
            "current_allocation__project_name",
            "current_allocation__user__username",
            "current_allocation__user__first_name",
            "current_allocation__user__last_name",
            "current_allocation__funding_source__name",
            "first_seen_at",
            "current_allocation__funding_source_id",
            "_mounted_volume",
        )
    )


_ALLOCATION_AT = len(SHOWN_FIELDS)  # current_allocation_id, after the resource's own fields
_RATES_AT = [SHOWN_FIELDS.index(name) for name in _RATE_FIELDS]


def shown_and_costing(rows) -> tuple[list[tuple], list[tuple]]:
    """present_query's rows split: those running_and_idle shows (all but mounted network
    volumes), and those now_rates reads as costing_query gives them (the attributed ones)."""
    shown, costing = [], []
    for row in rows:
        *own, source_id, mounted_volume = row
        if not mounted_volume:
            shown.append(own)
        allocation_id = own[_ALLOCATION_AT]
        if allocation_id is not None:
            costing.append((allocation_id, source_id, *[own[i] for i in _RATES_AT]))
    return shown, costing


def now_rates(owner_q: Q | None = None, *, rows=None) -> NowRates:
    """One query over the present resources matching owner_q that cost money now
    (`costing_query(owner_q)`, or its `rows` when the caller has run it)."""
    hours_per_month = settings.LABGOV_HOURS_PER_MONTH
    by_allocation: dict[int, Decimal] = defaultdict(lambda: ZERO)
    by_source: dict[int, Decimal] = defaultdict(lambda: ZERO)
    rows = costing_query(owner_q) if rows is None else rows
    for allocation_id, source_id, *values in rows:
        daily = daily_rate_now(_Costing(*values), hours_per_month)
        by_allocation[allocation_id] += daily
        by_source[source_id] += daily
    return NowRates(dict(by_allocation), dict(by_source))


def daily_rate_now(resource, hours_per_month: Decimal) -> Decimal:
    """USD/day a present resource costs now: its hourly price while running, plus storage."""
    hourly = resource_storage_monthly_usd(resource) / hours_per_month
    if resource.kind == ResourceKind.CLUSTER or (
        resource.kind == ResourceKind.POD and resource.status == PodStatus.RUNNING
    ):
        hourly += resource.cost_per_hr_usd
    return hourly * HOURS_PER_DAY


def holder_label(project: str, username: str | None, first: str, last: str) -> str:
    """Allocation.holder_name, from the allocation's and its person's columns."""
    if username is None:
        return project
    person = f"{first} {last}".strip() or username
    return f"{person} – {project}" if project else person


def running_table(resources: list[ShownResource], *, with_funding: bool = False) -> Table:
    columns = [Column("name", "Resource"), Column("kind", "Kind"), Column("gpu", "GPUs")]
    if with_funding:
        columns.append(Column("funding", "Funding source"))
    columns += [
        Column("holder", "Paid by"),
        Column("since", "Status since", DATE),
        Column("rate", "$/hour", MONEY),
        Column("day", "$/day at this rate", MONEY),
    ]
    rows = []
    for r in resources:
        cells = [
            r.label,
            r.get_kind_display(),
            f"{r.gpu_count}× {r.gpu_type_id}" if r.gpu_count else "",
        ]
        if with_funding:
            cells.append(r.funding_name)
        cells += [
            r.holder,
            r.status_changed_at,
            r.cost_per_hr_usd,
            r.cost_per_hr_usd * HOURS_PER_DAY,
        ]
        rows.append(Row(cells))
    rate = sum((r.cost_per_hr_usd for r in resources), ZERO)
    footer = ["Total", "", "", *([""] if with_funding else []), "", "", rate, rate * 24]
    return Table(
        "running",
        "Running now",
        columns,
        rows,
        footer=footer if rows else None,
        default_sort="-rate",
        empty="Nothing is running.",
        note="Pods Runpod reports as running, and clusters, at the hourly price Runpod gives.",
    )


def storage_table(resources: list[ShownResource], *, with_funding: bool = False) -> Table:
    columns = [Column("name", "Resource"), Column("kind", "Kind"), Column("gb", "GB", NUMBER)]
    if with_funding:
        columns.append(Column("funding", "Funding source"))
    columns += [
        Column("holder", "Paid by"),
        Column("since", "Idle since", DATE),
        Column("monthly", "$/month", MONEY),
    ]
    rows = []
    for r in resources:
        cells = [r.label, r.get_kind_display(), r.storage_gb]
        if with_funding:
            cells.append(r.funding_name)
        since = r.stopped_at if r.kind == ResourceKind.POD else None
        cells += [r.holder, since, r.storage_monthly_usd]
        rows.append(Row(cells))
    monthly = sum((r.storage_monthly_usd for r in resources), ZERO)
    footer = ["Total", "", sum(r.storage_gb for r in resources)]
    footer += [""] * (2 + with_funding) + [monthly]
    return Table(
        "storage",
        "Storage billing while nothing runs",
        columns,
        rows,
        footer=footer if rows else None,
        default_sort="-monthly",
        empty="No idle storage: nothing bills while stopped.",
        note=(
            "Stopped pods keep paying for their volume disk (at the stopped rate), and network "
            "volumes bill whether or not a pod uses them. Monthly costs at Runpod's published "
            "prices; billing records stay the truth."
        ),
    )


def category_table(by_category: dict[str, Decimal]) -> Table:
    total = sum(by_category.values(), ZERO)
    rows = [
        Row([CATEGORY_LABELS.get(c, c), amount, share_percent(amount, total)])
        for c, amount in by_category.items()
        if amount
    ]
    return Table(
        "categories",
        "Spend by category",
        [
            Column("category", "Category"),
            Column("amount", "Spend", MONEY),
            Column("share", "Share", PERCENT),
        ],
        rows,
        footer=["Total", total, Decimal(100) if total else None] if rows else None,
        default_sort="-amount",
    )


def people_table(
    by_holder: dict[str, dict[str, Decimal]], *, title: str = "Spend by person"
) -> Table:
    """Holders (a person, or a project allocation's name) by category, for a range."""
    # The categories anyone spent on, in Category's order (one pass over the holders).
    spent = {c for amounts in by_holder.values() for c, amount in amounts.items() if amount}
    categories = [c for c in Category.values if c in spent]
    grand = sum((sum(h.values(), ZERO) for h in by_holder.values()), ZERO)
    rows = []
    for holder, amounts in by_holder.items():
        total = sum(amounts.values(), ZERO)
        if not total:
            continue
        cells = [holder, *[amounts.get(c, ZERO) for c in categories], total]
        rows.append(Row([*cells, share_percent(total, grand)]))
    columns = [
        Column("holder", "Person"),
        *[Column(c, CATEGORY_LABELS[c], MONEY) for c in categories],
        Column("total", "Total", MONEY),
        Column("share", "Share", PERCENT),
    ]
    column_totals = [sum((h.get(c, ZERO) for h in by_holder.values()), ZERO) for c in categories]
    footer = ["Total", *column_totals, grand, Decimal(100) if grand else None]
    return Table(
        "people", title, columns, rows, footer=footer if rows else None, default_sort="-total"
    )


def by_holder_and_category(
    sums: dict[tuple, Decimal], holders: dict[int, str]
) -> dict[str, dict[str, Decimal]]:
    """{(category, allocation_id, …): amount} → {holder name: {category: amount}}."""
    result: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for (category, allocation_id, *_), amount in sums.items():
        if allocation_id is None:
            continue
        result[holders.get(allocation_id, f"allocation {allocation_id}")][category] += amount
    return result


def _holders(ids):
    from labgov.funding.models import Allocation

    return Allocation.objects.filter(pk__any_of=ids).values_list(
        "pk", "project_name", "user__username", "user__first_name", "user__last_name"
    )


# Read on every request of a lab's page: compiled once per process (core/compiled.py).
_HOLDERS = CompiledValues(_holders)


def holder_names(allocation_ids: set[int]) -> dict[int, str]:
    """Holder names, as Allocation.holder_name gives them, in one small query (cheaper than
    grouping the day rollups by the holders' name columns)."""
    holders = {}
    for allocation_id, project, username, first, last in _HOLDERS.rows(ids=allocation_ids):
        holders[allocation_id] = holder_label(project, username, first, last)
    return holders


def money(value: Decimal | None) -> Decimal | None:
    """A chart value: Decimal in cents, serialized as a string by json_script."""
    return None if value is None else to_cents(value)


def doughnut_chart(labels: list[str], values: list[Decimal]) -> dict:
    return {
        "type": "doughnut",
        "labels": labels,
        "datasets": [
            {
                "label": "Spend",
                "data": [money(v) for v in values],
                "backgroundColor": [PALETTE[i % len(PALETTE)] for i in range(len(values))],
            }
        ],
    }


def bar_chart(labels: list[str], values: list[Decimal], *, label: str = "Spend") -> dict:
    return {
        "type": "bar",
        "horizontal": True,
        "labels": labels,
        "datasets": [
            {"label": label, "data": [money(v) for v in values], "backgroundColor": PALETTE[0]}
        ],
    }


def top_with_rest(items: list[tuple[str, Decimal]], n: int = 12) -> list[tuple[str, Decimal]]:
    """The n biggest, and everything else as one "Others" entry."""
    items = sorted(items, key=lambda kv: -kv[1])
    if len(items) <= n:
        return items
    rest = sum((v for _, v in items[n - 1 :]), ZERO)
    return [*items[: n - 1], ("Others", rest)]


def days(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
