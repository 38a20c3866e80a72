"""Billing amounts, derived from resource histories.

Each billable resource is a `Meter`: the seconds it exists, cut into segments of constant rates.
A component's amount over a stretch of time is `sum(rate x seconds) / denominator`, computed
with Decimal and quantized to 10 decimal places (ROUND_HALF_EVEN) once per hourly bucket;
rates are exact decimals ($/h for compute, GB x $/GB/month for storage) and the denominator
carries the 3600 s and the 730 h month, so the only rounding is that quantization. Hours cut by
an edge (a start, a stop) are many and each different, so they are computed with the same rates
scaled to exact integers: the same exact quotient, rounded the same way, at a fifth of the cost
(tests/simulator/test_billing.py checks the two agree).

Bigger buckets are sums of the quantized hourly amounts, and the account's record for a bucket
is the sum of every resource's, so all totals agree to the last digit. Quantized amounts are
kept as integers in units of 1e-10 USD for summing and written out as exact decimal text.

Speed: a full hour inside one segment has the same amount as every other such hour, so a
request is a walk over segments ("runs" of equal hours) rather than over hours. `records.py`
turns runs into JSON; `windows.py` resolves a query's time window; `meters.py` builds meters.
"""

import bisect
import functools
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal

from labgov.simulator.scenario import HOUR

FOREVER = 2**62
UNITS = 10**10  # amounts are integers of 1e-10 USD
Q10 = Decimal("1e-10")
DECIMAL = Context(prec=50, rounding=ROUND_HALF_EVEN)


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


def _units_exact(numerator: int, denominator: int) -> int:
    """The same quotient as `_units`, for integer operands, rounded half to even."""
    quotient, remainder = divmod(numerator * UNITS, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient & 1):
        quotient += 1
    return quotient


def _decimal_places(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


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
        "exact_rates",
        "exact_denominators",
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
        # The rates as integers: component c's rate is exact_rates[i][c] / 10**places[c].
        places = [
            max((_decimal_places(r[c]) for _, _, r in merged), default=0)
            for c in range(len(denominators))
        ]
        self.exact_rates = [
            tuple(int(rate.scaleb(p)) for rate, p in zip(rates, places, strict=True))
            for _, _, rates in merged
        ]
        self.exact_denominators = tuple(
            d * 10**p for d, p in zip(denominators, places, strict=True)
        )
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
        sums = [0] * len(self.denominators)
        starts, ends, exact = self.starts, self.ends, self.exact_rates
        for i in range(max(bisect.bisect_right(starts, s) - 1, 0), len(starts)):
            if starts[i] >= e:
                break
            seconds = min(ends[i], e) - max(starts[i], s)
            if seconds > 0:
                for c, rate in enumerate(exact[i]):
                    if rate:
                        sums[c] += rate * seconds
        value = tuple(
            _units_exact(n, d) for n, d in zip(sums, self.exact_denominators, strict=True)
        )
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
