"""What the pages and the invoices read about cost transfers and split funding."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q

from labgov.accounts import access
from labgov.funding.models import FundingSource
from labgov.runpod.models import Assignment
from labgov.transfers.models import CostTransfer


def transfers_visible_to(user):
    return (
        CostTransfer.objects.filter(access.cost_transfers_q(user))
        .select_related(
            "account",
            "resource",
            "from_allocation__user",
            "from_allocation__funding_source__lab",
            "to_allocation__user",
            "to_allocation__funding_source__lab",
            "proposed_by",
            "decided_by",
        )
        .order_by("-proposed_at", "-pk")
    )


@dataclass(frozen=True)
class TransferLine:
    """One applied transfer as one funding source's invoice sees it: `amount_usd` is negative
    on the source the spend left and positive on the one it went to."""

    transfer: CostTransfer
    amount_usd: Decimal
    allocation_id: int
    other_funding_source: FundingSource

    @property
    def direction(self) -> str:
        return "out" if self.amount_usd < 0 else "in"


def transfers_for(
    funding_source: FundingSource, period_start: dt.date, period_end: dt.date
) -> list[TransferLine]:
    """The applied cost transfers into or out of `funding_source` whose month lies in
    [period_start, period_end) (dates; a month's transfers carry its first day), oldest first.
    Their amounts are already in the rollups (category "Cost transfers") and in the ledger;
    an invoice shows each as its own line with the justification."""
    transfers = (
        CostTransfer.objects.filter(
            Q(from_funding_source=funding_source) | Q(to_funding_source=funding_source),
            state=CostTransfer.State.APPLIED,
            month__gte=period_start,
            month__lt=period_end,
        )
        .select_related(
            "from_funding_source", "to_funding_source", "resource", "proposed_by", "decided_by"
        )
        .order_by("month", "decided_at", "pk")
    )
    lines = []
    for t in transfers:
        # A transfer between two allocations of one source nets to zero on it: both lines.
        if t.from_funding_source_id == funding_source.pk:
            lines.append(TransferLine(t, -t.amount_usd, t.from_allocation_id, t.to_funding_source))
        if t.to_funding_source_id == funding_source.pk:
            lines.append(TransferLine(t, t.amount_usd, t.to_allocation_id, t.from_funding_source))
    return lines


def transfers_of_month(institution_id: int, month: dt.date) -> list[CostTransfer]:
    """The institution's applied cost transfers of one billing month, oldest first."""
    return list(
        CostTransfer.objects.filter(
            institution_id=institution_id, state=CostTransfer.State.APPLIED, month=month
        )
        .select_related(
            "account",
            "resource",
            "from_allocation",
            "to_allocation",
            "from_funding_source",
            "to_funding_source",
        )
        .order_by("decided_at", "pk")
    )


def assignment_history(resource) -> list[Assignment]:
    """The resource's attribution timeline, newest first, each with its shares (split
    funding) in `share_list`."""
    assignments = list(
        Assignment.objects.filter(resource=resource)
        .select_related("allocation__funding_source", "allocation__user", "created_by")
        .prefetch_related("shares__allocation__funding_source", "shares__allocation__user")
        .order_by("-starts_at", "-pk")
    )
    for a in assignments:
        a.share_list = list(a.shares.all())
    return assignments
