"""Comparing what labgov stored with Runpod's own account totals.

Equal totals prove nothing about days labgov never fetched: both sides then lack them alike.
So each month also says which of its days labgov holds (days every hour of which lies inside
the windows of successful syncs taken together), and a month is reconciled only when it holds
every day that has ended (for the current month: so far) and the totals agree to the cent.
"""

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models.functions import TruncMonth
from django.utils import timezone

from labgov.core.money import ZERO, grouped_sums, to_cents
from labgov.core.periods import UTC, day_start, month_period
from labgov.runpod.models import AccountBillingRecord, SyncRun

DAY = dt.timedelta(days=1)


@dataclass
class MonthReconciliation:
    month: dt.date
    records_usd: Decimal
    runpod_usd: Decimal
    unattributed_usd: Decimal
    days_due: list[dt.date] = field(default_factory=list)  # the month's days that have ended
    days_held: list[dt.date] = field(default_factory=list)  # of those, the ones labgov holds

    @property
    def difference_usd(self) -> Decimal:
        return self.records_usd - self.runpod_usd

    @property
    def matches_to_the_cent(self) -> bool:
        return to_cents(self.records_usd) == to_cents(self.runpod_usd)

    @property
    def covered_whole(self) -> bool:
        return len(self.days_held) == len(self.days_due)

    @property
    def reconciled(self) -> bool:
        return bool(self.days_due) and self.covered_whole and self.matches_to_the_cent

    @property
    def days_held_text(self) -> str:
        """`30 of 30 days`, or `1 of 30 days (30)` naming the days held, as ranges."""
        count = f"{len(self.days_held)} of {len(self.days_due)} days"
        if self.covered_whole or not self.days_held:
            return count
        return f"{count} ({day_ranges(self.days_held)})"


def day_ranges(days: list[dt.date]) -> str:
    """`1–12, 30` for the days of one month."""
    runs: list[list[int]] = []
    for day in sorted(days):
        if runs and day.day == runs[-1][1] + 1:
            runs[-1][1] = day.day
        else:
            runs.append([day.day, day.day])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def held_spans(account, since: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """The merged windows of the account's successful syncs reaching past `since`: every
    bucket wholly inside one of them is held as Runpod last reported it."""
    return _merged(
        SyncRun.objects.filter(
            account=account,
            status=SyncRun.Status.SUCCEEDED,
            window_start__isnull=False,
            window_end__gt=since,
        ).values_list("window_start", "window_end")
    )


def held_spans_by_account(account_ids, since: dt.datetime) -> dict[int, list]:
    """held_spans of several accounts in one query: {account id: merged windows}."""
    windows: dict[int, list] = {pk: [] for pk in account_ids}
    for account_id, start, end in SyncRun.objects.filter(
        account_id__in=windows,
        status=SyncRun.Status.SUCCEEDED,
        window_start__isnull=False,
        window_end__gt=since,
    ).values_list("account_id", "window_start", "window_end"):
        windows[account_id].append((start, end))
    return {pk: _merged(spans) for pk, spans in windows.items()}


def _merged(windows) -> list[tuple[dt.datetime, dt.datetime]]:
    spans: list[tuple[dt.datetime, dt.datetime]] = []
    for start, end in sorted(windows):
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def _days_held(spans, first: dt.date, last: dt.date) -> list[dt.date]:
    """Days first..last lying wholly inside one merged span."""
    held = []
    for start, end in spans:
        day = max(first, start.astimezone(UTC).date())
        while day <= last and day_start(day) + DAY <= end:
            if day_start(day) >= start:
                held.append(day)
            day += DAY
    return sorted(set(held))


def account_reconciliation(
    *, account, months: int = 3, now: dt.datetime | None = None
) -> list[MonthReconciliation]:
    """Per calendar month (UTC): the synced records' total (read from the monthly rollups,
    which equal them), Runpod's own account total, what of it nobody owns, and the days labgov
    holds. Newest first."""
    from labgov.usage.models import MonthlySpend

    now = now or timezone.now()
    spend = MonthlySpend.objects.filter(account=account)
    records = {k[0]: v for k, v in grouped_sums(spend, ["month"], "amount_usd").items()}
    unattributed = {
        k[0]: v
        for k, v in grouped_sums(
            spend.filter(allocation__isnull=True), ["month"], "amount_usd"
        ).items()
    }
    runpod_months = AccountBillingRecord.objects.filter(account=account).annotate(
        month=TruncMonth("bucket_start", tzinfo=UTC)
    )
    runpod = {
        k[0].astimezone(UTC).date(): v
        for k, v in grouped_sums(runpod_months, ["month"], "total_usd").items()
    }
    months_seen = sorted(set(records) | set(runpod), reverse=True)[:months]
    if not months_seen:
        return []
    oldest, _ = month_period(months_seen[-1].year, months_seen[-1].month)
    spans = held_spans(account, oldest)
    today = now.astimezone(UTC).date()
    result = []
    for m in months_seen:
        start, end = month_period(m.year, m.month)
        last_due = min(end.date() - DAY, today - DAY)
        due = [start.date() + DAY * i for i in range(max(0, (last_due - start.date()).days + 1))]
        result.append(
            MonthReconciliation(
                month=m,
                records_usd=records.get(m, ZERO),
                runpod_usd=runpod.get(m, ZERO),
                unattributed_usd=unattributed.get(m, ZERO),
                days_due=due,
                days_held=_days_held(spans, start.date(), last_due) if due else [],
            )
        )
    return result
