"""A person's own dashboard: their allocations with forecasts, their resources and what they
cost now, and their share of their lab's spend over time."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models import Q

from labgov.accounts.models import User, today_utc
from labgov.core.compiled import CompiledValues
from labgov.core.money import ZERO
from labgov.dashboard.filters import DayRange, day_presets, day_range
from labgov.dashboard.forecast import Outlook, burn_rate, forecast
from labgov.dashboard.selectors.common import (
    PALETTE,
    RESOURCE_FIELDS,
    DailySums,
    daily_rate_now,
    days,
    money,
    resources_shown,
)
from labgov.dashboard.tables import (
    DATE,
    MONEY,
    NUMBER,
    PERCENT,
    TEXT,
    Column,
    Row,
    Table,
    share_percent,
)
from labgov.funding.models import Allocation, FundingSource
from labgov.runpod.models import Resource
from labgov.runpod.pricing import resource_storage_monthly_usd
from labgov.runpod.types import PodStatus
from labgov.usage.models import LabDailySpend

DEFAULT_DAYS = 30


@dataclass(slots=True)
class MyAllocation:
    """One of the person's allocations as the page shows it, with its ledger figures."""

    pk: int
    project_name: str
    cap_usd: Decimal
    end_date: dt.date
    tag_code: str
    funding_name: str
    lab_id: int
    lab_name: str
    committed_usd: Decimal
    spent_usd: Decimal
    remaining_usd: Decimal


def _my_allocations(user_id: int):
    # A person's own allocations are theirs to see wherever they are (access.allocations_q
    # holds every allocation of theirs): no other visibility to check.
    return (
        Allocation.objects.filter(user_id=user_id)
        .with_figures()
        .order_by("end_date", "pk")
        .values_list(
            "pk",
            "project_name",
            "cap_usd",
            "end_date",
            "tag_code",
            "funding_source__name",
            "funding_source__lab_id",
            "funding_source__lab__name",
            "committed_usd",
            "spent_usd",
            "remaining_usd",
        )
    )


# Read on every request of the page: compiled once per process (labgov/core/compiled.py).
_MY_ALLOCATIONS = CompiledValues(_my_allocations)
# The person's own rollups, and the lab's by day below, are few rows whatever the range (and
# grouped by ids and days, which a generic plan sorts cheaply): kept prepared, PostgreSQL
# plans them once (0.77 -> 0.33 ms of its CPU per request for the three, at 1M records).
_BURNS = DailySums(lambda user_id: Q(allocation__user_id=user_id), ["allocation_id"], prepared=True)


def _model_order(model, columns) -> tuple[str, ...]:
    # Model.from_db takes a subset of the columns in the model's own order.
    return tuple(f.attname for f in model._meta.concrete_fields if f.attname in columns)


# The person's resources as resources_shown reads them, compiled once per process
# (core/compiled.py): the resource's own columns, then its allocation's, person's and funding
# source's, from which my_resources makes the models select_related would.
_OWN_COLUMNS = _model_order(
    Resource,
    {"id", "current_allocation_id", *RESOURCE_FIELDS[: RESOURCE_FIELDS.index("gone_at") + 1]},
)
_ALLOCATION_COLUMNS = _model_order(
    Allocation, {"id", "user_id", "funding_source_id", "project_name"}
)
_USER_COLUMNS = _model_order(User, {"id", "username", "first_name", "last_name"})
_SOURCE_COLUMNS = _model_order(FundingSource, {"id", "name", "lab_id"})
_MY_RESOURCES = CompiledValues(
    lambda user_id: (
        resources_shown(Q(current_allocation__user_id=user_id))
        .order_by("kind", "name", "pk")
        .values_list(
            *_OWN_COLUMNS,
            *[f"current_allocation__{c}" for c in _ALLOCATION_COLUMNS],
            *[f"current_allocation__user__{c}" for c in _USER_COLUMNS],
            *[f"current_allocation__funding_source__{c}" for c in _SOURCE_COLUMNS],
        )
    )
)


def my_resources(user_id: int) -> list[Resource]:
    """resources_shown of the person's own allocations, by kind, name and id: the same models
    with the same columns loaded (and the others deferred)."""
    if connection.vendor != "postgresql":
        return list(
            resources_shown(Q(current_allocation__user_id=user_id)).order_by("kind", "name", "pk")
        )
    db = connection.alias
    own, a, u = len(_OWN_COLUMNS), len(_ALLOCATION_COLUMNS), len(_USER_COLUMNS)
    resources = []
    for row in _MY_RESOURCES.rows(user_id=user_id):
        allocation = Allocation.from_db(db, _ALLOCATION_COLUMNS, row[own : own + a])
        allocation.user = User.from_db(db, _USER_COLUMNS, row[own + a : own + a + u])
        allocation.funding_source = FundingSource.from_db(db, _SOURCE_COLUMNS, row[own + a + u :])
        resource = Resource.from_db(db, _OWN_COLUMNS, row[:own])
        resource.current_allocation = allocation
        resources.append(resource)
    return resources


@dataclass
class StudentDashboard:
    today: dt.date
    period: DayRange
    presets: list
    labs: list[tuple[int, str]]
    lab_id: int | None
    tables: dict[str, Table]
    totals: dict[str, Decimal]
    share_chart: dict
    # (allocation, its Runpod tag code): a pod with LABGOV_ALLOCATION=<code> is paid by it.
    tags: list[tuple[str, str]]
    # The person's pods, with what they may do to each (my_pods).
    pods: list


def student_dashboard(user, params) -> StudentDashboard:
    today = today_utc()
    period = day_range(
        params, default_first=today - dt.timedelta(days=DEFAULT_DAYS - 1), default_last=today
    )
    allocations = [MyAllocation(*row) for row in _MY_ALLOCATIONS.rows(user_id=user.pk)]
    burns = _BURNS.burn(today, user_id=user.pk) if allocations else {}
    resources = my_resources(user.pk)
    labs = sorted(
        {(a.lab_id, a.lab_name) for a in allocations},
        key=lambda lab: lab[1],
    )
    lab_id = _chosen_lab(params, labs)
    share = _share_by_day(user, lab_id, period) if lab_id is not None else {}

    tables = {
        "allocations": allocations_table(allocations, burns, today, _now_rates(resources)),
        "resources": resources_table(resources),
        "share": share_table(share, period),
    }
    for table in tables.values():
        table.bind(params)
    mine = sum((v for (_, is_mine), v in share.items() if is_mine), ZERO)
    lab_total = sum(share.values(), ZERO)
    totals = {
        "remaining": sum((a.remaining_usd for a in allocations), ZERO),
        "spent": sum((a.spent_usd for a in allocations), ZERO),
        "burn": burn_rate(sum(burns.values(), ZERO)),
        "rate": sum((r.rate_now_usd for r in resources), ZERO),
        "storage": sum((r.storage_monthly_usd for r in resources), ZERO),
        "mine": mine,
        "lab": lab_total,
        "share": share_percent(mine, lab_total),
    }
    return StudentDashboard(
        today=today,
        period=period,
        presets=day_presets(params, today),
        labs=labs,
        lab_id=lab_id,
        tables=tables,
        totals=totals,
        share_chart=share_chart(share, period),
        tags=[(a.funding_name, a.tag_code) for a in allocations],
        pods=my_pods(user, resources),
    )


def _chosen_lab(params, labs: list[tuple[int, str]]) -> int | None:
    ids = [pk for pk, _ in labs]
    try:
        wanted = int(params.get("lab", ""))
    except ValueError:
        wanted = None
    if wanted in ids:
        return wanted
    return ids[0] if ids else None


# The lab's attributed spend by day, from its rollups by lab (LabDailySpend: about 30 times
# fewer rows than the lab's DailySpend rows with an allocation, whose sums they are), and the
# person's own from their rollups: the rest of the lab is the difference. Read on every
# request of the page: compiled once per process (labgov/core/compiled.py).
_LAB_BY_DAY = DailySums(
    lambda lab_id: Q(lab_id=lab_id), ["day"], model=LabDailySpend, prepared=True
)
_MINE_BY_DAY = DailySums(
    lambda lab_id, user_id: Q(lab_id=lab_id, user_id=user_id, allocation__isnull=False),
    ["day"],
    prepared=True,
)


def _share_by_day(user, lab_id: int, period: DayRange) -> dict[tuple, Decimal]:
    """{(day, is mine): amount} of the lab's attributed spend: only totals of the others."""
    lab = _LAB_BY_DAY(period.first, period.last, lab_id=lab_id)
    mine = _MINE_BY_DAY(period.first, period.last, lab_id=lab_id, user_id=user.pk)
    share: dict[tuple, Decimal] = {}
    for (day,), amount in mine.items():
        share[(day, True)] = amount
    # A day the lab's spend sums to zero has no rollup by lab: the others' part is then the
    # negative of mine, not nothing (or the lab's total would read as mine).
    for (day,) in lab.keys() | mine.keys():
        share[(day, False)] = lab.get((day,), ZERO) - mine.get((day,), ZERO)
    return share


def _now_rates(resources) -> dict[int, Decimal]:
    """USD/day of what runs and is stored now per allocation, from the person's resources
    the page has already read."""
    rates: dict[int, Decimal] = {}
    for r in resources:
        if r.current_allocation_id is not None:
            daily = daily_rate_now(r, settings.LABGOV_HOURS_PER_MONTH)
            rates[r.current_allocation_id] = rates.get(r.current_allocation_id, ZERO) + daily
    return rates


def allocations_table(allocations, burns: dict, today: dt.date, now_rate: dict) -> Table:
    rows = []
    for a in allocations:
        rate = burn_rate(burns.get(a.pk, ZERO))
        outlook = forecast(
            remaining_usd=a.remaining_usd,
            burn_rate_usd=rate,
            today=today,
            end_date=a.end_date,
            now_rate_usd=now_rate.get(a.pk, ZERO),
        )
        rows.append(
            Row(
                [
                    a.funding_name,
                    a.lab_name,
                    a.project_name,
                    a.end_date,
                    a.cap_usd,
                    a.spent_usd,
                    a.remaining_usd,
                    rate,
                    outlook.run_out_date if outlook.outlook == Outlook.RUNS_OUT_EARLY else None,
                    outlook.headline,
                ]
            )
        )
    return Table(
        "allocations",
        "My allocations",
        [
            Column("funding", "Funding source"),
            Column("lab", "Lab"),
            Column("project", "Project"),
            Column("end", "Ends", DATE),
            Column("cap", "Cap", MONEY),
            Column("spent", "Spent", MONEY),
            Column("remaining", "Remaining", MONEY),
            Column("burn", "Burn $/day", MONEY),
            Column("run_out", "Runs out", DATE),
            Column("outlook", "Forecast", TEXT, sortable=False),
        ],
        rows,
        default_sort="end",
        empty="You have no allocations yet. Ask your lab admin for one.",
    )


def resources_table(resources: list[Resource]) -> Table:
    rows = []
    for r in resources:
        r.rate_now_usd = (
            r.cost_per_hr_usd if r.status == PodStatus.RUNNING or r.kind == "cluster" else ZERO
        )
        r.storage_monthly_usd = resource_storage_monthly_usd(r)
        rows.append(
            Row(
                [
                    r.label,
                    r.get_kind_display(),
                    r.status,
                    r.current_allocation.funding_source.name,
                    r.volume_disk_gb or r.size_gb or None,
                    r.rate_now_usd,
                    r.storage_monthly_usd,
                ]
            )
        )
    footer = [
        "Total",
        "",
        "",
        "",
        None,
        sum((r.rate_now_usd for r in resources), ZERO),
        sum((r.storage_monthly_usd for r in resources), ZERO),
    ]
    return Table(
        "resources",
        "My resources",
        [
            Column("name", "Resource"),
            Column("kind", "Kind"),
            Column("status", "Status"),
            Column("funding", "Paid from"),
            Column("gb", "Volume GB", NUMBER),
            Column("rate", "$/hour now", MONEY),
            Column("storage", "Storage $/month", MONEY),
        ],
        rows,
        footer=footer if rows else None,
        default_sort="-rate",
        empty="Nothing of yours runs or stores data on Runpod.",
        note=(
            "A stopped pod costs nothing per hour but still pays for its volume disk; network "
            "volumes bill whether or not anything uses them."
        ),
    )


def share_table(share: dict[tuple, Decimal], period: DayRange) -> Table:
    rows = []
    for day in days(period.first, period.last):
        mine = share.get((day, True), ZERO)
        rest = share.get((day, False), ZERO)
        if mine or rest:
            rows.append(Row([day, mine, rest, share_percent(mine, mine + rest)]))
    mine_total = sum((v for (_, m), v in share.items() if m), ZERO)
    rest_total = sum((v for (_, m), v in share.items() if not m), ZERO)
    return Table(
        "share",
        "Day by day",
        [
            Column("day", "Day", DATE),
            Column("mine", "Mine", MONEY),
            Column("rest", "Rest of the lab", MONEY),
            Column("share", "My share", PERCENT),
        ],
        rows,
        footer=["Total", mine_total, rest_total, share_percent(mine_total, mine_total + rest_total)]
        if rows
        else None,
        default_sort="day",
        empty="No spend in the lab in this range.",
    )


def share_chart(share: dict[tuple, Decimal], period: DayRange) -> dict:
    labels = days(period.first, period.last)
    return {
        "type": "bar",
        "stacked": True,
        "labels": [d.isoformat() for d in labels],
        "datasets": [
            {
                "label": "Mine",
                "data": [money(share.get((d, True), ZERO)) for d in labels],
                "backgroundColor": PALETTE[1],
            },
            {
                "label": "Rest of the lab",
                "data": [money(share.get((d, False), ZERO)) for d in labels],
                "backgroundColor": PALETTE[4],
            },
        ],
    }


def my_pods(user, resources: list[Resource]) -> list:
    """The pods a person pays for from their own allocations and still has on Runpod, each
    with what it costs (per hour running, per month stopped) and what they may do to it:
    those among the resources the page has already read (theirs, not gone)."""
    from labgov.alerts.services import own_pod_actions_for, stopped_monthly_usd
    from labgov.runpod.models import ResourceKind

    # In the resources' order: by name, then id, within the pods.
    pods = [r for r in resources if r.kind == ResourceKind.POD and r.gone_at is None]
    for pod in pods:
        pod.actions = own_pod_actions_for(user, pod)
        pod.stopped_monthly_usd = stopped_monthly_usd(pod)
    return pods
