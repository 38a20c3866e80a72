"""Who pays for each billing record, and keeping the ledger's usage equal to it.

A resource's assignments form a timeline; the latest assignment starting at or before a
bucket decides that bucket's allocation. An allocation tag or a rule creates a resource's first
assignment (from its creation, or from when the rule applies); people re-assign from a chosen
time on. No assignment starts inside a period finance has closed.
"""

import bisect
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from django.db import connection
from django.db.models import Max, Min, Q
from django.utils import timezone

from labgov.core.money import ZERO, grouped_sums
from labgov.core.periods import UTC, day_start, hour_floor
from labgov.funding.models import Allocation, FundingSource, LedgerEntry
from labgov.runpod.locks import account_lock_serial
from labgov.runpod.models import (
    Assignment,
    AttributionRule,
    BillingRecord,
    Resource,
    ResourceKind,
    TagClaim,
)

# The start of every resource's history: a first assignment covers all of it.
BEGINNING = dt.datetime(1970, 1, 1, tzinfo=UTC)


class Timeline:
    """Assignments of many resources, answering "which allocation pays this bucket?"."""

    def __init__(self, assignments: Iterable[Assignment]):
        starts: dict[int, list[dt.datetime]] = defaultdict(list)
        allocations: dict[int, list[int | None]] = defaultdict(list)
        for a in sorted(assignments, key=lambda a: (a.resource_id, a.starts_at, a.pk)):
            starts[a.resource_id].append(a.starts_at)
            allocations[a.resource_id].append(a.allocation_id)
        self._starts = dict(starts)
        self._allocations = dict(allocations)

    @classmethod
    def for_resources(cls, resource_ids) -> "Timeline":
        return cls(
            Assignment.objects.filter(resource_id__in=resource_ids).only(
                "id", "resource_id", "starts_at", "allocation_id"
            )
        )

    def allocation_at(self, resource_id: int, moment: dt.datetime) -> int | None:
        starts = self._starts.get(resource_id)
        if not starts:
            return None
        index = bisect.bisect_right(starts, moment) - 1
        return self._allocations[resource_id][index] if index >= 0 else None

    def segments(self, resource_id: int, since: dt.datetime):
        """(start, end, allocation) pieces of the timeline from `since` on; end None = open."""
        bounds = [since] + [s for s in self._starts.get(resource_id, []) if s > since]
        for i, start in enumerate(bounds):
            end = bounds[i + 1] if i + 1 < len(bounds) else None
            yield start, end, self.allocation_at(resource_id, start)


def _rule_matches(rule: AttributionRule, resource: Resource) -> bool:
    if rule.kind == AttributionRule.Kind.ACCOUNT:
        return True
    if rule.kind == AttributionRule.Kind.NAME_PREFIX:
        return bool(rule.pattern) and resource.name.startswith(rule.pattern)
    if rule.kind == AttributionRule.Kind.TEMPLATE:
        return bool(rule.pattern) and resource.template_id == rule.pattern
    if rule.kind == AttributionRule.Kind.RESOURCE_ID:
        return bool(rule.pattern) and resource.runpod_id == rule.pattern
    if rule.kind == AttributionRule.Kind.SUB_ACCOUNT:
        return bool(rule.pattern) and (resource.details or {}).get("sub_account_id") == (
            rule.pattern
        )
    if rule.kind in (AttributionRule.Kind.ENV_VAR, AttributionRule.Kind.TAG):
        # A FOCUS resource's Tags are its env (labgov/runpod/focus.py).
        name, _, value = rule.pattern.partition("=")
        return bool(name) and str((resource.env or {}).get(name)) == value
    return False


def rule_for(resource: Resource, rules: list[AttributionRule]) -> AttributionRule | None:
    """The rule that decides a resource: by kind precedence, then the longest pattern."""
    for kind in AttributionRule.PRECEDENCE:
        matching = [r for r in rules if r.kind == kind and _rule_matches(r, resource)]
        if matching:
            return max(matching, key=lambda r: (len(r.pattern), -r.pk))
    return None


TAG_ENV = "LABGOV_ALLOCATION"
UNKNOWN_TAG = (
    "no allocation has this tag (LABGOV_ALLOCATION takes the tag code shown "
    "on the allocation's page, not its number)"
)


def tag_of(resource: Resource) -> str | None:
    """The allocation tag in a resource's environment, if it carries one."""
    value = (resource.env or {}).get(TAG_ENV)
    value = str(value).strip() if value is not None else ""
    return value or None


def tag_verdicts(account, tags: set[str], today: dt.date) -> dict[str, tuple[int | None, str]]:
    """{tag: (allocation id, "") when honoured, else (None, why not)}. A tag is honoured only
    for an active allocation whose lab may use the account: the lab's own account, or an
    institution-wide one of its institution. The reasons never name another lab's allocation."""
    found = {
        a.tag_code: a
        for a in Allocation.objects.filter(
            tag_code__in=tags, funding_source__institution_id=account.institution_id
        ).select_related("funding_source")
    }
    verdicts = {}
    for tag in tags:
        allocation = found.get(tag)
        if allocation is None:
            verdicts[tag] = (None, UNKNOWN_TAG)
        elif account.lab_id is not None and account.lab_id != allocation.funding_source.lab_id:
            verdicts[tag] = (
                None,
                "the allocation's lab may not use this Runpod account (it is "
                "another lab's own account)",
            )
        elif not allocation.start_date <= today <= allocation.end_date:
            verdicts[tag] = (
                None,
                "the allocation is not active (it runs "
                f"{allocation.start_date:%Y-%m-%d} to {allocation.end_date:%Y-%m-%d})",
            )
        elif allocation.funding_source.status == FundingSource.Status.CLOSED:
            verdicts[tag] = (None, "the allocation's funding source is closed")
        else:
            verdicts[tag] = (allocation.pk, "")
    return verdicts


CLAIM_REFUSALS = {
    "pending": (
        "the tag waits for the allocation's holder or a lab admin to confirm it (on a Runpod "
        "account several labs share, anyone on the team can read and copy a tag)"
    ),
    "rejected": "the allocation's holder or a lab admin rejected this tag",
    "confirmed": "",
}


def _claims_decided(account, resources) -> dict[tuple[int, int], str]:
    return {
        (resource_id, allocation_id): status
        for resource_id, allocation_id, status in TagClaim.objects.filter(
            resource__in=[r.pk for r in resources]
        ).values_list("resource_id", "allocation_id", "status")
    }


def assignment_start(
    resource: Resource, since: dt.datetime, closed_until: dt.datetime | None
) -> dt.datetime:
    """Where an assignment that applies from `since` begins for a resource: at `since`, or at
    the hour the resource was created in when that came later (its buckets are its own), and
    never inside a period finance has closed."""
    start = since
    created = resource.created_at_runpod
    if created is not None and created >= since:
        start = hour_floor(created)
    if closed_until is not None and start < closed_until:
        start = closed_until
    return start


def rules_apply(*, account, resource_ids: Iterable[int] | None = None) -> list[int]:
    """Give every unassigned resource of the account (of `resource_ids`, when given: those
    just created, the others having been through this already) its first assignment: from
    the allocation tag in its environment (`LABGOV_ALLOCATION=<tag code>`) when that is
    honoured, else from the deciding rule, from when the rule applies. A resource whose tag is
    refused gets no assignment: it stays in the unattributed queue with the reason. Returns
    the ids of the resources assigned."""
    from labgov.usage.periods import closed_until

    # Two writers must not both give a resource its first assignment.
    account_lock_serial(account.pk)
    unassigned = Resource.objects.filter(account=account, assignments__isnull=True).exclude(
        kind=ResourceKind.ENDPOINT
    )
    if resource_ids is not None:
        unassigned = unassigned.filter(pk__in=list(resource_ids))
    rules = list(AttributionRule.objects.filter(account=account, is_active=True))
    if not rules:
        # Without a rule only an allocation tag assigns: only a resource carrying one, or
        # with a refusal to clear, has anything to change. An account keeps every resource
        # it ever had, and reading all its unassigned ones each sync cost 3.07 s and 206 MB
        # of memory at 50,000.
        unassigned = unassigned.filter(Q(env__has_key=TAG_ENV) | ~Q(tag_refusal=""))
    ids = list(unassigned.order_by("pk").values_list("pk", flat=True))
    if not ids:
        return []
    closed = closed_until(account.institution_id)
    assigned = []
    for i in range(0, len(ids), RULES_APPLY_BATCH):  # memory bounded by the batch
        batch = list(Resource.objects.filter(pk__in=ids[i : i + RULES_APPLY_BATCH]).order_by("pk"))
        assigned += _first_assignments(account, batch, rules, closed)
    return assigned


# Resources read at once by rules_apply.
RULES_APPLY_BATCH = 2000


def _first_assignments(account, unassigned: list[Resource], rules, closed) -> list[int]:
    """rules_apply for some of the account's unassigned resources."""
    tags = {t for r in unassigned if (t := tag_of(r)) is not None}
    verdicts = tag_verdicts(account, tags, timezone.now().astimezone(UTC).date()) if tags else {}
    new = []
    refused = []
    claims = []
    decided = _claims_decided(account, unassigned) if tags and account.lab_id is None else {}
    for resource in unassigned:
        tag = tag_of(resource)
        allocation_id, refusal = verdicts[tag] if tag is not None else (None, "")
        if allocation_id is not None and account.lab_id is None:
            # A shared account: the tag is a claim the allocation's holder or a lab admin
            # confirms (TagClaim); until then the resource's spend is unattributed.
            status = decided.get((resource.pk, allocation_id), TagClaim.Status.PENDING)
            if status == TagClaim.Status.PENDING:
                claims.append(TagClaim(resource=resource, allocation_id=allocation_id))
            refusal = CLAIM_REFUSALS[status]
            allocation_id = None
        if resource.tag_refusal != refusal:
            resource.tag_refusal = refusal
            refused.append(resource)
        if tag is not None:
            if allocation_id is not None:
                new.append(
                    Assignment(
                        resource=resource,
                        allocation_id=allocation_id,
                        starts_at=assignment_start(resource, BEGINNING, closed),
                        source=Assignment.Source.RULE,
                        note="LABGOV_ALLOCATION tag",
                    )
                )
            continue
        rule = rule_for(resource, rules)
        if rule is not None:
            new.append(
                Assignment(
                    resource=resource,
                    allocation_id=rule.allocation_id,
                    starts_at=assignment_start(resource, rule.starts_at, closed),
                    source=Assignment.Source.RULE,
                    rule=rule,
                )
            )
    Assignment.objects.bulk_create(new)
    TagClaim.objects.bulk_create(claims, ignore_conflicts=True)
    Resource.objects.bulk_update(refused, ["tag_refusal"], batch_size=500)
    # One UPDATE per allocation, not per resource: a rule made on an account with 50,000
    # resources it matched sent 50,000 of them.
    by_allocation: dict[int, list[int]] = defaultdict(list)
    for assignment in new:
        by_allocation[assignment.allocation_id].append(assignment.resource_id)
    for allocation_id, resource_ids in by_allocation.items():
        Resource.objects.filter(pk__in=resource_ids).update(current_allocation_id=allocation_id)
    return [a.resource_id for a in new]


def timeline_sql(resource: str) -> str:
    """Timeline in SQL: a resource's assignments as two arrays, `starts` and `allocations`, in
    Timeline's order, for `LEFT JOIN LATERAL (...) alias ON true` beside the resource row
    (`resource`: its alias; one index probe of assignments per resource). `allocation_at_sql`
    reads a bucket's allocation from them as Timeline.allocation_at does, by binary search.

    Each record of a statement writing thousands looks only at its own resource's row: a
    range join of the records to timeline pieces was planned as a nested loop over every
    piece of the account, a first sync with rules took 66.6 s instead of 11
    (bench/sync_bench.py --rules)."""
    # Only an alias written in labgov's own SQL goes into the text.
    return f"""(
        SELECT array_agg(a.starts_at ORDER BY a.starts_at, a.id) AS starts,
               array_agg(a.allocation_id ORDER BY a.starts_at, a.id) AS allocations
        FROM runpod_assignment a WHERE a.resource_id = {resource}.id
    )"""  # noqa: S608


def allocation_at_sql(timeline: str, moment: str) -> str:
    """The SQL of the allocation that pays `moment` on a `timeline_sql` row (alias
    `timeline`): the latest assignment starting at or before it (width_bucket counts the
    starts at or before it, ties in id order), NULL before the first or without any."""
    return f"{timeline}.allocations[width_bucket({moment}, {timeline}.starts)]"


def reattribute(*, resource_ids: list[int], since: dt.datetime) -> set[dt.date]:
    """Recompute the allocation of the resources' records from `since` on, one UPDATE per piece
    of each billed resource's timeline. Returns the days whose usage may have moved, for
    `usage_reconcile`."""
    # Only resources with records from `since` on have any to move. An account-wide rule on
    # an account that has had 50,000 resources sent an UPDATE for each piece of each one's
    # timeline: 74 s here, 85 s for the whole rule, past the web server's 60 s timeout.
    billed = set(
        BillingRecord.objects.filter(resource_id__in=resource_ids, bucket_start__gte=since)
        .values_list("resource_id", flat=True)
        .distinct()
    )
    timeline = Timeline.for_resources(sorted(billed))
    for resource_id in sorted(billed):
        for start, end, allocation_id in timeline.segments(resource_id, since):
            records = BillingRecord.objects.filter(resource_id=resource_id, bucket_start__gte=start)
            if end is not None:
                records = records.filter(bucket_start__lt=end)
            # exclude(None) keeps the non-null rows; exclude(X) keeps nulls and other values.
            records.exclude(allocation_id=allocation_id).update(allocation_id=allocation_id)
    span = BillingRecord.objects.filter(
        resource_id__in=resource_ids, bucket_start__gte=since
    ).aggregate(first=Min("bucket_start"), last=Max("bucket_start"))
    if span["first"] is None:
        return set()
    return days_between(span["first"], span["last"] + dt.timedelta(seconds=1))


def days_between(start: dt.datetime, end: dt.datetime) -> set[dt.date]:
    """The UTC days that [start, end) touches."""
    first = start.astimezone(UTC).date()
    last = (end - dt.timedelta(microseconds=1)).astimezone(UTC).date()
    return {first + dt.timedelta(days=i) for i in range((last - first).days + 1)}


def ledger_source(account) -> str:
    return f"runpod-account:{account.pk}"


def usage_reconcile(*, account, days: Iterable[dt.date], sums=None) -> int:
    """Make the ledger's usage from this account, per allocation and UTC day, equal the
    account's attributed billing records of that day, by posting the differences (the ledger
    is append-only: corrections are new entries). `sums` are the records of these days summed
    already (usage/services.py: span_sums), when the caller has them. Returns the number of
    entries posted.

    Runs in the caller's transaction, under the account row's lock (taken here if the caller
    has not): two writers reading the same posted usage would both post the difference.
    """
    from labgov.usage.services import span_sums

    days = sorted(set(days))
    if not days:
        return 0
    account_lock_serial(account.pk)
    if sums is None:
        sums = span_sums(account=account, days=days)
    elif sums.days != days:
        raise ValueError("the sums are of other days than the usage reconciled")
    start, end, wanted_days = sums.start, sums.end, set(days)
    # Split funding is in the sums: the same parts the rollups give each share.
    desired = sums.usage()
    entries = LedgerEntry.objects.filter(
        source=ledger_source(account),
        kind=LedgerEntry.Kind.USAGE,
        occurred_at__gte=start,
        occurred_at__lt=end,
    )
    posted = _by_allocation_day(
        grouped_sums(entries, ["allocation_id", "occurred_at"], "amount_usd"), wanted_days
    )
    keys = sorted(
        k for k in set(desired) | set(posted) if desired.get(k, ZERO) != posted.get(k, ZERO)
    )
    if not keys:
        return 0
    funding_of = dict(
        Allocation.objects.filter(pk__in={k[0] for k in keys}).values_list(
            "pk", "funding_source_id"
        )
    )
    LedgerEntry.objects.bulk_create(
        LedgerEntry(
            funding_source_id=funding_of[allocation_id],
            allocation_id=allocation_id,
            kind=LedgerEntry.Kind.USAGE,
            amount_usd=desired.get((allocation_id, day), ZERO)
            - posted.get((allocation_id, day), ZERO),
            occurred_at=dt.datetime.combine(day, dt.time(), tzinfo=UTC),
            memo=f"Runpod usage on {day:%Y-%m-%d} ({account.name})",
            source=ledger_source(account),
        )
        for allocation_id, day in keys
    )
    return len(keys)


def _by_allocation_day(sums: dict[tuple, Decimal], wanted_days: set[dt.date]) -> dict:
    result: dict[tuple[int, dt.date], Decimal] = {}
    for (allocation_id, moment), total in sums.items():
        day = moment.astimezone(UTC).date() if isinstance(moment, dt.datetime) else moment
        if day in wanted_days:
            result[(allocation_id, day)] = result.get((allocation_id, day), ZERO) + total
    return result


def unattributed_refresh(*, account=None, resource_ids=None) -> int:
    """Recompute `Resource.unattributed_usd` (spend nobody owns) from the billing records, for
    an account's resources or the given ones. Returns how many changed."""
    resources = (
        Resource.objects.filter(account=account)
        if account is not None
        else Resource.objects.filter(pk__in=resource_ids)
    )
    records = BillingRecord.objects.filter(allocation__isnull=True, resource__in=resources)
    totals = grouped_sums(records, ["resource_id"], "total_usd")
    changed = []
    for resource in resources.only("id", "unattributed_usd"):
        value = totals.get((resource.pk,), ZERO)
        if resource.unattributed_usd != value:
            resource.unattributed_usd = value
            changed.append(resource)
    Resource.objects.bulk_update(changed, ["unattributed_usd"], batch_size=500)
    return len(changed)


def span_unattributed(*, account, days: Iterable[dt.date]) -> dict[int, Decimal]:
    """{resource id: the spend of its unattributed billing records of these UTC days}: what a
    writer reads before it rewrites the days, for `providers.span_written` after."""
    days = sorted(set(days))
    if not days:
        return {}
    records = BillingRecord.objects.filter(
        resource__account=account,
        allocation__isnull=True,
        bucket_start__gte=day_start(days[0]),
        bucket_start__lt=day_start(days[-1] + dt.timedelta(days=1)),
    )
    return {
        resource_id: total
        for (resource_id,), total in grouped_sums(records, ["resource_id"], "total_usd").items()
        if total
    }


def unattributed_delta(before: dict[int, Decimal], after: dict[int, Decimal]) -> dict[int, Decimal]:
    """{resource id: after less before} of two span_unattributed-shaped readings, for
    `unattributed_move`: the resources whose unattributed spend moved."""
    moved = {pk: after.get(pk, ZERO) - before.get(pk, ZERO) for pk in before.keys() | after}
    return {pk: amount for pk, amount in moved.items() if amount}


def unattributed_move(moved: dict[int, Decimal]) -> int:
    """Under the account's lock, after a writer rewrote the billing records of some days:
    move each resource's `unattributed_usd` by what its unattributed records of those days
    sum to now less what they summed to before (`moved`; providers.span_written gives it).
    Its records of other days did not change, so this is the figure unattributed_refresh
    would compute, without reading them (a resource of many months reads one). Returns how
    many changed."""
    moved = {pk: amount for pk, amount in moved.items() if amount}
    if not moved:
        return 0
    if connection.vendor == "postgresql":
        # One statement, the sums exact in numeric: bulk_update's CASE of one WHEN a row took
        # ~80 ms of Python for a day's 533 resources in bench/sync_bench.py, 7 s a sync.
        ids = sorted(moved)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Resource._meta.db_table} AS r"  # noqa: S608 - the model's own table
                " SET unattributed_usd = r.unattributed_usd + d.amount"
                " FROM unnest(%s::bigint[], %s::numeric[]) AS d(id, amount) WHERE r.id = d.id",
                [ids, [moved[pk] for pk in ids]],
            )
            return cursor.rowcount
    changed = list(Resource.objects.filter(pk__in=moved).only("id", "unattributed_usd"))
    for resource in changed:
        resource.unattributed_usd += moved[resource.pk]
    Resource.objects.bulk_update(changed, ["unattributed_usd"], batch_size=500)
    return len(changed)
