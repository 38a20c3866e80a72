"""A request's money on the ledger: committed on approval, released as it ends or as its
actual spend arrives, so an allocation's committed + spent never counts the same dollar twice.

Each request keeps `commitment_usd`, the sum of its ledger entries, updated in the same
transaction as the entries. Every poster locks the allocation row first, then the request, in
that order everywhere, so concurrent approvals and reconciliations serialize per allocation.
"""

from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Q

from labgov.core.errors import DomainError
from labgov.core.money import ZERO, to_cents
from labgov.funding.models import Allocation, LedgerEntry
from labgov.funding.services import ledger_post
from labgov.provisioning.models import COMMITTED_STATES, ProvisioningRequest
from labgov.provisioning.selectors import actual_usd_by_request

PRECISE = Decimal("1e-10")


def precise(amount: Decimal) -> Decimal:
    """What a PreciseMoneyField stores, so the row and the ledger agree to the digit."""
    return amount.quantize(PRECISE)


def lock_allocation(allocation_id: int) -> Allocation:
    """Lock the allocation row, then read its figures in a new statement: under READ
    COMMITTED that statement sees every commitment committed before the lock was granted."""
    Allocation.objects.select_for_update().filter(pk=allocation_id).values_list("pk").get()
    return Allocation.objects.with_figures().select_related("funding_source").get(pk=allocation_id)


def lock_request(request_id: int) -> ProvisioningRequest:
    return ProvisioningRequest.objects.select_for_update().get(pk=request_id)


def _post(req: ProvisioningRequest, *, actor, kind: str, amount: Decimal, key: str, memo: str):
    entry = ledger_post(
        actor=actor,
        funding_source=req.allocation.funding_source,
        allocation=req.allocation,
        kind=kind,
        amount_usd=amount,
        memo=memo[:300],
        idempotency_key=key,
    )
    req.commitment_usd = precise(req.commitment_usd + entry.amount_usd)
    req.ledger_seq += 1
    return entry


def commitment_post(*, actor, req: ProvisioningRequest, allocation: Allocation) -> None:
    """Commit the request's estimate. The caller holds the allocation lock and passes the
    allocation read after it (with figures); a commitment never exceeds what is left."""
    amount = precise(req.estimate_total_usd - req.commitment_usd)
    if amount <= 0:
        return
    if amount > allocation.remaining_usd:
        raise DomainError(
            f"The estimate of ${to_cents(amount):,.2f} is more than the allocation has left "
            f"(${to_cents(allocation.remaining_usd):,.2f}); nothing was committed."
        )
    key = f"request:{req.pk}:commit"
    if req.ledger_seq:
        key = f"request:{req.pk}:commit:{req.ledger_seq + 1}"
    req.allocation = allocation
    _post(
        req,
        actor=actor,
        kind=LedgerEntry.Kind.COMMITMENT,
        amount=amount,
        key=key,
        memo=f"Provisioning request #{req.pk}: {req.title}",
    )


def commitment_release_to(*, actor, req: ProvisioningRequest, target: Decimal, why: str) -> bool:
    """Release the request's commitment down to `target` (never up). The caller holds the
    allocation and request locks."""
    target = precise(max(ZERO, target))
    if target >= req.commitment_usd:
        return False
    _post(
        req,
        actor=actor,
        kind=LedgerEntry.Kind.RELEASE,
        amount=target - req.commitment_usd,
        key=f"request:{req.pk}:release:{req.ledger_seq + 1}",
        memo=f"Provisioning request #{req.pk}: {why}",
    )
    return True


def _desired(req: ProvisioningRequest, actual: Decimal, all_gone: bool) -> Decimal:
    """What should stay committed: the estimate not yet spent, while the work goes on."""
    if req.state not in COMMITTED_STATES or all_gone:
        return ZERO
    return max(ZERO, req.estimate_total_usd - actual)


def commitments_after_sync(*, run) -> dict:
    """After-sync step (settings.LABGOV_AFTER_SYNC): a successful sync brings the actual
    spend that takes over from what approvals committed."""
    if run.status != "succeeded":
        return {}
    return {"commitments_released": commitments_reconcile()}


def commitments_reconcile(*, request_ids=None) -> int:
    """Release what requests no longer need committed: all of it once a request ended (or all
    its resources are gone), else the part its actual spend has taken over. Returns the number
    of release entries posted. Runs after every successful sync and when a request ends."""
    candidates = ProvisioningRequest.objects.filter(commitment_usd__gt=0)
    if request_ids is not None:
        candidates = candidates.filter(pk__in=list(request_ids))
    allocation_ids = sorted(set(candidates.values_list("allocation_id", flat=True)))
    if not allocation_ids:
        return 0
    posted = 0
    with transaction.atomic():
        list(
            Allocation.objects.select_for_update()
            .filter(pk__in=allocation_ids)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        requests = list(
            candidates.select_for_update(of=("self",))
            .filter(allocation_id__in=allocation_ids)
            .select_related("allocation__funding_source")
            .order_by("pk")
        )
        ids = [r.pk for r in requests]
        actual = actual_usd_by_request(ids)
        gone = _all_resources_gone(ids)
        changed = []
        for req in requests:
            target = _desired(req, actual.get(req.pk, ZERO), req.pk in gone)
            why = "actual spend arrived" if req.state in COMMITTED_STATES else "request ended"
            if req.pk in gone and req.state in COMMITTED_STATES:
                why = "its resources are gone"
            if commitment_release_to(actor=None, req=req, target=target, why=why):
                changed.append(req)
                posted += 1
        ProvisioningRequest.objects.bulk_update(changed, ["commitment_usd", "ledger_seq"])
    return posted


def _all_resources_gone(request_ids) -> set[int]:
    rows = (
        ProvisioningRequest.objects.filter(pk__in=request_ids, state="provisioned")
        .annotate(
            total=Count("resources"),
            present=Count("resources", filter=Q(resources__gone_at__isnull=True)),
        )
        .values_list("pk", "total", "present")
    )
    return {pk for pk, total, present in rows if total and not present}
