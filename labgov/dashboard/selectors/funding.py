"""One funding source's dashboard: figures, burn rate and forecast, burn-down chart, spend by
category and person, what runs now and what bills while idle."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q

from labgov.accounts.models import today_utc
from labgov.core.money import ZERO
from labgov.dashboard.filters import MAX_DAYS, DayRange, day_presets, day_range
from labgov.dashboard.forecast import Forecast, Outlook, burn_rate, forecast
from labgov.dashboard.selectors.common import (
    CATEGORY_LABELS,
    PALETTE,
    bar_chart,
    burn_sums,
    by_holder_and_category,
    category_table,
    daily_sums,
    doughnut_chart,
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
from labgov.funding.models import Allocation, FundingSource
from labgov.funding.selectors import funding_source_for_user

# A burn-down chart longer than this (ten years) is cut at its start.
MAX_CHART_DAYS = 3653


@dataclass
class FundingDashboard:
    fs: FundingSource
    today: dt.date
    forecast: Forecast
    period: DayRange
    presets: list
    tables: dict[str, Table]
    burndown_chart: dict
    category_chart: dict
    people_chart: dict
    running_rate_usd: Decimal
    idle_monthly_usd: Decimal


def default_period(start: dt.date, end: dt.date, today: dt.date) -> tuple[dt.date, dt.date]:
    """From the funding's start to today (or its end, if that came first), at most MAX_DAYS."""
    last = min(today, end) if start <= today else today
    first = min(max(start, last - dt.timedelta(days=MAX_DAYS - 1)), last)
    return first, last


def funding_dashboard(user, pk: int, params) -> FundingDashboard:
    fs = funding_source_for_user(user, pk)
    today = today_utc()
    first, last = default_period(fs.start_date, fs.end_date, today)
    period = day_range(params, default_first=first, default_last=last)
    allocations = list(
        Allocation.objects.filter(funding_source=fs).select_related("user").with_figures()
    )
    spent_by_day = {
        day: amount
        for (day,), amount in daily_sums(Q(funding_source=fs), dt.date.min, today, ["day"]).items()
    }
    in_period = daily_sums(
        Q(funding_source=fs), period.first, period.last, ["category", "allocation_id"]
    )
    allocation_burns = burn_sums(Q(funding_source=fs), today, "allocation_id")

    fs_burn = burn_rate(sum(allocation_burns.values(), ZERO))
    # What runs and is stored now on this money, per allocation: the second forecast rate;
    # and what runs and bills while idle, in the same query.
    shown, costing = shown_and_costing(present_query(Q(current_allocation__funding_source=fs)))
    now = now_rates(rows=costing)
    outlook = forecast(
        remaining_usd=fs.remaining_usd,
        burn_rate_usd=fs_burn,
        today=today,
        end_date=fs.end_date,
        now_rate_usd=now.by_source.get(fs.pk, ZERO),
    )
    holders = {a.pk: a.holder_name for a in allocations}
    by_category: dict[str, Decimal] = {}
    for (category, _), amount in in_period.items():
        by_category[category] = by_category.get(category, ZERO) + amount
    by_holder = by_holder_and_category(in_period, holders)

    running, idle = running_and_idle(rows=shown)
    tables = {
        "allocations": allocations_table(allocations, allocation_burns, today, now.by_allocation),
        "categories": category_table(by_category),
        "people": people_table(by_holder),
        "running": running_table(running),
        "storage": storage_table(idle),
    }
    for table in tables.values():
        table.bind(params)
    people_totals = [(h, sum(v.values(), ZERO)) for h, v in by_holder.items()]
    categories = sorted(
        ((CATEGORY_LABELS.get(c, c), v) for c, v in by_category.items() if v), key=lambda kv: -kv[1]
    )
    people = top_with_rest([(h, v) for h, v in people_totals if v])
    return FundingDashboard(
        fs=fs,
        today=today,
        forecast=outlook,
        period=period,
        presets=day_presets(params, today, since=fs.start_date),
        tables=tables,
        burndown_chart=burndown_chart(fs, spent_by_day, outlook, today),
        category_chart=doughnut_chart([k for k, _ in categories], [v for _, v in categories]),
        people_chart=bar_chart([k for k, _ in people], [v for _, v in people]),
        running_rate_usd=sum((r.cost_per_hr_usd for r in running), ZERO),
        idle_monthly_usd=sum((r.storage_monthly_usd for r in idle), ZERO),
    )


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
                    a.holder_name,
                    a.end_date,
                    a.cap_usd,
                    a.committed_usd,
                    a.spent_usd,
                    a.remaining_usd,
                    rate,
                    outlook.run_out_date if outlook.outlook == Outlook.RUNS_OUT_EARLY else None,
                    outlook.headline,
                ]
            )
        )
    columns = [
        Column("holder", "Holder"),
        Column("end", "Ends", DATE),
        Column("cap", "Cap", MONEY),
        Column("committed", "Committed", MONEY),
        Column("spent", "Spent", MONEY),
        Column("remaining", "Remaining", MONEY),
        Column("burn", "Burn $/day", MONEY),
        Column("run_out", "Runs out", DATE),
        Column("outlook", "Forecast", TEXT, sortable=False),
    ]
    totals = [
        sum((getattr(a, f) for a in allocations), ZERO)
        for f in ("cap_usd", "committed_usd", "spent_usd", "remaining_usd")
    ]
    burn_total = burn_rate(sum(burns.values(), ZERO))
    return Table(
        "allocations",
        "Allocations",
        columns,
        rows,
        footer=["Total", None, *totals, burn_total, None, ""] if rows else None,
        default_sort="end",
        empty="No allocations yet.",
    )


def burndown_chart(
    fs: FundingSource, spent_by_day: dict[dt.date, Decimal], outlook: Forecast, today: dt.date
) -> dict:
    """Three lines over the funding period, one point per day: the budget going straight from
    the amount at the start to zero at the end; what actually remained after each day's
    spend; and the forecast from today at the burn rate."""
    first_spend = min(spent_by_day, default=fs.start_date)
    first = min(fs.start_date, first_spend)
    last = max(fs.end_date, min(today, fs.end_date + dt.timedelta(days=MAX_CHART_DAYS)))
    first = max(first, last - dt.timedelta(days=MAX_CHART_DAYS - 1))
    n = (last - first).days + 1
    labels = [(first + dt.timedelta(days=i)).isoformat() for i in range(n)]

    def index(day: dt.date) -> int | None:
        i = (day - first).days
        return i if 0 <= i < n else None

    budget: list = [None] * n
    if (i := index(fs.start_date)) is not None:
        budget[i] = money(fs.amount_usd)
    if (i := index(fs.end_date)) is not None:
        budget[i] = ZERO

    actual: list = [None] * n
    remaining = fs.amount_usd - sum((v for d, v in spent_by_day.items() if d < first), ZERO)
    for i in range(min(n, (today - first).days + 1)):
        remaining -= spent_by_day.get(first + dt.timedelta(days=i), ZERO)
        actual[i] = money(remaining)

    projected: list = [None] * n
    if outlook.outlook in (Outlook.RUNS_OUT_EARLY, Outlook.LASTS, Outlook.NO_BURN):
        if (i := index(today)) is not None:
            projected[i] = money(outlook.remaining_usd)
        if outlook.outlook == Outlook.RUNS_OUT_EARLY:
            end_point, value = outlook.run_out_date, ZERO
        else:
            days_to_end = (fs.end_date - today).days + 1
            end_point = fs.end_date
            value = outlook.remaining_usd - outlook.burn_rate_usd * days_to_end
        if (i := index(end_point)) is not None and end_point != today:
            projected[i] = money(value)

    line = {"pointRadius": 0, "borderWidth": 2, "spanGaps": True, "fill": False}
    return {
        "type": "line",
        "labels": labels,
        "datasets": [
            {
                **line,
                "label": "Budget",
                "data": budget,
                "borderColor": PALETTE[4],
                "borderDash": [6, 4],
            },
            {**line, "label": "Remaining after spend", "data": actual, "borderColor": PALETTE[0]},
            {
                **line,
                "label": "Forecast at the burn rate (after commitments)",
                "data": projected,
                "borderColor": PALETTE[1],
                "borderDash": [2, 3],
            },
        ],
    }
