"""Which volumes a retention policy reaches today, and why: the one judgement that the
preview, the evaluation and a case opened by hand all share.

A volume is a network volume, or a stopped pod's volume disk when the policy counts those. Its
due date is the earliest of: its funding source's end plus the funding grace; its owner's
membership end plus the membership grace; the day it went idle (judged from billing history,
as the idle-volume alert judges it) plus the idle grace.
"""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from labgov.accounts.models import LAB_ROLES, Membership
from labgov.retention.models import Reason
from labgov.retention.policies import Resolver
from labgov.runpod.history import (
    first_billed,
    history_start,
    idle_since,
    last_compute_end,
    since_words,
    stopped_at,
    volume_uses,
)
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.pricing import network_volume_monthly_usd, pod_storage_monthly_usd
from labgov.runpod.types import PodStatus


@dataclass
class Candidate:
    resource: Resource
    lab_id: int | None
    reason: str
    detail: str
    due_date: dt.date
    size_gb: int
    monthly_cost_usd: Decimal
    owner_id: int | None
    payer_id: int | None
    funding_source_id: int | None
    funding_ends_on: dt.date | None = None

    @property
    def reason_label(self) -> str:
        """The reason as it stands today: a grant that has not ended yet "ends"."""
        if (
            self.reason == Reason.FUNDING_ENDED
            and self.funding_ends_on is not None
            and self.funding_ends_on >= timezone.now().date()
        ):
            return "Funding ends"
        return Reason(self.reason).label

    def opens_on(self, policy) -> dt.date:
        """The day its case opens: the policy's first warning step before the due date, or,
        when its money ends, the first step before the money's end, whatever grace follows
        (people hear of a grant's end, and can act on each volume, before it ends)."""
        ahead = dt.timedelta(days=max(policy.warning_steps))
        day = self.due_date - ahead
        if self.reason == Reason.FUNDING_ENDED and self.funding_ends_on is not None:
            day = min(day, self.funding_ends_on - ahead)
        return day

    @property
    def label(self) -> str:
        kind = "Network volume" if self.resource.kind == ResourceKind.NETWORK_VOLUME else "Pod"
        return f"{kind} {self.resource.label}"


def lab_of(resource: Resource) -> int | None:
    if resource.current_allocation_id is not None:
        return resource.current_allocation.funding_source.lab_id
    return resource.account.lab_id


def storage_of(resource: Resource) -> tuple[int, Decimal]:
    """(GB, $/month) of the data a case is about."""
    if resource.kind == ResourceKind.NETWORK_VOLUME:
        return resource.size_gb, network_volume_monthly_usd(
            size_gb=resource.size_gb, volume_type=resource.volume_type
        )
    return resource.volume_disk_gb, pod_storage_monthly_usd(
        status=PodStatus.EXITED, container_disk_gb=0, volume_disk_gb=resource.volume_disk_gb
    )


def storage_resources(institution_id: int):
    """Network volumes and stopped pods with a volume disk, present on Runpod."""
    return (
        Resource.objects.present()
        .filter(account__institution_id=institution_id, account__is_active=True)
        .filter(
            Q(kind=ResourceKind.NETWORK_VOLUME)
            | Q(kind=ResourceKind.POD, status=PodStatus.EXITED, volume_disk_gb__gt=0)
        )
        .select_related("account", "current_allocation__funding_source")
        .defer("env", "details")
        .annotate(
            first_billed_at=first_billed(),
            history_from=history_start(),
            last_compute_at=last_compute_end(),
        )
    )


def _membership_ends(institution_id: int) -> dict[tuple[int, int], dt.date | None]:
    """(user, lab) → the last day of their lab membership (None: open-ended)."""
    ends: dict[tuple[int, int], dt.date | None] = {}
    rows = Membership.objects.filter(institution_id=institution_id, role__in=LAB_ROLES).values(
        "user_id", "lab_id", "end_date"
    )
    for row in rows:
        key = (row["user_id"], row["lab_id"])
        if key in ends and ends[key] is None:
            continue
        end = row["end_date"]
        ends[key] = None if end is None else max(end, ends.get(key) or end)
    return ends


def candidates(
    institution_id: int,
    *,
    resolver: Resolver | None = None,
    lab_id: int | None = None,
    policy=None,
    resource_ids=None,
) -> list[Candidate]:
    """Every storage resource of the institution with the reason and date it falls due under
    its lab's policy (or under `policy` for the resources of `lab_id`, for a preview), whether
    or not that date is near."""
    resolver = resolver or Resolver(institution_id)
    resources = storage_resources(institution_id)
    if resource_ids is not None:
        resources = resources.filter(pk__in=resource_ids)
    in_use, last_used, observed = volume_uses(institution_id)
    members = _membership_ends(institution_id)
    found = []
    for resource in resources:
        lab = lab_of(resource)
        if policy is not None and lab != lab_id:
            continue
        rules = policy if policy is not None else resolver.for_lab(lab)
        if resource.kind == ResourceKind.POD and not rules.include_stopped_pod_disks:
            continue
        allocation = resource.current_allocation
        reasons = []
        if allocation is not None:
            source = allocation.funding_source
            due = source.end_date + dt.timedelta(days=rules.funding_grace_days)
            reasons.append(
                (due, Reason.FUNDING_ENDED, f"{source.name} ends {source.end_date:%Y-%m-%d}")
            )
            end = members.get((allocation.user_id, source.lab_id))
            if end is not None:
                reasons.append(
                    (
                        end + dt.timedelta(days=rules.membership_grace_days),
                        Reason.OWNER_LEFT,
                        f"{allocation.user}'s membership ends {end:%Y-%m-%d}",
                    )
                )
        since = _idle_since(resource, in_use, last_used, observed)
        if since is not None:
            reasons.append(
                (
                    since.date() + dt.timedelta(days=rules.idle_grace_days),
                    Reason.IDLE,
                    f"idle since {since_words(since)}",
                )
            )
        if not reasons:
            continue
        due, reason, detail = min(reasons, key=lambda r: r[0])
        gb, monthly = storage_of(resource)
        found.append(
            Candidate(
                resource=resource,
                lab_id=lab,
                reason=reason,
                detail=detail,
                due_date=due,
                size_gb=gb,
                monthly_cost_usd=monthly,
                owner_id=allocation.user_id if allocation else None,
                payer_id=allocation.pk if allocation else None,
                funding_source_id=allocation.funding_source_id if allocation else None,
                funding_ends_on=allocation.funding_source.end_date if allocation else None,
            )
        )
    return found


def _idle_since(resource, in_use, last_used, observed) -> dt.datetime | None:
    if resource.kind == ResourceKind.NETWORK_VOLUME:
        key = (resource.account_id, resource.runpod_id)
        if key in in_use:
            return None
        return idle_since(resource, key, last_used, observed)
    return stopped_at(
        last_compute=resource.last_compute_at,
        first_record=resource.first_billed_at,
        history_from=resource.history_from,
        status_changed_at=resource.status_changed_at,
        first_seen_at=resource.first_seen_at,
    )
