from decimal import ROUND_HALF_EVEN, Decimal

from django.db import models
from django.db.models import Sum
from django.db.models.functions import Coalesce

ZERO = Decimal(0)
CENT = Decimal("0.01")


def to_cents(amount: Decimal) -> Decimal:
    """Round for display and invoices only; stored amounts keep every digit Runpod sent."""
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def BudgetField(**kwargs) -> models.DecimalField:  # noqa: N802 - reads like a field class
    """Amounts people type: budgets, caps. Whole cents."""
    return models.DecimalField(max_digits=14, decimal_places=2, **kwargs)


def PreciseMoneyField(**kwargs) -> models.DecimalField:  # noqa: N802
    """Amounts derived from Runpod records, which carry fractions of a cent."""
    return models.DecimalField(max_digits=20, decimal_places=10, **kwargs)


def sum_or_zero(expression, **kwargs):
    return Coalesce(
        Sum(expression, **kwargs),
        ZERO,
        output_field=models.DecimalField(max_digits=20, decimal_places=10),
    )


def grouped_sums(queryset, keys: list[str], field: str) -> dict[tuple, Decimal]:
    """Exact sums of a money field grouped by `keys`.

    PostgreSQL sums numeric exactly. SQLite (the demo's database) sums decimals as floating
    point, which would lose the fractions of a cent that Runpod's records carry, so there the
    rows are summed in Python, where Decimal is exact.
    """
    from django.db import connections

    if connections[queryset.db].vendor == "postgresql":
        rows = queryset.values(*keys).annotate(_total=Sum(field)).values_list(*keys, "_total")
        return {tuple(row[:-1]): row[-1] or ZERO for row in rows}
    totals: dict[tuple, Decimal] = {}
    for row in queryset.values_list(*keys, field).iterator(chunk_size=5000):
        key = tuple(row[:-1])
        totals[key] = totals.get(key, ZERO) + (row[-1] or ZERO)
    return totals
