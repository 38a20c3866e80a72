"""How long a Runpod account's balance lasts: the balance Runpod reported (or an admin
entered) over the larger of the last 7 days' spend and Runpod's current $/hour. Read by the
balance alert and shown to approvers before they approve new spend."""

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from labgov.core.money import ZERO, grouped_sums, to_cents
from labgov.dashboard.forecast import burn_window
from labgov.usage.models import DailySpend

HOURS_PER_DAY = 24


@dataclass(frozen=True)
class Runway:
    balance_usd: Decimal
    source: str  # "reported by Runpod" / "entered by an admin"
    daily_usd: Decimal  # USD/day it is spent at

    @property
    def days_left(self) -> Decimal | None:
        return self.balance_usd / self.daily_usd if self.daily_usd > 0 else None

    @property
    def words(self) -> str:
        """ "about 8 hours", "about 12 days", or that nothing is being spent."""
        if self.days_left is None:
            return "as long as nothing is spent"
        return runway_words(self.days_left)

    @property
    def daily_words(self) -> str:
        return f"${to_cents(self.daily_usd):,.2f}/day"


def runway_words(days: Decimal) -> str:
    """A runway as people say it: hours under two days, days otherwise."""
    if days < 2:
        hours = int((days * HOURS_PER_DAY).to_integral_value(rounding=ROUND_HALF_EVEN))
        if hours < 1:
            return "less than an hour"
        return f"about {hours} hour{'s' if hours != 1 else ''}"
    whole = int(days.to_integral_value(rounding=ROUND_HALF_EVEN))
    return f"about {whole} days"


def account_balance(account) -> tuple[Decimal, str] | None:
    if account.balance_fetched_at is not None and account.balance_usd is not None:
        return account.balance_usd, "reported by Runpod"
    if account.manual_balance_usd is not None:
        return account.manual_balance_usd, "entered by an admin"
    return None


def runways(accounts, today: dt.date) -> dict[int, Runway]:
    """The runway of each account whose balance is known, in one query for their spend."""
    known = {a.pk: (a, b) for a in accounts if (b := account_balance(a)) is not None}
    if not known:
        return {}
    first, last = burn_window(today)
    spend = DailySpend.objects.filter(account_id__in=known, day__gte=first, day__lte=last)
    weekly = {k[0]: v for k, v in grouped_sums(spend, ["account_id"], "amount_usd").items()}
    result = {}
    for pk, (account, (balance, source)) in known.items():
        daily = weekly.get(pk, ZERO) / 7
        if account.balance_spend_per_hr_usd is not None:
            daily = max(daily, account.balance_spend_per_hr_usd * HOURS_PER_DAY)
        result[pk] = Runway(balance_usd=balance, source=source, daily_usd=daily)
    return result
