"""Date-range filters of the dashboards, parsed from the query string. A bad value is shown
as an error and the default range is used, so a hand-edited URL never breaks a page."""

import datetime as dt
from dataclasses import dataclass, field

from django import forms

from labgov.core.params import YEAR_MAX, YEAR_MIN, in_calendar, parse_month

# Ranges are bounded so that no filter can make a page read years of daily rows.
MAX_DAYS = 731
MAX_MONTHS = 24


@dataclass(frozen=True)
class DayRange:
    first: dt.date
    last: dt.date  # included
    errors: list[str] = field(default_factory=list)

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    def slug(self) -> str:
        return f"{self.first:%Y%m%d}-{self.last:%Y%m%d}"


class _DayRangeForm(forms.Form):
    start = forms.DateField(required=False)
    end = forms.DateField(required=False)


def day_range(params, *, default_first: dt.date, default_last: dt.date) -> DayRange:
    form = _DayRangeForm(params)
    if not form.is_valid():
        return DayRange(default_first, default_last, ["Dates are YYYY-MM-DD."])
    first = form.cleaned_data["start"] or default_first
    last = form.cleaned_data["end"] or default_last
    if in_calendar(first) is None or in_calendar(last) is None:
        return DayRange(default_first, default_last, [f"Dates are {YEAR_MIN} to {YEAR_MAX}."])
    if first > last:
        return DayRange(default_first, default_last, ["The start comes after the end."])
    if (last - first).days + 1 > MAX_DAYS:
        first = last - dt.timedelta(days=MAX_DAYS - 1)
        return DayRange(first, last, [f"Ranges are at most {MAX_DAYS} days; shortened."])
    return DayRange(first, last)


def day_presets(params, today: dt.date, *, since: dt.date | None = None) -> list[tuple[str, str]]:
    """(label, link) for the quick ranges; each ends today and keeps the other parameters."""
    from labgov.dashboard.tables import query_with

    presets = [
        ("Last 7 days", today - dt.timedelta(days=6)),
        ("Last 30 days", today - dt.timedelta(days=29)),
        ("Last 90 days", today - dt.timedelta(days=89)),
        ("This month", today.replace(day=1)),
    ]
    if since is not None and since < today and (today - since).days < MAX_DAYS:
        presets.append(("Since the start", since))
    return [
        (label, query_with(params, start=first.isoformat(), end=today.isoformat()))
        for label, first in presets
    ]


@dataclass(frozen=True)
class MonthRange:
    first: dt.date  # first day of the first month
    last: dt.date  # first day of the last month (included)
    errors: list[str] = field(default_factory=list)

    @property
    def months(self) -> list[dt.date]:
        months, month = [], self.first
        while month <= self.last:
            months.append(month)
            month = add_months(month, 1)
        return months

    def slug(self) -> str:
        return f"{self.first:%Y%m}-{self.last:%Y%m}"


def add_months(month: dt.date, n: int) -> dt.date:
    index = month.year * 12 + month.month - 1 + n
    return dt.date(index // 12, index % 12 + 1, 1)


def month_range(params, *, today: dt.date, default_months: int = 6) -> MonthRange:
    this_month = today.replace(day=1)
    default = (add_months(this_month, 1 - default_months), this_month)
    raw_first, raw_last = params.get("start", ""), params.get("end", "")
    first = parse_month(raw_first) if raw_first else default[0]
    last = parse_month(raw_last) if raw_last else default[1]
    if first is None or last is None:
        return MonthRange(*default, ["Months are YYYY-MM."])
    if first > last:
        return MonthRange(*default, ["The start comes after the end."])
    if len(MonthRange(first, last).months) > MAX_MONTHS:
        first = add_months(last, 1 - MAX_MONTHS)
        return MonthRange(first, last, [f"Ranges are at most {MAX_MONTHS} months; shortened."])
    return MonthRange(first, last)
