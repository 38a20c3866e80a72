"""Burn rate and run-out forecasts: plain arithmetic on Decimals and dates, no database.

- Burn rate: the spend of the last 7 full UTC days (yesterday and the six days before it)
  divided by 7. Today is left out because its spend is still arriving.
- Run-out date: today + remaining ÷ burn rate, in whole days (the day on which the remaining
  money crosses zero at that rate). None when the burn rate is zero.
- Remaining is the ledger's: amount (or cap) − committed − spent.
- The rate of what runs and is stored now (the hourly cost of the running resources paid
  from the money, plus their storage, per day) gives a second run-out date: a grant whose
  8×H100 pods started this morning has no spend in the last 7 days yet and runs out within
  days. The forecast goes by the faster of the two rates (the earlier run-out) and names both.
"""

import datetime as dt
import enum
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

from labgov.core.money import ZERO, to_cents

BURN_DAYS = 7


def burn_window(today: dt.date) -> tuple[dt.date, dt.date]:
    """The first and last day (both included) whose spend makes the burn rate."""
    return today - dt.timedelta(days=BURN_DAYS), today - dt.timedelta(days=1)


def burn_rate(spend_in_window: Decimal) -> Decimal:
    """USD per day."""
    return spend_in_window / BURN_DAYS


class Outlook(enum.StrEnum):
    NO_BURN = "no_burn"  # nothing spent lately: no run-out date
    SPENT = "spent"  # nothing left (or overspent) already
    RUNS_OUT_EARLY = "runs_out_early"  # runs out on or before the end date
    LASTS = "lasts"  # money left when the end date comes
    ENDED = "ended"  # the end date has passed


@dataclass(frozen=True)
class Forecast:
    today: dt.date
    end_date: dt.date
    remaining_usd: Decimal
    # The rate this forecast goes by: the faster of the last 7 days' and what runs now.
    burn_rate_usd: Decimal
    outlook: Outlook
    run_out_date: dt.date | None
    # Days between the run-out date and the end date (positive: runs out before the end).
    days_before_end: int | None
    # What is left on the end date if spending goes on at the burn rate (LASTS only).
    left_at_end_usd: Decimal | None
    # USD/day over the last 7 days, and of what runs and is stored now.
    past_rate_usd: Decimal = ZERO
    now_rate_usd: Decimal = ZERO
    # The forecast at the other, slower rate, when both are known and differ.
    other: "Forecast | None" = None

    @property
    def is_risk(self) -> bool:
        return self.outlook in (Outlook.SPENT, Outlook.RUNS_OUT_EARLY)

    @property
    def by_now_rate(self) -> bool:
        """Whether the forecast goes by what runs now (faster than the last 7 days)."""
        return self.now_rate_usd > self.past_rate_usd

    @property
    def headline(self) -> str:
        main = self._words()
        if self.outlook not in (Outlook.RUNS_OUT_EARLY, Outlook.LASTS) or self.other is None:
            return main
        now = f"what runs and is stored now ({_usd(self.now_rate_usd)}/day)"
        past = f"the last 7 days' rate ({_usd(self.past_rate_usd)}/day)"
        if self.by_now_rate:
            return f"{main} at {now}; at {past}: {self.other._short()}"
        return f"{main} at {past}; at {now}: {self.other._short()}"

    def _short(self) -> str:
        if self.outlook == Outlook.NO_BURN:
            return "no spend"
        if self.outlook == Outlook.RUNS_OUT_EARLY or self.run_out_date is None:
            return f"runs out {_day(self.run_out_date)}" if self.run_out_date else "lasts"
        return f"lasts past its end (runs out {_day(self.run_out_date)})"

    def _words(self) -> str:
        end = _day(self.end_date)
        if self.outlook == Outlook.ENDED:
            return f"Ended {end}"
        if self.outlook == Outlook.SPENT:
            return "Overspent" if self.remaining_usd < 0 else "Fully spent"
        if self.outlook == Outlook.NO_BURN:
            return "No spend in the last 7 days"
        run_out = _day(self.run_out_date)
        if self.outlook == Outlook.RUNS_OUT_EARLY:
            if self.days_before_end == 0:
                return f"Runs out {run_out}, the day it ends"
            return f"Runs out {run_out}, {gap_words(self.days_before_end)} before it ends ({end})"
        return f"Lasts past its end ({end}) at this rate, with {_usd(self.left_at_end_usd)} left"


def forecast(
    *,
    remaining_usd: Decimal,
    burn_rate_usd: Decimal,
    today: dt.date,
    end_date: dt.date,
    now_rate_usd: Decimal = ZERO,
) -> Forecast:
    """The forecast at the faster of the last 7 days' rate (`burn_rate_usd`) and the rate of
    what runs and is stored now (`now_rate_usd`), both in USD per day; the other one rides
    along as `other`."""
    faster, slower = max(burn_rate_usd, now_rate_usd), min(burn_rate_usd, now_rate_usd)
    rates = {"past_rate_usd": burn_rate_usd, "now_rate_usd": now_rate_usd}
    other = None
    if now_rate_usd > ZERO and faster != slower:
        other = _at_rate(remaining_usd, slower, today, end_date, rates, None)
    return _at_rate(remaining_usd, faster, today, end_date, rates, other)


def _at_rate(remaining_usd, rate, today, end_date, rates, other) -> Forecast:
    def result(outlook, run_out=None, days_before=None, left=None):
        return Forecast(
            today=today,
            end_date=end_date,
            remaining_usd=remaining_usd,
            burn_rate_usd=rate,
            outlook=outlook,
            run_out_date=run_out,
            days_before_end=days_before,
            left_at_end_usd=left,
            other=other,
            **rates,
        )

    if end_date < today:
        return result(Outlook.ENDED)
    if remaining_usd <= ZERO:
        return result(Outlook.SPENT)
    if rate <= ZERO:
        return result(Outlook.NO_BURN)
    days_left = (remaining_usd / rate).to_integral_value(rounding=ROUND_FLOOR)
    days_to_end = (end_date - today).days
    if days_left <= days_to_end:
        run_out = today + dt.timedelta(days=int(days_left))
        return result(Outlook.RUNS_OUT_EARLY, run_out, (end_date - run_out).days)
    # Spending goes on through the end date, which is included.
    left = remaining_usd - rate * (days_to_end + 1)
    try:
        run_out = today + dt.timedelta(days=int(days_left))
    except OverflowError:  # a trickle of spend: no date in the calendar
        return result(Outlook.LASTS, None, None, left)
    return result(Outlook.LASTS, run_out, (end_date - run_out).days, left)


def gap_words(days: int) -> str:
    """A span of days as people say it: "5 days", "3 weeks", "4 months"."""
    if days < 14:
        return f"{days} day{'s' if days != 1 else ''}"
    if days < 61:
        return f"{round(days / 7)} weeks"
    months = round(days / Decimal("30.44"))
    return f"{months} months"


def _usd(amount: Decimal) -> str:
    return f"${to_cents(amount):,.2f}"


def _day(day: dt.date | None) -> str:
    return f"{day.day} {day:%B %Y}" if day else ""
