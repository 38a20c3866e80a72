"""Split funding: a resource paid by several allocations in fixed shares from a moment on.

A split is an assignment of the resource's timeline with shares (runpod AssignmentShare), made
through `resource_assign` like any re-assignment, so the timeline keeps its history and spend
before the split stays where it was. The rollups and the ledger's usage divide each day's
amounts by the shares (usage/services.py: split_deltas) and add up to the records exactly.

Who may: the people who may assign the resource (lab admins of the allocations' labs,
institution admins), within the rules of attribution: each allocation of the institution,
running on the start day, its funding source not closed, its lab allowed to use the Runpod
account, and no start inside a closed period.

A re-assignment that moves spend already incurred (a split or a retention case's move that
starts before its spend ends) is held to a cost transfer's rules: every month whose spend
moves is open, no funding source gaining or losing spend has that month's invoice issued,
and no allocation is left below zero on the resource or the account. The assignment is
made, the resource's spend measured before and after, and the change refused whole if any
rule fails. One starting before today that a lab admin asks for is a proposal (SpendMove)
that finance or an institution admin, never the proposer, approves, as a lab admin's cost
transfer; from today on it stays one person's.
"""

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from labgov.accounts import access
from labgov.accounts.services import money_deciders
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.money import ZERO
from labgov.funding.models import Allocation, FundingSource
from labgov.runpod.locks import account_lock
from labgov.runpod.models import Assignment, Resource, ResourceKind
from labgov.runpod.services import resource_assign
from labgov.transfers.models import SpendMove, SpendMoveShare
from labgov.transfers.services import Refused, available_to_move, open_months, resource_spent
from labgov.usage.periods import closed_until, month_of

S = SpendMove.State

MAX_SHARES = 6


def split_problems(
    *, actor, resource: Resource, shares: list[tuple[Allocation, Decimal]], starts_at: dt.datetime
) -> list[tuple[str | None, str]]:
    problems: list[tuple[str | None, str]] = []
    managed = access.scope_for(actor).managed_labs
    account = resource.account
    if resource.kind == ResourceKind.ENDPOINT:
        problems.append((None, "Account-wide endpoint spend has no resource to split."))
    if not shares:
        problems.append(("shares", "Name at least one allocation and its share."))
    if len(shares) > MAX_SHARES:
        problems.append(("shares", f"At most {MAX_SHARES} allocations share a resource."))
    if len({a.pk for a, _ in shares}) != len(shares):
        problems.append(("shares", "Name each allocation once."))
    total = sum((p for _, p in shares), Decimal(0))
    if shares and total != 100:
        problems.append(("shares", f"The shares add up to {total}%, not exactly 100%."))
    day = starts_at.date()
    for allocation, percent in shares:
        source = allocation.funding_source
        if not (Decimal(0) < percent <= 100) or percent != percent.quantize(Decimal("0.01")):
            problems.append(
                (
                    "shares",
                    f"{allocation}: a share is a percentage above 0 with at most 2 decimals.",
                )
            )
        if source.institution_id != account.institution_id or source.lab_id not in managed:
            problems.append(("shares", f"{allocation}: you do not manage this allocation's lab."))
            continue
        if account.lab_id is not None and account.lab_id != source.lab_id:
            problems.append(
                (
                    "shares",
                    f"{allocation}: its lab may not use {account.name} (another lab's own "
                    "account).",
                )
            )
        if not allocation.start_date <= day <= allocation.end_date:
            problems.append(
                (
                    "shares",
                    f"{allocation}: not active on {day:%Y-%m-%d} (it runs "
                    f"{allocation.start_date:%Y-%m-%d} to {allocation.end_date:%Y-%m-%d}).",
                )
            )
        if source.status == FundingSource.Status.CLOSED:
            problems.append(("shares", f"{allocation}: its funding source is closed."))
    until = closed_until(account.institution_id)
    if until is not None and starts_at < until:
        problems.append(
            ("starts_at", f"Spend before {until:%Y-%m-%d} is in a closed period; start later.")
        )
    latest = Assignment.objects.filter(resource=resource).order_by("-starts_at", "-id").first()
    if latest is not None and starts_at < latest.starts_at:
        problems.append(
            (
                "starts_at",
                "The shares cannot start before the current assignment "
                f"({latest.starts_at:%Y-%m-%d %H:%M} UTC).",
            )
        )
    return problems


def today_start(now: dt.datetime | None = None) -> dt.datetime:
    """00:00 UTC today: a re-assignment from then on is one person's."""
    return dt.datetime.combine((now or timezone.now()).astimezone(dt.UTC).date(), dt.time(), dt.UTC)


def _ordered(shares: list[tuple[Allocation, Decimal]]) -> list[tuple[Allocation, Decimal]]:
    return sorted(shares, key=lambda s: (-s[1], s[0].pk))


def _names(shares) -> str:
    return ", ".join(f"{p}% {a}" for a, p in shares)


Moves = dict[tuple[int, dt.date], Decimal]


def _measure(resource: Resource, starts_at: dt.datetime) -> dict[tuple[int, dt.date], Decimal]:
    """What each allocation spent on the resource in each open month from `starts_at` on."""
    time_zone = resource.account.institution.time_zone
    first = month_of(starts_at, time_zone)
    spent = {}
    for month in open_months(resource.account.institution_id):
        if month < first:
            break
        for allocation_id, amount in resource_spent(resource=resource, month=month).items():
            spent[(allocation_id, month)] = amount
    return spent


def _moved(before, after) -> Moves:
    return {
        key: after.get(key, ZERO) - before.get(key, ZERO)
        for key in sorted(set(before) | set(after))
        if after.get(key, ZERO) != before.get(key, ZERO)
    }


def moves_problems(*, resource: Resource, moves: Moves) -> list[tuple[str | None, str]]:
    """A cost transfer's checks on what a re-assignment moved (measured after it was made):
    no issued invoice in a month whose spend moved, into or out of its funding source, and
    nothing below zero."""
    institution_id = resource.account.institution_id
    allocations = Allocation.objects.select_related("funding_source").in_bulk(
        {allocation_id for allocation_id, _ in moves}
    )
    problems: list[tuple[str | None, str]] = []
    for month in sorted({month for _, month in moves}):
        sources = sorted({allocations[a].funding_source_id for a, m in moves if m == month})
        for path in settings.LABGOV_TRANSFER_CHECKS:
            problems += import_string(path)(
                institution_id=institution_id, month=month, funding_source_ids=sources
            )
    for (allocation_id, month), delta in moves.items():
        if delta >= 0:
            continue
        allocation = allocations[allocation_id]
        left = available_to_move(
            account=resource.account, allocation=allocation, month=month, resource=resource
        )
        if left < 0:
            problems.append(
                (
                    "shares",
                    f"{allocation} would be left with ${left:,.2f} of {month:%B %Y} spend: "
                    "spend moved out by a cost transfer cannot move again.",
                )
            )
    return problems


def _assign_checked(*, actor, resource, shares, starts_at, note) -> tuple[Assignment, Moves]:
    """Make the assignment, measure what it moved, refuse it whole if a rule fails."""
    account_lock(resource.account_id)  # first: the measure must see what resource_assign sees
    before = _measure(resource, starts_at)
    ordered = _ordered(shares)
    assignment = resource_assign(
        actor=actor,
        resource=resource,
        allocation=ordered[0][0],
        starts_at=starts_at,
        shares=ordered if len(ordered) > 1 else None,
        note=note,
    )
    moves = _moved(before, _measure(resource, starts_at))
    problems = moves_problems(resource=resource, moves=moves)
    if problems:
        raise Refused(problems)
    return assignment, moves


class _DryRun(Exception):
    def __init__(self, moves: Moves):
        self.moves = moves


def _what_it_moves(**kwargs) -> Moves:
    """The moves of the assignment, checked, and nothing written (the savepoint rolls back)."""
    try:
        with transaction.atomic():
            _, moves = _assign_checked(**kwargs)
            raise _DryRun(moves)
    except _DryRun as done:
        return done.moves


def _moves_json(moves: Moves) -> dict[str, str]:
    return {f"{a}:{m:%Y-%m}": str(amount) for (a, m), amount in moves.items()}


def _audit_moved(actor, resource, moves, *, move: SpendMove | None, note: str) -> None:
    audit_record(
        actor=actor,
        action="spend_move.apply",
        target=move if move is not None else resource,
        institution_id=resource.account.institution_id,
        after={"resource_id": resource.pk, "moves": _moves_json(moves)},
        note=note,
    )


@transaction.atomic
def spend_reassign(
    *,
    actor,
    resource: Resource,
    shares: list[tuple[Allocation, Decimal]],
    starts_at: dt.datetime,
    note: str = "",
    origin: str = "",
) -> Assignment | SpendMove:
    """Have these allocations pay for the resource from `starts_at` on (who may, and the
    rules of attribution, are the caller's to check). Made at once, with a cost transfer's
    checks on any spend already incurred that it moves; one starting before today that moves
    such spend and is asked for by someone other than finance or an institution admin is a
    proposal (returned pending) for one of them to approve."""
    institution_id = resource.account.institution_id
    kwargs = {
        "actor": actor,
        "resource": resource,
        "shares": shares,
        "starts_at": starts_at,
        "note": note,
    }
    if starts_at < today_start() and not access.can_transfer_directly(actor, institution_id):
        moves = _what_it_moves(**kwargs)
        if moves:
            return _propose(actor, resource, shares, starts_at, note, origin, moves)
    assignment, moves = _assign_checked(**kwargs)
    if moves:
        _audit_moved(actor, resource, moves, move=None, note=note or f"Moved by {actor}.")
    return assignment


def _propose(actor, resource, shares, starts_at, note, origin, moves) -> SpendMove:
    institution_id = resource.account.institution_id
    move = SpendMove.objects.create(
        institution_id=institution_id,
        resource=resource,
        starts_at=starts_at,
        note=note[:300],
        origin=origin,
        moves=_moves_json(moves),
        proposed_by=actor,
    )
    SpendMoveShare.objects.bulk_create(
        SpendMoveShare(move=move, allocation=a, share_percent=p) for a, p in _ordered(shares)
    )
    audit_record(
        actor=actor,
        action="spend_move.propose",
        target=move,
        institution_id=institution_id,
        after={
            "resource_id": resource.pk,
            "starts_at": starts_at.isoformat(),
            "shares": {str(a.pk): str(p) for a, p in shares},
            "moves": move.moves,
            "origin": origin,
        },
        note=note,
    )
    _notify(
        recipients=[u for u in money_deciders(institution_id) if u.pk != actor.pk],
        move=move,
        subject=f"{actor} proposes paying {resource} by {_names(_ordered(shares))} from "
        f"{starts_at:%Y-%m-%d}, which moves spend already incurred",
        body=note,
    )
    return move


def _notify(*, recipients, move: SpendMove, subject: str, body: str = "") -> None:
    from labgov.notifications.services import notify

    notify(
        recipients=recipients,
        kind="spend_move.proposal" if move.state == S.PENDING else "spend_move.decided",
        subject=subject,
        body=body,
        url=reverse("transfers:list"),
        dedupe_key=f"spend-move:{move.state}:{move.pk}",
        thread_key=f"spend-move:{move.pk}",
    )


def _lock_pending(move: SpendMove, actor) -> SpendMove:
    locked = (
        SpendMove.objects.select_for_update(of=("self",))
        .select_related("resource__account__institution", "proposed_by")
        .get(pk=move.pk)
    )
    if locked.state != S.PENDING:
        raise DomainError(f"Move #{locked.pk} is {locked.get_state_display().lower()}.")
    if actor is None or not access.can_transfer_directly(actor, locked.institution_id):
        raise DomainError("Only finance or an institution admin decides on moves of spend.")
    if locked.proposed_by_id == actor.pk:
        raise DomainError("You cannot approve your own move of spend; someone else must.")
    return locked


@transaction.atomic
def spend_move_approve(*, actor, move: SpendMove, note: str = "") -> SpendMove:
    """Make a proposed back-dated re-assignment, as the approver, if it still holds: the
    rules of attribution as its proposer faced them, and a cost transfer's checks."""
    account_lock(move.resource.account_id)  # first (labgov/runpod/sync.py's lock order)
    locked = _lock_pending(move, actor)
    resource = locked.resource
    shares = [
        (s.allocation, s.share_percent)
        for s in locked.shares.select_related("allocation__funding_source")
    ]
    problems = split_problems(
        actor=locked.proposed_by, resource=resource, shares=shares, starts_at=locked.starts_at
    )
    if problems:
        raise Refused(problems)
    assignment, moves = _assign_checked(
        actor=actor,
        resource=resource,
        shares=shares,
        starts_at=locked.starts_at,
        note=locked.note or f"Back-dated move #{locked.pk}",
    )
    locked.state = S.APPLIED
    locked.assignment = assignment
    locked.decided_by = actor
    locked.decided_at = timezone.now()
    locked.decision_note = (note or "").strip()[:1000]
    locked.save(update_fields=["state", "assignment", "decided_by", "decided_at", "decision_note"])
    _audit_moved(
        actor,
        resource,
        moves,
        move=locked,
        note=f"Proposed by {locked.proposed_by}, approved by {actor}.",
    )
    prefix = locked.origin.split(":")[0]
    if prefix in settings.LABGOV_SPEND_MOVE_ORIGINS:
        import_string(settings.LABGOV_SPEND_MOVE_ORIGINS[prefix])(move=locked, actor=actor)
    _notify(
        recipients=[locked.proposed_by],
        move=locked,
        subject=f"Your move of spend #{locked.pk} was approved by {actor}",
        body=locked.decision_note,
    )
    return locked


@transaction.atomic
def spend_move_reject(*, actor, move: SpendMove, note: str) -> SpendMove:
    note = (note or "").strip()[:1000]
    if not note:
        raise DomainError("Say why the move is rejected.", field="note")
    locked = _lock_pending(move, actor)
    locked.state = S.REJECTED
    locked.decided_by = actor
    locked.decided_at = timezone.now()
    locked.decision_note = note
    locked.save(update_fields=["state", "decided_by", "decided_at", "decision_note"])
    audit_record(
        actor=actor,
        action="spend_move.reject",
        target=locked,
        institution_id=locked.institution_id,
        after={"resource_id": locked.resource_id, "moves": locked.moves},
        note=f"Proposed by {locked.proposed_by}, rejected by {actor}: {note}",
    )
    _notify(
        recipients=[locked.proposed_by],
        move=locked,
        subject=f"Your move of spend #{locked.pk} was rejected by {actor}",
        body=note,
    )
    return locked


@transaction.atomic
def resource_split_set(
    *, actor, resource: Resource, shares: list[tuple[Allocation, Decimal]], starts_at: dt.datetime
) -> Assignment | SpendMove:
    """Pay the resource's spend from `starts_at` on by these allocations in these shares (one
    allocation at 100% ends a split). Audited as the resource's assignment, with the shares.
    Back-dated by a lab admin over spend already incurred: a proposal (spend_reassign)."""
    if not Resource.objects.filter(access.resources_q(actor), pk=resource.pk).exists():
        raise DomainError("You cannot see this resource.")
    problems = split_problems(actor=actor, resource=resource, shares=shares, starts_at=starts_at)
    if problems:
        raise Refused(problems)
    ordered = _ordered(shares)
    return spend_reassign(
        actor=actor,
        resource=resource,
        shares=ordered,
        starts_at=starts_at,
        note=f"Split: {_names(ordered)}" if len(ordered) > 1 else "",
    )
