"""Split funding: a resource paid by several allocations in fixed shares from a moment on.

A split is an assignment of the resource's timeline with shares (runpod AssignmentShare), made
through `resource_assign` like any re-assignment, so the timeline keeps its history and spend
before the split stays where it was. The rollups and the ledger's usage divide each day's
amounts by the shares (usage/services.py: split_deltas) and add up to the records exactly.

Who may: the people who may assign the resource (lab admins of the allocations' labs,
institution admins), within the rules of attribution: each allocation of the institution,
running on the start day, its funding source not closed, its lab allowed to use the Runpod
account, and no start inside a closed period.
"""

import datetime as dt
from decimal import Decimal

from django.db import transaction

from labgov.accounts import access
from labgov.core.errors import DomainError
from labgov.funding.models import Allocation, FundingSource
from labgov.runpod.models import Assignment, Resource, ResourceKind
from labgov.runpod.services import resource_assign
from labgov.transfers.services import Refused
from labgov.usage.periods import closed_until

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


@transaction.atomic
def resource_split_set(
    *, actor, resource: Resource, shares: list[tuple[Allocation, Decimal]], starts_at: dt.datetime
) -> Assignment:
    """Pay the resource's spend from `starts_at` on by these allocations in these shares (one
    allocation at 100% ends a split). Audited as the resource's assignment, with the shares."""
    if not Resource.objects.filter(access.resources_q(actor), pk=resource.pk).exists():
        raise DomainError("You cannot see this resource.")
    problems = split_problems(actor=actor, resource=resource, shares=shares, starts_at=starts_at)
    if problems:
        raise Refused(problems)
    ordered = sorted(shares, key=lambda s: (-s[1], s[0].pk))
    names = ", ".join(f"{p}% {a}" for a, p in ordered)
    return resource_assign(
        actor=actor,
        resource=resource,
        allocation=ordered[0][0],
        starts_at=starts_at,
        shares=ordered if len(ordered) > 1 else None,
        note=f"Split: {names}" if len(ordered) > 1 else "",
    )
