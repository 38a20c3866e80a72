"""LabDailySpend against what it is the sum of: the attributed daily rollups (DailySpend with an
allocation), by account, lab, day and category, to the last digit, computed here in Python."""

from collections import defaultdict
from decimal import Decimal

from labgov.usage.models import DailySpend, LabDailySpend


def assert_lab_days_match() -> None:
    expected: dict[tuple, Decimal] = defaultdict(Decimal)
    for key in DailySpend.objects.filter(allocation__isnull=False).values_list(
        "account_id", "lab_id", "day", "category", "amount_usd"
    ):
        expected[key[:4]] += key[4]
    stored = {
        key[:4]: key[4]
        for key in LabDailySpend.objects.values_list(
            "account_id", "lab_id", "day", "category", "amount_usd"
        )
    }
    assert stored == {k: v for k, v in expected.items() if v}
    assert all(stored.values()), "a zero sum is no row"
