"""The invoice total is the sum of its rounded lines, and rounding each line once moves it
at most half a cent from the exact sum."""

import datetime as dt
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.invoicing.services import _rewrite_lines
from labgov.usage.periods import billing_period

pytestmark = pytest.mark.django_db
HALF_CENT = Decimal("0.005")

# Exact amounts as Runpod's sums carry them: up to ten decimal places, either sign (late
# corrections are negative), including exact half cents. SQLite (the demo's database) keeps
# about 15 significant digits of a stored decimal, so there the amounts carry fewer places.
PLACES = 10 if connection.vendor == "postgresql" else 6
exact_amounts = st.one_of(
    st.decimals(min_value=-1000, max_value=100000, places=PLACES, allow_nan=False),
    st.integers(-100000, 100000).map(lambda n: Decimal(n) / 1000 + Decimal("0.005")),
)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    amounts=st.lists(exact_amounts, min_size=1, max_size=12),
    rate=st.one_of(st.none(), st.decimals(min_value=0, max_value=200, places=2)),
)
def test_total_is_the_sum_of_rounded_lines_within_half_a_cent_a_line(world, amounts, rate):
    with transaction.atomic():
        fs = world.funding_source
        fs.indirect_cost_rate_percent = rate
        start, end = billing_period(2026, 10)
        invoice = Invoice.objects.create(
            institution=world.institution,
            funding_source=fs,
            lab=world.lab,
            month=dt.date(2026, 10, 1),
            period_start=start,
            period_end=end,
        )
        lines = [
            InvoiceLine(
                kind="usage",
                category="gpu_compute",
                description=f"line {i}",
                exact_amount_usd=amount,
                amount_usd=amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN),
            )
            for i, amount in enumerate(amounts)
        ]
        _rewrite_lines(invoice, lines, fs)
        stored = list(invoice.lines.order_by("position"))
        invoice.refresh_from_db()
        assert invoice.total_usd == sum(line.amount_usd for line in stored)
        assert invoice.exact_total_usd == sum(line.exact_amount_usd for line in stored)
        for line in stored:
            assert line.amount_usd == line.exact_amount_usd.quantize(
                Decimal("0.01"), rounding=ROUND_HALF_EVEN
            )
        assert abs(invoice.rounding_difference_usd) <= HALF_CENT * len(stored)
        transaction.set_rollback(True)
