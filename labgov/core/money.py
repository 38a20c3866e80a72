from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext

from django.db import models
from django.db.models import Sum
from django.db.models.functions import Coalesce

ZERO = Decimal(0)
CENT = Decimal("0.01")


def to_cents(amount: Decimal) -> Decimal:
    """Round for display and invoices only; stored amounts keep every digit Runpod sent."""
    return amount.quantize(CENT, ROUND_HALF_EVEN)  # positional: half the time of rounding=


_THOUSAND = Decimal(1000)


def dollars(cents: Decimal) -> str:
    """A non-negative amount in whole cents (to_cents') as f"{cents:,.2f}" writes it: str()
    below a thousand, where there is no comma to place, at a quarter of format's time (a
    finance page formats ~1,800 figures)."""
    return str(cents) if cents < _THOUSAND else f"{cents:,.2f}"


def usd_text(cents: Decimal) -> str:
    """An amount in whole cents as the pages write it: $1,234.50, −$1,234.50, and $0.00 for
    a negative amount that rounded to zero cents."""
    return f"−${dollars(-cents)}" if cents < 0 else f"${dollars(abs(cents))}"


def BudgetField(**kwargs) -> models.DecimalField:  # noqa: N802 - reads like a field class
    """Amounts people type: budgets, caps. Whole cents."""
    return models.DecimalField(max_digits=14, decimal_places=2, **kwargs)


def PreciseMoneyField(**kwargs) -> models.DecimalField:  # noqa: N802
    """Amounts derived from Runpod records, which carry fractions of a cent."""
    return models.DecimalField(max_digits=20, decimal_places=10, **kwargs)


# The type of sums and other expressions over money columns: wider than any column, so that
# a sum of many rows converts back without overflowing (SQLite's converter quantizes to it).
SUM_FIELD = models.DecimalField(max_digits=30, decimal_places=10)


def sum_or_zero(expression, **kwargs):
    return Coalesce(
        Sum(expression, **kwargs),
        ZERO,
        output_field=SUM_FIELD,
    )


def grouped_sums(queryset, keys: list[str], field: str) -> dict[tuple, Decimal]:
    return {key: totals[0] for key, totals in grouped_multi_sums(queryset, keys, [field]).items()}


def grouped_multi_sums(queryset, keys: list[str], fields: list[str]) -> dict[tuple, list[Decimal]]:
    """Exact sums of a money field grouped by `keys`.

    PostgreSQL sums numeric exactly. SQLite (the demo's database) sums decimals as floating
    point, which would lose the fractions of a cent that Runpod's records carry, so there the
    rows are summed in Python, where Decimal is exact.
    """
    from django.db import connections

    n = len(keys)
    if connections[queryset.db].vendor == "postgresql":
        sums = {f"_sum{i}": Sum(f) for i, f in enumerate(fields)}
        rows = queryset.values(*keys).annotate(**sums).values_list(*keys, *sums)
        return {tuple(row[:n]): [v or ZERO for v in row[n:]] for row in rows}
    totals: dict[tuple, list[Decimal]] = {}
    for row in queryset.values_list(*keys, *fields).iterator(chunk_size=5000):
        key = tuple(row[:n])
        current = totals.setdefault(key, [ZERO] * len(fields))
        for i, value in enumerate(row[n:]):
            current[i] += value or ZERO
    return totals


PRECISE_UNIT = Decimal("1E-10")  # the last place PreciseMoneyField stores


def split_by_shares(amount: Decimal, shares: list[Decimal]) -> list[Decimal]:
    """Split `amount` in proportion to `shares` (percentages summing to 100) at the stored
    precision, so the parts add up to `amount` exactly (largest remainder method).

    Each part is first floored to the stored unit; the units left over go one each to the
    parts whose floors cut off the most, ties to the earlier share: deterministic, and no part
    is ever more than one unit from its exact value. Works for negative amounts (credits) too.
    """
    total = sum(shares, ZERO)
    if total != 100:
        raise ValueError(f"shares must sum to 100, not {total}")
    with localcontext() as context:
        context.prec = 60  # room for any sum of stored amounts times a share: exact
        exact = [amount * share / 100 for share in shares]
        floors = [value.quantize(PRECISE_UNIT, rounding=ROUND_FLOOR) for value in exact]
        left = int((amount.quantize(PRECISE_UNIT) - sum(floors, ZERO)) / PRECISE_UNIT)
    order = sorted(range(len(shares)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += PRECISE_UNIT
    return floors
