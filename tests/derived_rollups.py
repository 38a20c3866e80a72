"""The rollups summed from other rollups, against what they are the sums of, to the last digit,
computed here in Python: LabDailySpend (the attributed daily rollups, DailySpend with an
allocation, by account, lab, day and category) and SourceMonthlySpend (the monthly rollups,
MonthlySpend, by account, funding source and month)."""

from collections import defaultdict
from decimal import Decimal

from labgov.usage.models import DailySpend, LabDailySpend, MonthlySpend, SourceMonthlySpend


def _sums(rows, *, keep_zero: bool = False) -> dict[tuple, Decimal]:
    sums: dict[tuple, Decimal] = defaultdict(Decimal)
    for *key, amount in rows:
        sums[tuple(key)] += amount
    return {k: v for k, v in sums.items() if v or keep_zero}


def assert_derived_rollups_match() -> None:
    expected = _sums(
        DailySpend.objects.filter(allocation__isnull=False).values_list(
            "account_id", "lab_id", "day", "category", "amount_usd"
        )
    )
    stored = LabDailySpend.objects.values_list(
        "account_id", "lab_id", "day", "category", "amount_usd"
    )
    assert {tuple(key): amount for *key, amount in stored} == expected
    assert all(amount for *_, amount in stored), "a zero sum is no row"

    # By funding source, a month that nets to zero keeps its row (finance's page lists it).
    expected = _sums(
        MonthlySpend.objects.values_list(
            "account_id", "institution_id", "funding_source_id", "month", "amount_usd"
        ),
        keep_zero=True,
    )
    stored = SourceMonthlySpend.objects.values_list(
        "account_id", "institution_id", "funding_source_id", "month", "amount_usd"
    )
    assert {tuple(key): amount for *key, amount in stored} == expected
