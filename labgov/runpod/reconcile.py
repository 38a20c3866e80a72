"""Comparing what labgov stored with Runpod's own account totals."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models.functions import TruncMonth

from labgov.core.money import ZERO, grouped_sums, to_cents
from labgov.core.periods import UTC
from labgov.runpod.models import AccountBillingRecord


@dataclass
class MonthReconciliation:
    month: object
    records_usd: Decimal
    runpod_usd: Decimal
    unattributed_usd: Decimal

    @property
    def difference_usd(self) -> Decimal:
        return self.records_usd - self.runpod_usd

    @property
    def matches_to_the_cent(self) -> bool:
        return to_cents(self.records_usd) == to_cents(self.runpod_usd)


def account_reconciliation(*, account, months: int = 3) -> list[MonthReconciliation]:
    """Per calendar month (UTC): the synced records' total (read from the monthly rollups,
    which equal them), Runpod's own account total, and what of it nobody owns. Newest first."""
    from labgov.usage.models import MonthlySpend

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
    return [
        MonthReconciliation(
            month=m,
            records_usd=records.get(m, ZERO),
            runpod_usd=runpod.get(m, ZERO),
            unattributed_usd=unattributed.get(m, ZERO),
        )
        for m in months_seen
    ]
