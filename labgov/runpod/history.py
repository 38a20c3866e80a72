"""When things stopped and went idle, read from the billing history labgov holds rather than
from when labgov first saw them: a pod first synced while stopped has been stopped since its
last hour of compute, not since the sync.

Where the history does not reach back that far, all that is known is a bound: it happened
before the earliest billing hour labgov holds for the account. `Before` carries that bound
through tables and alerts, so it reads "before 21 October 2026" and still sorts as a time.
"""

import datetime as dt

from django.db.models import Case, Min, OuterRef, Q, Subquery, When

from labgov.core.compiled import CompiledValues
from labgov.runpod.models import AccountBillingRecord, BillingRecord, Resource, ResourceKind
from labgov.runpod.types import PodStatus

# A billing hour in which the resource ran: GPU or CPU time was charged.
COMPUTE_Q = Q(gpu_usd__gt=0) | Q(cpu_usd__gt=0)


class Before(dt.datetime):
    """A moment known only as an upper bound: the event happened before it."""

    @classmethod
    def of(cls, moment: dt.datetime) -> "Before":
        return cls.combine(moment.date(), moment.timetz())


def since_words(moment: dt.datetime | None) -> str:
    """ "2026-11-08 18:00 UTC", or "before 21 October 2026" when only a bound is known."""
    if moment is None:
        return "an unknown time"
    if isinstance(moment, Before):
        return f"before {moment.day} {moment:%B %Y}"
    return f"{moment.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"


def last_compute_end(resource: str = "pk") -> Subquery:
    """The end of the resource's latest billing hour with compute charged (None if none).
    An index range read backwards from its newest record, stopping at the first match."""
    records = BillingRecord.objects.filter(COMPUTE_Q, resource=OuterRef(resource))
    return Subquery(records.order_by("-bucket_start").values("bucket_end")[:1])


def first_billed(resource: str = "pk") -> Subquery:
    """The start of the resource's earliest billing record labgov holds (one index probe)."""
    records = BillingRecord.objects.filter(resource=OuterRef(resource))
    return Subquery(records.order_by("bucket_start").values("bucket_start")[:1])


def history_start(account: str = "account_id") -> Subquery:
    """The earliest billing hour labgov holds for the resource's account."""
    records = AccountBillingRecord.objects.filter(account=OuterRef(account))
    return Subquery(records.order_by("bucket_start").values("bucket_start")[:1])


def history_starts(account_ids) -> dict[int, dt.datetime]:
    """The earliest billing hour labgov holds per account, in one query."""
    rows = (
        AccountBillingRecord.objects.filter(account_id__in=account_ids)
        .values("account_id")
        .annotate(first=Min("bucket_start"))
        .values_list("account_id", "first")
    )
    return dict(rows)


def stopped_at(
    *,
    last_compute: dt.datetime | None,
    first_record: dt.datetime | None,
    history_from: dt.datetime | None,
    status_changed_at: dt.datetime | None,
    first_seen_at: dt.datetime | None,
) -> dt.datetime | None:
    """When a stopped pod stopped: the end of its last hour of compute; failing that, a stop
    labgov saw happen (a status change after its first sighting); failing that, `Before` the
    start of the history labgov holds (the pod's own, if the account's is unknown)."""
    if last_compute is not None:
        return last_compute
    if status_changed_at and first_seen_at and status_changed_at > first_seen_at:
        return status_changed_at
    bound = history_from or first_record
    return Before.of(bound) if bound is not None else None


def volumes_last_used(institution_id: int) -> dict[tuple[int, str], dt.datetime]:
    """(account id, network volume id) → the end of the latest billing hour in which a pod
    mounting that volume was billed for compute. One query for the institution: each pod
    that is not running now reads its records backwards from the newest to its last hour of
    compute (running pods use their volume now and need no history)."""
    pods = (
        Resource.objects.filter(account__institution_id=institution_id, kind=ResourceKind.POD)
        .exclude(network_volume_id="")
        .exclude(gone_at__isnull=True, status__in=(PodStatus.RUNNING, PodStatus.STARTING))
        .annotate(last_compute=last_compute_end())
        .filter(last_compute__isnull=False)
        .values_list("account_id", "network_volume_id", "last_compute")
    )
    last_used: dict[tuple[int, str], dt.datetime] = {}
    for account_id, volume_id, moment in pods:
        key = (account_id, volume_id)
        if key not in last_used or moment > last_used[key]:
            last_used[key] = moment
    return last_used


def is_unseen_stop(kind, status, volume_disk_gb, status_changed_at, first_seen_at) -> bool:
    """A stopped pod with a volume disk that labgov first saw already stopped (its status has
    not changed since): when it stopped is in its billing, not in what labgov saw."""
    return (
        kind == ResourceKind.POD
        and status == PodStatus.EXITED
        and volume_disk_gb > 0
        and status_changed_at is not None
        and first_seen_at is not None
        and status_changed_at <= first_seen_at
    )


def _stop_history_query(ids):
    records = BillingRecord.objects.filter(
        COMPUTE_Q, resource=OuterRef("pk"), bucket_start__lt=OuterRef("first_seen_at")
    )
    last_compute = Subquery(records.order_by("-bucket_start").values("bucket_end")[:1])
    return (
        Resource.objects.filter(pk__any_of=ids)
        .annotate(
            last_compute_at=last_compute,
            first_billed_at=first_billed(),
            history_from=history_start(),
        )
        .values_list("pk", "last_compute_at", "first_billed_at", "history_from")
    )


# Compiled once per process: the page that reads it runs it on every request with stops.
_STOP_HISTORY = CompiledValues(_stop_history_query)


def stop_histories(ids) -> dict[int, tuple]:
    """pk → (last compute end, first billed, history start) of the unseen stops among ids
    (`is_unseen_stop`), what `stopped_at` needs: their last hour of compute before their first
    sighting (an index range no longer than the history fetched before it), their first
    record, and their account's history start. One query, and none when there are no ids: a
    page's query of what runs and idles stays free of the three subqueries over every month of
    billing, which PostgreSQL planned on each request whether or not a row needed them."""
    ids = list(ids)
    if not ids:
        return {}
    return {pk: tuple(rest) for pk, *rest in _STOP_HISTORY.rows(ids=ids)}


def with_billed_range(queryset):
    """Annotate resources seen only in billing with their first and last billed hour (two
    index probes each; nothing for the others)."""
    billing_only = Q(status="") & ~Q(kind=ResourceKind.ENDPOINT)
    records = BillingRecord.objects.filter(resource=OuterRef("pk"))
    last_billed = Subquery(records.order_by("-bucket_start").values("bucket_start")[:1])
    return queryset.annotate(
        first_billed_at=Case(When(billing_only, then=first_billed())),
        last_billed_at=Case(When(billing_only, then=last_billed)),
    )


def volume_uses(institution_id: int):
    """What the institution's pods say about their network volumes: the (account id, volume
    id) keys a running pod mounts now; when each was last used by a pod billed for compute
    (`volumes_last_used`); and stops of mounting pods labgov saw happen (a known last use even
    before its billing arrives)."""
    last_used = volumes_last_used(institution_id)
    # Pods that mount a volume now: running ones use it; a stop labgov saw happen (after its
    # first sighting) is a known last use even before its billing arrives.
    in_use: set[tuple[int, str]] = set()
    observed: dict[tuple[int, str], dt.datetime] = {}
    pods = Resource.objects.filter(
        account__institution_id=institution_id, kind=ResourceKind.POD
    ).exclude(network_volume_id="")
    for account_id, volume_id, status, changed, first_seen, gone in pods.values_list(
        "account_id",
        "network_volume_id",
        "status",
        "status_changed_at",
        "first_seen_at",
        "gone_at",
    ):
        key = (account_id, volume_id)
        if gone is None and status in (PodStatus.RUNNING, PodStatus.STARTING):
            in_use.add(key)
            continue
        # It ran until it vanished, or labgov saw it stop; a terminated pod may have been
        # stopped long before, so only its billing tells.
        moment = {PodStatus.RUNNING: gone, PodStatus.EXITED: changed}.get(status)
        if moment is not None and first_seen is not None and moment > first_seen:
            observed[key] = max(observed.get(key, moment), moment)
    return in_use, last_used, observed


def idle_since(volume, key, last_used, observed) -> dt.datetime | None:
    """Since when nothing has used the volume: the latest exact moment known (a pod mounting
    it last billed for compute, a stop of such a pod labgov saw, the volume's creation, or its
    first billing hour when that is later than the account's history start); failing those,
    `Before` the start of the history labgov holds; failing that, its first sighting."""
    history_from = volume.history_from
    exact = [last_used.get(key), observed.get(key), volume.created_at_runpod]
    if volume.first_billed_at and history_from and volume.first_billed_at > history_from:
        exact.append(volume.first_billed_at)  # created within the history: billed from then
    known = [moment for moment in exact if moment is not None]
    if known:
        return max(known)
    bound = history_from or volume.first_billed_at
    return Before.of(bound) if bound is not None else volume.first_seen_at
