"""Comparing what labgov stored with Runpod's own account totals."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models.functions import TruncMonth

from labgov.core.money import ZERO, grouped_sums, to_cents
from labgov.core.periods import UTC
from labgov.runpod.models import AccountBillingRecord, BillingRecord


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
    """Per calendar month (UTC): the sum of per-resource records, Runpod's account total, and
    what of it nobody owns. Newest first."""

    def by_month(queryset):
        months = queryset.annotate(month=TruncMonth("bucket_start", tzinfo=UTC))
        return {
            key[0]: total for key, total in grouped_sums(months, ["month"], "total_usd").items()
        }

    records = BillingRecord.objects.filter(resource__account=account)
    unattributed = by_month(records.filter(allocation__isnull=True))
    records = by_month(records)
    runpod = by_month(AccountBillingRecord.objects.filter(account=account))
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
