"""What the pages and the invoices read about cost transfers and split funding."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q

from labgov.accounts import access
from labgov.funding.models import Allocation, FundingSource
from labgov.runpod.models import Assignment
from labgov.transfers.models import CostTransfer, SpendMove


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


def spend_moves_visible_to(user):
    """Back-dated moves of spend: all of the institution for finance and its admins; for lab
    admins, those of resources their labs' allocations pay or would pay."""
    scope = access.scope_for(user)
    return (
        SpendMove.objects.filter(
            Q(institution_id__in=scope.money_institutions)
            | Q(shares__allocation__funding_source__lab_id__in=scope.admin_labs)
            | Q(proposed_by=user)
        )
        .distinct()
        .select_related("resource__account", "proposed_by")
        .prefetch_related("shares__allocation__funding_source", "shares__allocation__user")
        .order_by("-proposed_at", "-pk")
    )


def pending_moves_for(user) -> list[SpendMove]:
    """The pending back-dated moves the user sees, each with `rows`: (allocation, month,
    USD moved) as measured when proposed, losses first."""
    moves = list(spend_moves_visible_to(user).filter(state=SpendMove.State.PENDING)[:50])
    ids = {int(key.split(":")[0]) for m in moves for key in m.moves}
    allocations = Allocation.objects.select_related("funding_source", "user").in_bulk(ids)
    for m in moves:
        m.rows = sorted(
            (
                (allocations.get(int(a)), dt.date.fromisoformat(f"{month}-01"), Decimal(usd))
                for a, month, usd in ((*key.split(":"), usd) for key, usd in m.moves.items())
            ),
            key=lambda row: (row[2], row[1]),
        )
    return moves


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
