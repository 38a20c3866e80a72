"""The forecast arithmetic: burn rate, run-out date and how it sits against the end date."""

import datetime as dt
from decimal import Decimal

import pytest

from labgov.dashboard.forecast import (
    BURN_DAYS,
    Outlook,
    burn_rate,
    burn_window,
    forecast,
    gap_words,
)

TODAY = dt.date(2026, 3, 1)
D = Decimal


def test_burn_window_is_the_last_seven_full_days():
    assert burn_window(TODAY) == (dt.date(2026, 2, 22), dt.date(2026, 2, 28))
    assert BURN_DAYS == 7


def test_burn_rate_divides_by_seven_exactly():
    assert burn_rate(D("70")) == D("10")
    assert burn_rate(D("1")) * 7 == D("1.000000000000000000000000000")
    assert burn_rate(D("0")) == 0


def test_run_out_date_is_today_plus_remaining_over_burn():
    f = forecast(
        remaining_usd=D("1000"), burn_rate_usd=D("10"), today=TODAY, end_date=dt.date(2026, 12, 31)
    )
    assert f.outlook == Outlook.RUNS_OUT_EARLY
    assert f.run_out_date == TODAY + dt.timedelta(days=100)  # 9 June
    assert f.days_before_end == (dt.date(2026, 12, 31) - dt.date(2026, 6, 9)).days
    assert f.is_risk
    assert f.headline == "Runs out 9 June 2026, 7 months before it ends (31 December 2026)"


def test_part_days_count_as_the_day_the_money_crosses_zero():
    f = forecast(
        remaining_usd=D("75"), burn_rate_usd=D("10"), today=TODAY, end_date=dt.date(2026, 12, 31)
    )
    assert f.run_out_date == TODAY + dt.timedelta(days=7)


def test_no_burn_has_no_run_out_date():
    f = forecast(
        remaining_usd=D("500"), burn_rate_usd=D("0"), today=TODAY, end_date=dt.date(2026, 12, 31)
    )
    assert f.outlook == Outlook.NO_BURN
    assert f.run_out_date is None
    assert not f.is_risk
    assert f.headline == "No spend in the last 7 days"


@pytest.mark.parametrize("remaining", [D("0"), D("-120.50")])
def test_already_spent_or_overspent(remaining):
    f = forecast(
        remaining_usd=remaining, burn_rate_usd=D("10"), today=TODAY, end_date=dt.date(2026, 12, 31)
    )
    assert f.outlook == Outlook.SPENT
    assert f.run_out_date is None
    assert f.is_risk
    assert f.headline == ("Overspent" if remaining < 0 else "Fully spent")


def test_ends_before_the_money_runs_out():
    end = TODAY + dt.timedelta(days=9)  # ten days of spending, today included
    f = forecast(remaining_usd=D("1000"), burn_rate_usd=D("10"), today=TODAY, end_date=end)
    assert f.outlook == Outlook.LASTS
    assert f.run_out_date == TODAY + dt.timedelta(days=100)
    assert f.days_before_end < 0
    assert f.left_at_end_usd == D("900")
    assert not f.is_risk
    assert f.headline == "Lasts past its end (10 March 2026) at this rate, with $900.00 left"


def test_running_out_on_the_last_day():
    end = TODAY + dt.timedelta(days=10)
    f = forecast(remaining_usd=D("100"), burn_rate_usd=D("10"), today=TODAY, end_date=end)
    assert f.outlook == Outlook.RUNS_OUT_EARLY
    assert f.run_out_date == end
    assert f.days_before_end == 0
    assert f.headline == "Runs out 11 March 2026, the day it ends"


def test_ended_funding_has_no_forecast():
    f = forecast(
        remaining_usd=D("100"), burn_rate_usd=D("10"), today=TODAY, end_date=dt.date(2026, 2, 1)
    )
    assert f.outlook == Outlook.ENDED
    assert f.run_out_date is None
    assert f.headline == "Ended 1 February 2026"


def test_a_trickle_of_spend_lasts_beyond_the_calendar():
    f = forecast(
        remaining_usd=D("1e12"),
        burn_rate_usd=D("0.0000001"),
        today=TODAY,
        end_date=dt.date(2026, 12, 31),
    )
    assert f.outlook == Outlook.LASTS
    assert f.run_out_date is None


@pytest.mark.parametrize(
    ("days", "words"),
    [
        (1, "1 day"),
        (5, "5 days"),
        (13, "13 days"),
        (21, "3 weeks"),
        (60, "9 weeks"),
        (95, "3 months"),
    ],
)
def test_gap_words(days, words):
    assert gap_words(days) == words


# -- What runs now -----------------------------------------------------------------------------


def test_running_pods_without_recent_spend_still_run_out():
    # Two 8×H100 pods ($43.04/h together) started this morning: no spend in the last 7 days.
    f = forecast(
        remaining_usd=D("20000"),
        burn_rate_usd=D("0"),
        today=TODAY,
        end_date=TODAY + dt.timedelta(days=90),
        now_rate_usd=D("43.04") * 24,
    )
    assert f.outlook == Outlook.RUNS_OUT_EARLY and f.by_now_rate and f.is_risk
    assert f.run_out_date == TODAY + dt.timedelta(days=19)  # $20,000 ÷ $1,032.96/day
    assert f.headline == (
        "Runs out 20 March 2026, 2 months before it ends (30 May 2026) at what runs and is "
        "stored now ($1,032.96/day); at the last 7 days' rate ($0.00/day): no spend"
    )
    assert not f.headline.startswith("No spend")


def test_the_earlier_run_out_of_the_two_rates_wins_and_both_are_named():
    kwargs = {"remaining_usd": D("1000"), "today": TODAY, "end_date": TODAY + dt.timedelta(days=90)}
    faster_past = forecast(burn_rate_usd=D("50"), now_rate_usd=D("20"), **kwargs)
    assert faster_past.run_out_date == TODAY + dt.timedelta(days=20)
    assert not faster_past.by_now_rate
    assert "at the last 7 days' rate ($50.00/day)" in faster_past.headline
    assert "at what runs and is stored now ($20.00/day): runs out 20 April 2026" in (
        faster_past.headline
    )
    faster_now = forecast(burn_rate_usd=D("20"), now_rate_usd=D("50"), **kwargs)
    assert faster_now.run_out_date == TODAY + dt.timedelta(days=20) and faster_now.by_now_rate
    # Nothing running or stored: the forecast is the last 7 days' alone, worded as before.
    alone = forecast(burn_rate_usd=D("50"), **kwargs)
    assert alone.other is None and "what runs" not in alone.headline
