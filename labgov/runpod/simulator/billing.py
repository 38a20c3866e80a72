"""Billing records, derived from resource histories.

Each billable resource is a `Meter`: the seconds it exists, cut into segments of constant rates.
A component's amount over a stretch of time is `sum(rate x seconds) / denominator`, computed
with Decimal and quantized to 10 decimal places (ROUND_HALF_EVEN) once per hourly bucket;
rates are exact decimals ($/h for compute, GB x $/GB/month for storage) and the denominator
carries the 3600 s and the 730 h month, so the only rounding is that quantization.

Bigger buckets are sums of the quantized hourly amounts, and the account's record for a bucket
is the sum of every resource's, so all totals agree to the last digit. Quantized amounts are
kept as integers in units of 1e-10 USD for summing and written out as exact decimal text.

Speed: a full hour inside one segment has the same amount as every other such hour, so a
request is a walk over segments ("runs" of equal hours) rather than over hours, and the JSON
text of a record is built from cached pieces. Nothing is kept between requests but caches of
small values; a response is generated, and may be streamed, per request.
"""

import bisect
import datetime as dt
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal

from labgov.runpod.simulator.scenario import HOUR, UTC, iso

FOREVER = 2**62
UNITS = 10**10  # amounts are integers of 1e-10 USD
Q10 = Decimal("1e-10")
DECIMAL = Context(prec=50, rounding=ROUND_HALF_EVEN)
BUCKET_SIZES = ("hour", "day", "week", "month", "year")
CHUNK_CHARS = 1 << 18


@dataclass(frozen=True, slots=True)
class Product:
    kind: str
    id_field: str | None
    unique_field: str | None
    components: tuple[str, ...]  # API names of the record's amounts, besides totalAmount
    account_fields: tuple[str, ...]  # the same amounts' names on the account record


POD = Product(
    "pod",
    "podId",
    "uniquePodCount",
    ("gpuAmount", "cpuAmount", "diskAmount"),
    ("podGpuAmount", "podCpuAmount", "podDiskAmount"),
)
NETWORK_VOLUME = Product(
    "network_volume",
    "networkVolumeId",
    "uniqueNetworkVolumeCount",
    ("standardAmount", "highPerformanceAmount"),
    ("storageStandardAmount", "storageHighPerformanceAmount"),
)
SERVERLESS = Product(
    "serverless",
    "serverlessId",
    "uniqueServerlessCount",
    ("gpuAmount", "cpuAmount", "diskAmount", "feeAmount"),
    (
        "serverlessGpuAmount",
        "serverlessCpuAmount",
        "serverlessDiskAmount",
        "serverlessFeeAmount",
    ),
)
# Public endpoints are one aggregate: a single amount, which is its own total.
ENDPOINT = Product("endpoint", None, None, (), ("endpointAmount",))
CLUSTER = Product(
    "cluster",
    "clusterId",
    "uniqueClusterCount",
    ("gpuAmount", "diskAmount", "networkingAmount"),
    ("clusterGpuAmount", "clusterDiskAmount", "clusterNetworkingAmount"),
)
PRODUCTS = (POD, SERVERLESS, NETWORK_VOLUME, ENDPOINT, CLUSTER)
ACCOUNT_FIELDS = (
    "podGpuAmount",
    "podCpuAmount",
    "podDiskAmount",
    "serverlessGpuAmount",
    "serverlessCpuAmount",
    "serverlessDiskAmount",
    "serverlessFeeAmount",
    "storageStandardAmount",
    "storageHighPerformanceAmount",
    "endpointAmount",
    "clusterGpuAmount",
    "clusterDiskAmount",
    "clusterNetworkingAmount",
)

Vector = tuple[int, ...]
Rates = tuple[Decimal, ...]
Run = tuple[int, int, Vector]  # first hour, number of hours, amounts of each hour


def _units(numerator: Decimal, denominator: int) -> int:
    """numerator / denominator in USD, quantized to 1e-10 (ROUND_HALF_EVEN), in 1e-10 units."""
    if not numerator:
        return 0
    amount = DECIMAL.divide(numerator, denominator).quantize(Q10, context=DECIMAL)
    return int(amount.scaleb(10, context=DECIMAL))


@functools.lru_cache(maxsize=1 << 16)
def full_hour(denominators: tuple[int, ...], rates: Rates) -> Vector:
    return tuple(_units(rate * HOUR, den) for rate, den in zip(rates, denominators, strict=True))


def floor_hour(t: int) -> int:
    return t - t % HOUR


class Meter:
    """One resource's billing: contiguous segments (start, end, rates) over its lifetime.

    `denominators[i]` turns `rate x seconds` into USD for component i (3600 for $/h rates,
    3600 x hours-per-month for GB x $/GB/month).
    """

    __slots__ = (
        "product",
        "resource_id",
        "denominators",
        "segments",
        "starts",
        "ends",
        "fulls",
        "_hours",
    )

    def __init__(
        self,
        product: Product,
        resource_id: str,
        denominators: tuple[int, ...],
        segments: list[tuple[int, int, Rates]],
    ):
        merged: list[tuple[int, int, Rates]] = []
        for start, end, rates in segments:
            if end <= start:
                continue
            if merged and merged[-1][2] == rates and merged[-1][1] == start:
                merged[-1] = (merged[-1][0], end, rates)
            else:
                merged.append((start, end, rates))
        self.product = product
        self.resource_id = resource_id
        self.denominators = denominators
        self.segments = merged
        self.starts = [s for s, _, _ in merged]
        self.ends = [e for _, e, _ in merged]
        self.fulls = [full_hour(denominators, rates) for _, _, rates in merged]
        self._hours: dict[int, Vector] = {}  # amounts of hours cut by a segment edge

    @property
    def start(self) -> int:
        return self.starts[0]

    @property
    def end(self) -> int:
        return self.ends[-1]

    def runs(self, lo: int, hi: int, now: int) -> list[Run]:
        """Hourly amounts in [lo, hi) up to `now`, as runs of equal hours, in time order.

        `lo` and `hi` are on hour boundaries. Every hour in which the resource existed has a
        run, even when it billed nothing. Hours inside one segment share its full-hour
        amounts; only hours cut by a segment edge (or by now) are computed one by one.
        """
        starts, ends = self.starts, self.ends
        lo, hi = max(lo, starts[0]), min(hi, ends[-1], now)
        if lo >= hi:
            return []
        runs: list[Run] = []
        cut: list[int] = []
        fulls = self.fulls
        i = max(bisect.bisect_right(starts, lo) - 1, 0)
        count = len(starts)
        while i < count:
            s = starts[i]
            if s >= hi:
                break
            e = ends[i]
            if s < lo:
                s = lo
            if e > hi:
                e = hi
            first_full = s if s % HOUR == 0 else s - s % HOUR + HOUR
            after_full = e - e % HOUR
            if first_full < after_full:
                if s < first_full:
                    cut.append(first_full - HOUR)
                runs.append((first_full, (after_full - first_full) // HOUR, fulls[i]))
                if after_full < e:
                    cut.append(after_full)
            elif s < e:
                cut.append(s - s % HOUR)
                cut.append((e - 1) - (e - 1) % HOUR)
            i += 1
        if cut:
            runs.extend((h, 1, self._hour(h, lo, hi, now)) for h in set(cut))
            runs.sort()
        return runs

    def _hour(self, h: int, lo: int, hi: int, now: int) -> Vector:
        cacheable = h + HOUR <= now
        if cacheable and h in self._hours:
            return self._hours[h]
        s, e = max(h, lo), min(h + HOUR, hi)
        sums = [Decimal(0)] * len(self.denominators)
        segments = self.segments
        for i in range(max(bisect.bisect_right(self.starts, s) - 1, 0), len(segments)):
            start, end, rates = segments[i]
            if start >= e:
                break
            seconds = min(end, e) - max(start, s)
            if seconds > 0:
                for c, rate in enumerate(rates):
                    if rate:
                        sums[c] += rate * seconds
        value = tuple(_units(n, d) for n, d in zip(sums, self.denominators, strict=True))
        if cacheable:
            self._hours[h] = value
        return value


class PeriodicMeter:
    """A resource whose rates follow the UTC hour of the day (serverless traffic)."""

    __slots__ = ("product", "resource_id", "denominators", "start", "end", "day_rates")

    def __init__(
        self,
        product: Product,
        resource_id: str,
        denominators: tuple[int, ...],
        start: int,
        end: int,
        day_rates: tuple[Rates, ...],
    ):
        self.product = product
        self.resource_id = resource_id
        self.denominators = denominators
        self.start, self.end = start, end
        self.day_rates = day_rates

    def runs(self, lo: int, hi: int, now: int) -> list[Run]:
        lo, hi = max(lo, self.start), min(hi, self.end, now)
        runs: list[Run] = []
        h = floor_hour(lo)
        while h < hi:
            rates = self.day_rates[(h // HOUR) % 24]
            s, e = max(h, lo), min(h + HOUR, hi)
            if e - s == HOUR:
                runs.append((h, 1, full_hour(self.denominators, rates)))
            else:
                seconds = e - s
                value = tuple(
                    _units(rate * seconds, den)
                    for rate, den in zip(rates, self.denominators, strict=True)
                )
                runs.append((h, 1, value))
            h += HOUR
        return runs


AnyMeter = Meter | PeriodicMeter


# Buckets and the query window.


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
    if "lastN" in params:
        if "startTime" in params or "endTime" in params:
            raise QueryError("lastN cannot be combined with startTime or endTime")
        try:
            last_n = int(params["lastN"])
        except ValueError:
            raise QueryError(f"lastN must be an integer, not {params['lastN']!r}") from None
        if not 1 <= last_n <= 100_000:
            raise QueryError("lastN must be at least 1")
        current = bucket_floor(now, size)
        start = current
        for _ in range(last_n - 1):
            start = bucket_prev(start, size)
        return Window(start, bucket_next(current, size), size)
    if "startTime" in params:
        start = parse_query_time("startTime", params["startTime"])
    else:
        start = now - 30 * 86400
    end = parse_query_time("endTime", params["endTime"]) if "endTime" in params else now
    start = bucket_floor(start, size)
    end_floor = bucket_floor(end, size)
    end = end if end == end_floor else bucket_next(end_floor, size)
    if start >= end:
        raise QueryError("startTime must be before endTime")
    return Window(start, end, size)


def bucket_starts(lo: int, hi: int, size: str) -> list[int]:
    """Bucket starts from `lo` (aligned) up to `hi`, followed by the end of the last bucket."""
    edges = [lo]
    while edges[-1] < hi:
        edges.append(bucket_next(edges[-1], size))
    return edges


# Turning runs into records.


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


class _Chunks:
    """Collects JSON text and hands it out in pieces of about CHUNK_CHARS."""

    def __init__(self):
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def full(self) -> bool:
        return self.size >= CHUNK_CHARS

    def take(self) -> bytes:
        data = "".join(self.parts).encode()
        self.parts, self.size = [], 0
        return data


def resource_billing(
    product: Product,
    meters: list[AnyMeter],
    window: Window,
    now: int,
    id_filter: str | None,
) -> Iterator[bytes]:
    """The body of /v2/billing/{pods,network-volumes,serverless,clusters,endpoints}."""
    names = product.components
    if id_filter is not None:
        meters = [m for m in meters if m.resource_id == id_filter]
    hi = min(window.end, now)
    totals = [0] * max(len(names), 1)
    count = unique = 0
    hourly = window.size == "hour"
    out = _Chunks()
    out.add('{"records":[')
    sep = ""
    # Hour buckets: the time range text of every hour in the window, made once.
    hours = [_range_text(t, t + HOUR) for t in range(window.start, hi, HOUR)] if hourly else []
    for meter in meters:
        runs = meter.runs(window.start, hi, now) if hi > window.start else []
        if not runs:
            continue
        unique += 1
        id_text = ","
        if product.id_field:
            id_text = f',"{product.id_field}":{json.dumps(meter.resource_id)},'
        if hourly:
            # A run is n equal hours: one amounts text, n time ranges.
            for h, n, vector in runs:
                tail = id_text + _record_amounts(names, vector) + "}"
                first = (h - window.start) // HOUR
                out.add(sep + ",".join([r + tail for r in hours[first : first + n]]))
                sep = ","
                count += n
                _add(totals, vector, n)
        else:
            for start, end, vector in _bucketed(runs, window):
                out.add(
                    sep + _range_text(start, end) + id_text + _record_amounts(names, vector) + "}"
                )
                sep = ","
                count += 1
                _add(totals, vector)
        if out.full():
            yield out.take()
    query = _query_json(window, product, id_filter)
    unique_text = f',"{product.unique_field}":{unique}' if product.unique_field else ""
    out.add(
        f'],"metadata":{{"query":{query},"recordCount":{count}{unique_text},'
        f'"totals":{{{_record_amounts(names, tuple(totals))}}}}}}}'
    )
    yield out.take()


def _record_amounts(names: tuple[str, ...], vector: Vector) -> str:
    if not names:  # public endpoints: the one amount is the total
        return f'"totalAmount":{_amount_text(vector[0])}'
    return amounts_json(names, vector)


def _bucketed(runs: list[Run], window: Window) -> Iterator[tuple[int, int, Vector]]:
    """(start, end, amounts) of each bucket the runs touch, in time order."""
    if window.size == "hour":
        for h, n, vector in runs:
            for k in range(n):
                t = h + k * HOUR
                yield t, t + HOUR, vector
        return
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
                first, after = deltas[(h - lo) // HOUR], deltas[(h - lo) // HOUR + n]
                for pos, value in zip(positions, vector, strict=True):
                    if value:
                        first[pos] += value
                        after[pos] -= value
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
    out = _Chunks()
    out.add('{"records":[')
    totals = [0] * len(ACCOUNT_FIELDS)
    for i, row in enumerate(sums):
        out.add(("," if i else "") + _range_text(edges[i], edges[i + 1]) + ",")
        out.add(amounts_json(ACCOUNT_FIELDS, tuple(row)) + "}")
        _add(totals, tuple(row))
        if out.full():
            yield out.take()
    query = _query_json(window, None, None)
    out.add(
        f'],"metadata":{{"query":{query},"recordCount":{len(sums)},'
        f'"totals":{{{amounts_json(ACCOUNT_FIELDS, tuple(totals))}}}}}}}'
    )
    yield out.take()


def _query_json(window: Window, product: Product | None, id_filter: str | None) -> str:
    text = (
        f'{{"startTime":"{iso(window.start)}","endTime":"{iso(window.end)}",'
        f'"bucketSize":"{window.size}"'
    )
    if product is not None and product.id_field:
        value = "null" if id_filter is None else json.dumps(id_filter)
        text += f',"{product.id_field}":{value}'
    return text + "}"
