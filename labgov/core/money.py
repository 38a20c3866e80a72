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
