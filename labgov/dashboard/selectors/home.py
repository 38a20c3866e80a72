from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Q

from labgov.accounts.access import scope_for
from labgov.accounts.models import Lab, today_utc
from labgov.alerts.selectors import top_alerts
from labgov.core.money import ZERO
from labgov.dashboard.forecast import burn_rate, burn_window, forecast
from labgov.dashboard.selectors.common import daily_sums, now_rates
from labgov.funding.models import Allocation, FundingSource


@dataclass
class Totals:
    amount_usd: Decimal = ZERO
    committed_usd: Decimal = ZERO
    spent_usd: Decimal = ZERO
    remaining_usd: Decimal = ZERO

    def add(self, fs) -> None:
        self.amount_usd += fs.amount_usd
        self.committed_usd += fs.committed_usd
        self.spent_usd += fs.spent_usd
        self.remaining_usd += fs.remaining_usd


@dataclass
class LabSummary:
    lab: Lab
    funding_sources: list = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)


@dataclass
class HomeData:
    institution_labs: list[LabSummary]
    institution_totals: Totals
    managed_labs: list[LabSummary]
    my_allocations: list
    is_empty: bool
    # The most pressing alerts this person sees (waste and risk), most severe first.
    alerts: list


# Home shows at most this many funding sources per section; the funding list pages the rest.
HOME_LIMIT = 200
HOME_ALERTS = 6


def home_for_user(user) -> HomeData:
    """Everything the home page shows, in a fixed number of queries whatever the data size."""
    scope = scope_for(user)
    institution_labs: dict[int, LabSummary] = {}
    managed: dict[int, LabSummary] = {}
    totals = Totals()
    if scope.money_institutions or scope.admin_labs:
        sources = list(FundingSource.objects.for_dashboard(user)[:HOME_LIMIT])
        for fs in sources:
            if fs.lab.institution_id in scope.money_institutions:
                institution_labs.setdefault(fs.lab_id, LabSummary(fs.lab)).funding_sources.append(
                    fs
                )
                institution_labs[fs.lab_id].totals.add(fs)
                totals.add(fs)
            if fs.lab_id in scope.admin_labs:
                managed.setdefault(fs.lab_id, LabSummary(fs.lab)).funding_sources.append(fs)
                managed[fs.lab_id].totals.add(fs)
        # Labs without any funding yet still appear for their admins.
        missing = scope.admin_labs - set(managed)
        if missing:
            for lab in Lab.objects.filter(pk__in=missing):
                managed[lab.pk] = LabSummary(lab)
    my_allocations = list(
        Allocation.objects.for_dashboard(user)
        .filter(user=user)
        .select_related("funding_source__lab")
    )
    _attach_forecasts(
        [fs for summary in managed.values() for fs in summary.funding_sources], my_allocations
    )
    return HomeData(
        institution_labs=sorted(institution_labs.values(), key=lambda s: s.lab.name),
        institution_totals=totals,
        managed_labs=sorted(managed.values(), key=lambda s: s.lab.name),
        my_allocations=my_allocations,
        is_empty=scope.is_empty,
        alerts=top_alerts(user, limit=HOME_ALERTS) if not scope.is_empty else [],
    )


def _attach_forecasts(sources: list, allocations: list) -> None:
    """Burn rate and forecast for the lab admin's funding sources and the person's own
    allocations, read in one query."""
    if not sources and not allocations:
        return
    today = today_utc()
    first, last = burn_window(today)
    sums = daily_sums(
        Q(funding_source_id__in=[fs.pk for fs in sources])
        | Q(allocation_id__in=[a.pk for a in allocations]),
        first,
        last,
        ["funding_source_id", "allocation_id"],
    )
    by_source: dict[int, Decimal] = {}
    by_allocation: dict[int, Decimal] = {}
    for (fs_id, allocation_id), amount in sums.items():
        by_source[fs_id] = by_source.get(fs_id, ZERO) + amount
        by_allocation[allocation_id] = by_allocation.get(allocation_id, ZERO) + amount
    # What runs and is stored now on this money: the second forecast rate (one query).
    now = now_rates(
        Q(current_allocation__funding_source_id__in=[fs.pk for fs in sources])
        | Q(current_allocation_id__in=[a.pk for a in allocations])
    )
    for owner, spent, running in [(fs, by_source, now.by_source) for fs in sources] + [
        (a, by_allocation, now.by_allocation) for a in allocations
    ]:
        owner.forecast = forecast(
            remaining_usd=owner.remaining_usd,
            burn_rate_usd=burn_rate(spent.get(owner.pk, ZERO)),
            today=today,
            end_date=owner.end_date,
            now_rate_usd=running.get(owner.pk, ZERO),
        )
