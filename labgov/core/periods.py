"""Time periods. Every period is half-open, [start, end), in UTC."""

import datetime as dt

UTC = dt.UTC


def day_start(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=UTC)


def date_span(first_day: dt.date, last_day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """The period covering the calendar days first_day..last_day, both included."""
    return day_start(first_day), day_start(last_day + dt.timedelta(days=1))


def month_period(year: int, month: int) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(year, month, 1, tzinfo=UTC)
    end = dt.datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def hour_floor(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
