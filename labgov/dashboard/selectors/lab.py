"""A lab's dashboard for its admins (and its institution's admins and finance): every funding
source with its burn rate and forecast, spend over a range by day, category and person, what
runs now and what bills while idle."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Q
from django.http import Http404

from labgov.accounts import access
from labgov.accounts.models import Lab, today_utc
from labgov.core.compiled import CompiledValues
from labgov.core.money import ZERO
from labgov.core.reversing import url_for
from labgov.dashboard.filters import DayRange, day_presets, day_range
from labgov.dashboard.forecast import Outlook, burn_rate, forecast
from labgov.dashboard.selectors.common import (
    CATEGORY_LABELS,
    PALETTE,
    DailySums,
    bar_chart,
    by_holder_and_category,
    category_table,
    days,
    doughnut_chart,
    holder_names,
    money,
    now_rates,
    people_table,
    present_query,
    running_and_idle,
    running_table,
    shown_and_costing,
    storage_table,
    top_with_rest,
)
from labgov.dashboard.tables import DATE, MONEY, TEXT, Column, Row, Table
from labgov.funding.models import FundingSource
from labgov.invoicing.bridge import LabMonth, lab_month
from labgov.usage.models import Category, LabDailySpend

DEFAULT_DAYS = 30


@dataclass
class LabDashboard:
    lab: Lab
    today: dt.date
    period: DayRange
    presets: list
    tables: dict[str, Table]
    totals: dict[str, Decimal]
    unattributed_usd: Decimal
    daily_chart: dict
    category_chart: dict
    people_chart: dict
    # When the range is one calendar month: what the lab's invoices of it say.
    invoiced: LabMonth | None = None
    last_month: tuple[dt.date, dt.date] | None = None


# The lab's queries, read on every request of its page: compiled once per process
# (labgov/core/compiled.py).
_BURNS = DailySums(
    lambda lab_id: Q(lab_id=lab_id, funding_source__isnull=False), ["funding_source_id"]
)
_IN_PERIOD = DailySums(lambda lab_id: Q(lab_id=lab_id), ["category", "allocation_id"])
# The attributed spend by day and category: the lab's rollups by lab (LabDailySpend), about
# 30 times fewer rows than its DailySpend rows with an allocation, whose sums they are.
_BY_DAY = DailySums(lambda lab_id: Q(lab_id=lab_id), ["day", "category"], model=LabDailySpend)
# What runs, bills while idle and costs money now, in one query (present_query).
_PRESENT = CompiledValues(
    lambda lab_id: present_query(Q(current_allocation__funding_source__lab_id=lab_id))
)


@dataclass(slots=True)
class LabSource:
    """One of the lab's funding sources as its table shows it, with its ledger figures."""

    pk: int
    name: str
    end_date: dt.date
    amount_usd: Decimal
    committed_usd: Decimal
    spent_usd: Decimal
    remaining_usd: Decimal


_SOURCES = CompiledValues(
    lambda lab_id: (
        FundingSource.objects.filter(lab_id=lab_id)
        .with_figures()
        .order_by("end_date", "name")
        .values_list(
            "pk", "name", "end_date", "amount_usd", "committed_usd", "spent_usd", "remaining_usd"
        )
    )
)


def whole_month(period: DayRange) -> dt.date | None:
    """The month the range is, when it is exactly one calendar month."""
    following = (period.first.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    if period.first.day == 1 and period.last == following - dt.timedelta(days=1):
        return period.first
    return None


# Every request of a lab's page reads its lab: compiled once per process (core/compiled.py).
_LAB_COLUMNS = [f.attname for f in Lab._meta.concrete_fields]
_LAB = CompiledValues(lambda pk: Lab.objects.filter(pk=pk).values_list(*_LAB_COLUMNS))
_MAX_ID = 2**63 - 1  # a bigint's: a larger id in the URL is no lab's


def lab_for_spend(user, pk: int) -> Lab:
    """The lab, 404 unless the person may see it (labs_q's rule), 403 unless its spend."""
    rows = _LAB.rows(pk=pk) if pk <= _MAX_ID else []
    lab = Lab.from_db(DEFAULT_DB_ALIAS, _LAB_COLUMNS, rows[0]) if rows else None
    if lab is None or not access.can_see_lab(
        user, lab_id=lab.pk, institution_id=lab.institution_id
    ):
        raise Http404
    access.deny_unless(
        access.can_see_lab_spend(user, lab_id=lab.pk, institution_id=lab.institution_id)
    )
    return lab


def lab_dashboard(user, pk: int, params, *, lab: Lab | None = None) -> LabDashboard:
    """`lab`: the lab as lab_for_spend has already read it for this person, if it has."""
    lab = lab if lab is not None else lab_for_spend(user, pk)
    today = today_utc()
    period = day_range(
        params, default_first=today - dt.timedelta(days=DEFAULT_DAYS - 1), default_last=today
    )
    sources = [LabSource(*row) for row in _SOURCES.rows(lab_id=lab.pk)]
    burns = _BURNS.burn(today, lab_id=lab.pk)
    # The lab's rollups: attributed to its allocations, or unattributed on its own accounts.
    in_period = _IN_PERIOD(period.first, period.last, lab_id=lab.pk)
    by_day = _BY_DAY(period.first, period.last, lab_id=lab.pk)
    holders = holder_names({key[1] for key in in_period if key[1] is not None})
    shown, costing = shown_and_costing(_PRESENT.rows(lab_id=lab.pk))
    running, idle = running_and_idle(rows=shown)

    by_category: dict[str, Decimal] = {}
    unattributed = ZERO
    for (category, allocation_id, *_), amount in in_period.items():
        if allocation_id is None:
            unattributed += amount
        else:
            by_category[category] = by_category.get(category, ZERO) + amount
    by_holder = by_holder_and_category(in_period, holders)

    tables = {
        "funding": funding_table(sources, burns, today, now_rates(rows=costing)),
        "categories": category_table(by_category),
        "people": people_table(by_holder),
        "running": running_table(running, with_funding=True),
        "storage": storage_table(idle, with_funding=True),
    }
    for table in tables.values():
        table.bind(params)
    categories = sorted(
        ((CATEGORY_LABELS.get(c, c), v) for c, v in by_category.items() if v), key=lambda kv: -kv[1]
    )
    people = top_with_rest([(h, t) for h, v in by_holder.items() if (t := sum(v.values(), ZERO))])
    totals = {
        "amount": sum((fs.amount_usd for fs in sources), ZERO),
        "committed": sum((fs.committed_usd for fs in sources), ZERO),
        "spent": sum((fs.spent_usd for fs in sources), ZERO),
        "remaining": sum((fs.remaining_usd for fs in sources), ZERO),
        "burn": burn_rate(sum(burns.values(), ZERO)),
        "running_rate": sum((r.cost_per_hr_usd for r in running), ZERO),
        "idle_monthly": sum((r.storage_monthly_usd for r in idle), ZERO),
        "period": sum(by_category.values(), ZERO),
    }
    month = whole_month(period)
    last_month_end = today.replace(day=1) - dt.timedelta(days=1)
    return LabDashboard(
        invoiced=lab_month(user, lab, month, page_spend_usd=totals["period"]) if month else None,
        last_month=(last_month_end.replace(day=1), last_month_end),
        lab=lab,
        today=today,
        period=period,
        presets=day_presets(params, today),
        tables=tables,
        totals=totals,
        unattributed_usd=unattributed,
        daily_chart=daily_category_chart(by_day, period),
        category_chart=doughnut_chart([k for k, _ in categories], [v for _, v in categories]),
        people_chart=bar_chart([k for k, _ in people], [v for _, v in people]),
    )


def funding_table(sources: list[LabSource], burns: dict, today: dt.date, now) -> Table:
    rows = []
    for fs in sources:
        rate = burn_rate(burns.get(fs.pk, ZERO))
        outlook = forecast(
            remaining_usd=fs.remaining_usd,
            burn_rate_usd=rate,
            today=today,
            end_date=fs.end_date,
            now_rate_usd=now.by_source.get(fs.pk, ZERO),
        )
        rows.append(
            Row(
                [
                    fs.name,
                    fs.end_date,
                    fs.amount_usd,
                    fs.committed_usd,
                    fs.spent_usd,
                    fs.remaining_usd,
                    rate,
                    outlook.run_out_date if outlook.outlook == Outlook.RUNS_OUT_EARLY else None,
                    outlook.headline,
                ],
                href=url_for("dashboard:funding", fs.pk),
            )
        )
    totals = [
        sum((getattr(fs, f) for fs in sources), ZERO)
        for f in ("amount_usd", "committed_usd", "spent_usd", "remaining_usd")
    ]
    return Table(
        "funding",
        "Funding sources",
        [
            Column("name", "Funding source"),
            Column("end", "Ends", DATE),
            Column("amount", "Amount", MONEY),
            Column("committed", "Committed", MONEY),
            Column("spent", "Spent", MONEY),
            Column("remaining", "Remaining", MONEY),
            Column("burn", "Burn $/day", MONEY),
            Column("run_out", "Runs out", DATE),
            Column("outlook", "Forecast", TEXT, sortable=False),
        ],
        rows,
        footer=["Total", None, *totals, burn_rate(sum(burns.values(), ZERO)), None, ""]
        if rows
        else None,
        default_sort="end",
        empty="No funding sources yet.",
    )


def daily_category_chart(by_day: dict[tuple, Decimal], period: DayRange) -> dict:
    """Stacked bars: each day's spend, by category."""
    labels = days(period.first, period.last)
    seen = {category for _, category in by_day}
    present = [c for c in Category.values if c in seen]
    return {
        "type": "bar",
        "stacked": True,
        "labels": [d.isoformat() for d in labels],
        "datasets": [
            {
                "label": CATEGORY_LABELS[c],
                "data": [money(by_day.get((d, c), ZERO)) for d in labels],
                "backgroundColor": PALETTE[i % len(PALETTE)],
            }
            for i, c in enumerate(present)
        ],
    }
