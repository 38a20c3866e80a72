"""Query-string parameters, parsed within what the database and the calendar hold. A value
that cannot be one (not a number, out of range, a NUL character) is a 400, never a 500."""

import datetime as dt

from django.core.exceptions import BadRequest

from labgov.core.bounds import INTEGER_RANGES

ID_MAX = INTEGER_RANGES["BigAutoField"][1]
TEXT_MAX = 200  # a search box's input; nothing longer is worth a query
# The calendar the app deals in: a month's neighbours must exist too (9999-12 has none).
YEAR_MIN, YEAR_MAX = 1900, 9000


def int_param(params, name: str, *, default: int | None = None, minimum=0, maximum=ID_MAX):
    """An integer in [minimum, maximum], or `default` when absent or empty; 400 otherwise."""
    raw = params.get(name, "")
    if raw == "":
        return default
    if not (raw.isascii() and raw.lstrip("-").isdigit()) or len(raw) > 20:
        raise BadRequest(f"{name} must be a whole number.")
    value = int(raw)
    if not minimum <= value <= maximum:
        raise BadRequest(f"{name} must be between {minimum} and {maximum}.")
    return value


def text_param(params, name: str, *, default: str = "", max_length: int = TEXT_MAX) -> str:
    """A stripped string of at most `max_length` characters without NUL; 400 otherwise."""
    value = params.get(name, default).strip()
    if "\x00" in value or len(value) > max_length:
        raise BadRequest(f"{name} is not a valid search.")
    return value


def in_calendar(day: dt.date | None) -> dt.date | None:
    """The date, or None when it lies outside the years the app deals in."""
    if day is None or not YEAR_MIN <= day.year <= YEAR_MAX:
        return None
    return day


def parse_month(value: str) -> dt.date | None:
    """The first day of a YYYY-MM month, or None when it is not one the app deals in."""
    try:
        month = dt.datetime.strptime(value, "%Y-%m").date()  # noqa: DTZ007 - a calendar month
    except ValueError:
        return None
    return in_calendar(month)
