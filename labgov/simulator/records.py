"""Billing responses as JSON text, built from meters' runs of equal hours.

Amounts are integers of 1e-10 USD until they are written, as exact decimal text. The JSON of a
record is assembled from cached pieces (the time range of each hour, the amounts text of each
distinct amounts vector), and a response is yielded in pieces so a large one can be streamed.
"""

import bisect
import json
from collections.abc import Iterator

from labgov.simulator.billing import (
    ACCOUNT_FIELDS,
    FOREVER,
    UNITS,
    AnyMeter,
    Product,
    Run,
    Vector,
    floor_hour,
)
from labgov.simulator.scenario import HOUR, iso
from labgov.simulator.windows import Window, bucket_floor, bucket_next, bucket_starts

CHUNK_CHARS = 1 << 18  # a streamed response goes out in pieces of about this size


def _amount_text(units: int) -> str:
    text = _TEXTS.get(units)
    if text is None:
        sign, value = ("-", -units) if units < 0 else ("", units)
        whole, frac = divmod(value, UNITS)
        text = f"{sign}{whole}.{frac:010d}".rstrip("0").rstrip(".") if frac else f"{sign}{whole}"
        if len(_TEXTS) < 200_000:
            _TEXTS[units] = text
    return text


_TEXTS: dict[int, str] = {}
_RANGES: dict[tuple[int, int], str] = {}


def _range_text(start: int, end: int) -> str:
    key = (start, end)
    text = _RANGES.get(key)
    if text is None:
        text = f'{{"startTime":"{iso(start)}","endTime":"{iso(end)}"'
        if len(_RANGES) > 500_000:
            _RANGES.clear()
        _RANGES[key] = text
    return text


def amounts_json(names: tuple[str, ...], vector: Vector) -> str:
    key = (names, vector)
    text = _AMOUNTS.get(key)
    if text is None:
        text = _amounts_json(names, vector)
        if len(_AMOUNTS) > 200_000:
            _AMOUNTS.clear()
        _AMOUNTS[key] = text
    return text


_AMOUNTS: dict[tuple[tuple[str, ...], Vector], str] = {}


def _amounts_json(names: tuple[str, ...], vector: Vector) -> str:
    parts = [f'"totalAmount":{_amount_text(sum(vector))}']
    parts += [f'"{name}":{_amount_text(v)}' for name, v in zip(names, vector, strict=True)]
    return ",".join(parts)


def _add(a: list[int], b: Vector, times: int = 1) -> None:
    for i, value in enumerate(b):
        if value:
            a[i] += value * times


def resource_billing(
    product: Product,
    meters: list[AnyMeter],
    window: Window,
    now: int,
    id_filter: str | None,
) -> Iterator[bytes]:
    """The body of /v2/billing/{pods,network-volumes,serverless,clusters,endpoints}.

    Records go out resource by resource, each resource's in time order, in pieces of about
    CHUNK_CHARS; the metadata (counts, totals) comes last, so nothing waits for the whole.
    """
    names = product.components
    if id_filter is not None:
        meters = [m for m in meters if m.resource_id == id_filter]
    hi = min(window.end, now)
    hourly = window.size == "hour"
    # Hour buckets: the time range text of every hour in the window, made once (from the
    # first hour anything existed, so that a window from 1970 costs nothing).
    base = max(window.start, floor_hour(min((m.start for m in meters), default=hi)))
    hours = [_range_text(t, t + HOUR) for t in range(base, hi, HOUR)] if hourly else []
    carried: dict[Vector, int] = {}  # how many records carry each amounts: for the totals
    unique = 0
    lead, records, size = '{"records":[', [], 0
    for meter in meters:
        runs = meter.runs(window.start, hi, now) if hi > window.start else []
        if not runs:
            continue
        unique += 1
        id_text = ","
        if product.id_field:
            id_text = f',"{product.id_field}":{json.dumps(meter.resource_id)},'
        if hourly:
            for first, n, vector in runs:
                # n equal hours: the same id and amounts after each of n time ranges.
                tail = id_text + _record_amounts(names, vector) + "}"
                i = (first - base) // HOUR
                piece = (tail + ",").join(hours[i : i + n]) + tail
                records.append(piece)
                size += len(piece)
                carried[vector] = carried.get(vector, 0) + n
        else:
            for start, end, vector in _bucketed(runs, window):
                piece = _range_text(start, end) + id_text + _record_amounts(names, vector) + "}"
                records.append(piece)
                size += len(piece)
                carried[vector] = carried.get(vector, 0) + 1
        if size >= CHUNK_CHARS:
            yield (lead + ",".join(records)).encode()
            lead, records, size = ",", [], 0
    width = max(len(names), 1)
    totals = tuple(sum(v[c] * k for v, k in carried.items()) for c in range(width))
    query = _query_json(window, product, id_filter)
    unique_text = f',"{product.unique_field}":{unique}' if product.unique_field else ""
    rest = lead + ",".join(records) if records else ("" if lead == "," else lead)
    yield (
        f'{rest}],"metadata":{{"query":{query},"recordCount":{sum(carried.values())}'
        f'{unique_text},"totals":{{{_record_amounts(names, totals)}}}}}}}'
    ).encode()


def _record_amounts(names: tuple[str, ...], vector: Vector) -> str:
    if not names:  # public endpoints: the one amount is the total
        return f'"totalAmount":{_amount_text(vector[0])}'
    return amounts_json(names, vector)


def _bucketed(runs: list[Run], window: Window) -> Iterator[tuple[int, int, Vector]]:
    """(start, end, amounts) of each day/week/month/year bucket the runs touch, in order."""
    bucket = bucket_floor(runs[0][0], window.size)
    bucket_end = bucket_next(bucket, window.size)
    acc = [0] * len(runs[0][2])
    touched = False
    for h, n, vector in runs:
        while n:
            if h >= bucket_end:
                if touched:
                    yield bucket, bucket_end, tuple(acc)
                    acc = [0] * len(vector)
                    touched = False
                bucket = bucket_floor(h, window.size)
                bucket_end = bucket_next(bucket, window.size)
            k = min(n, (bucket_end - h) // HOUR)
            _add(acc, vector, k)
            touched = True
            h += k * HOUR
            n -= k
    if touched:
        yield bucket, bucket_end, tuple(acc)


def account_billing(meters: list[AnyMeter], window: Window, now: int) -> Iterator[bytes]:
    """The body of /v2/billing: one record per bucket, each field the sum of the resources'."""
    field_index = {name: i for i, name in enumerate(ACCOUNT_FIELDS)}
    hi = min(window.end, now)
    first = min((m.start for m in meters), default=FOREVER)
    lo = max(window.start, bucket_floor(first, window.size)) if first < FOREVER else hi
    edges = bucket_starts(lo, hi, window.size) if lo < hi else [lo]
    sums = [[0] * len(ACCOUNT_FIELDS) for _ in range(len(edges) - 1)]
    hourly = window.size == "hour"
    # Hour buckets: a run adds the same amounts to n consecutive rows; note where the run
    # starts and where it stops, and sum those differences once at the end.
    deltas = [[0] * len(ACCOUNT_FIELDS) for _ in range(len(edges))] if hourly else []
    for meter in meters if lo < hi else ():
        positions = [field_index[name] for name in meter.product.account_fields]
        runs = meter.runs(lo, hi, now)
        if hourly:
            for h, n, vector in runs:
                opening, closing = deltas[(h - lo) // HOUR], deltas[(h - lo) // HOUR + n]
                for pos, value in zip(positions, vector, strict=True):
                    if value:
                        opening[pos] += value
                        closing[pos] -= value
            continue
        for start, _end, vector in _bucketed(runs, window) if runs else ():
            row = sums[bisect.bisect_right(edges, start) - 1]
            for pos, value in zip(positions, vector, strict=True):
                row[pos] += value
    if hourly:
        running = [0] * len(ACCOUNT_FIELDS)
        for row, delta in zip(sums, deltas, strict=False):
            for pos, value in enumerate(delta):
                if value:
                    running[pos] += value
            row[:] = running
    # One record per bucket: few enough (2,160 for 90 days of hours) to send in one piece.
    records = [
        _range_text(edges[i], edges[i + 1]) + "," + _amounts_json(ACCOUNT_FIELDS, tuple(row)) + "}"
        for i, row in enumerate(sums)
    ]
    totals = (
        tuple(sum(column) for column in zip(*sums, strict=True))
        if sums
        else (0,) * len(ACCOUNT_FIELDS)
    )
    query = _query_json(window, None, None)
    yield (
        '{"records":[' + ",".join(records) + f'],"metadata":{{"query":{query},'
        f'"recordCount":{len(sums)},"totals":{{{_amounts_json(ACCOUNT_FIELDS, totals)}}}}}}}'
    ).encode()


def _query_json(window: Window, product: Product | None, id_filter: str | None) -> str:
    text = (
        f'{{"startTime":"{iso(window.start)}","endTime":"{iso(window.end)}",'
        f'"bucketSize":"{window.size}"'
    )
    if product is not None and product.id_field:
        value = "null" if id_filter is None else json.dumps(id_filter)
        text += f',"{product.id_field}":{value}'
    return text + "}"
