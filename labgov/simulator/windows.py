"""Billing query windows: bucket sizes, their calendar edges, and the [start, end) a query
resolves to. Times are whole seconds since the epoch, in UTC."""

import datetime as dt
from dataclasses import dataclass

from labgov.simulator.scenario import HOUR, UTC

BUCKET_SIZES = ("hour", "day", "week", "month", "year")


class QueryError(ValueError):
    """A billing query the API would answer with 400."""


def bucket_floor(t: int, size: str) -> int:
    if size == "hour":
        return t - t % HOUR
    if size == "day":
        return t - t % 86400
    if size == "week":  # ISO weeks start on Monday; 1970-01-01 was a Thursday
        day = t // 86400
        return (day - (day + 3) % 7) * 86400
    moment = dt.datetime.fromtimestamp(t, UTC)
    if size == "month":
        return int(dt.datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp())
    return int(dt.datetime(moment.year, 1, 1, tzinfo=UTC).timestamp())


def bucket_next(t: int, size: str) -> int:
    """The start of the bucket after the one starting at `t`."""
    if size == "hour":
        return t + HOUR
    if size == "day":
        return t + 86400
    if size == "week":
        return t + 7 * 86400
    moment = dt.datetime.fromtimestamp(t, UTC)
    if size == "month":
        year, month = moment.year + moment.month // 12, moment.month % 12 + 1
        return int(dt.datetime(year, month, 1, tzinfo=UTC).timestamp())
    return int(dt.datetime(moment.year + 1, 1, 1, tzinfo=UTC).timestamp())


def bucket_prev(t: int, size: str) -> int:
    return bucket_floor(t - 1, size)


@dataclass(frozen=True, slots=True)
class Window:
    start: int
    end: int
    size: str


def parse_query_time(name: str, text: str) -> int:
    try:
        # A "+" in a query string arrives as a space when the client did not encode it.
        moment = dt.datetime.fromisoformat(text.strip().replace(" ", "+"))
    except ValueError:
        raise QueryError(f"{name} is not an RFC 3339 date-time: {text!r}") from None
    if moment.tzinfo is None:
        raise QueryError(f"{name} needs a time zone offset (e.g. Z): {text!r}")
    return int(moment.timestamp() // 1)


def resolve_window(params: dict[str, str], now: int) -> Window:
    """The bucket-aligned [start, end) window of a billing query, as Runpod resolves it."""
    size = params.get("bucketSize") or "day"
    if size not in BUCKET_SIZES:
        raise QueryError(f"bucketSize must be one of {', '.join(BUCKET_SIZES)}, not {size!r}")
    try:
        if "lastN" in params:
            return _last_n_window(params, now, size)
        start = (
            parse_query_time("startTime", params["startTime"])
            if "startTime" in params
            else now - 30 * 86400
        )
        end = parse_query_time("endTime", params["endTime"]) if "endTime" in params else now
        start = bucket_floor(start, size)
        end_floor = bucket_floor(end, size)
        end = end if end == end_floor else bucket_next(end_floor, size)
    except (OverflowError, OSError) as error:
        raise QueryError(f"time out of range: {error}") from None
    except ValueError as error:  # datetime's year limits; QueryError is a ValueError too
        if isinstance(error, QueryError):
            raise
        raise QueryError(f"time out of range: {error}") from None
    if start >= end:
        raise QueryError("startTime must be before endTime")
    return Window(start, end, size)


def _last_n_window(params: dict[str, str], now: int, size: str) -> Window:
    if "startTime" in params or "endTime" in params:
        raise QueryError("lastN cannot be combined with startTime or endTime")
    try:
        last_n = int(params["lastN"])
    except ValueError:
        raise QueryError(f"lastN must be an integer, not {params['lastN']!r}") from None
    if not 1 <= last_n <= 100_000:
        raise QueryError("lastN must be between 1 and 100000")
    current = bucket_floor(now, size)
    widths = {"hour": HOUR, "day": 86400, "week": 7 * 86400}
    if size in widths:
        start = current - (last_n - 1) * widths[size]
    else:
        start = current
        for _ in range(last_n - 1):
            start = bucket_prev(start, size)
    return Window(start, bucket_next(current, size), size)


def bucket_starts(lo: int, hi: int, size: str) -> list[int]:
    """Bucket starts from `lo` (aligned) up to `hi`, followed by the end of the last bucket."""
    edges = [lo]
    while edges[-1] < hi:
        edges.append(bucket_next(edges[-1], size))
    return edges
