"""Removing a connection made by mistake (the same Runpod account connected twice, a wrong
key) together with everything its syncs recorded.

What goes: its resources, billing records, Runpod's account totals, attribution rules and
assignments, sync runs, spend rollups and the alerts about it. What stays: the ledger and the
audit log, which are append-only. The ledger usage the connection posted is not deleted but
reversed: for every allocation and day a new entry of the opposite amount, dated the same
day, so each day nets to zero and the history shows what was counted and taken back. That is
also why a removal is refused when any of it lies in a period finance has closed: the
reversals would change a closed month. A connection that labgov provisioned through is never
removed (its requests refer to it): deactivate it instead.
"""

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Min, ProtectedError, RestrictedError
from django.db.models.functions import TruncDay
from django.utils import timezone

from labgov.accounts import access
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.money import grouped_sums
from labgov.core.periods import UTC
from labgov.funding.models import LedgerEntry
from labgov.runpod.attribution import ledger_source
from labgov.runpod.models import (
    AccountBillingRecord,
    Assignment,
    AttributionRule,
    BillingRecord,
    Resource,
    RunpodAccount,
    SyncRun,
    TagClaim,
)

ZERO = Decimal(0)


@dataclass
class RemovalSummary:
    """What removing a connection takes away, and why it may not."""

    resources: int
    billing_records: int
    billed_usd: Decimal
    ledger_usd: Decimal  # the usage it posted, which the removal reverses
    account_totals: int
    rules: int
    assignments: int
    sync_runs: int
    alerts: int
    rollups: int
    earliest: dt.datetime | None
    blockers: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.blockers


# What removal deletes with the connection; anything else that refers to it (provisioning
# requests, and whatever later apps add) keeps it, found through the relations themselves so
# the sync's app imports none of the apps built on it.
_REMOVED_WITH_IT = {"runpod", "usage", "alerts"}


def _outside_references(account: RunpodAccount) -> list[str]:
    found = []
    for relation in RunpodAccount._meta.get_fields(include_hidden=True):
        if not (relation.auto_created and relation.is_relation and not relation.concrete):
            continue
        model = relation.related_model
        if model._meta.app_label in _REMOVED_WITH_IT:
            continue
        count = model._default_manager.filter(**{relation.field.name: account}).count()
        count += (
            model._default_manager.filter(resources__account=account)
            .exclude(**{relation.field.name: account})
            .distinct()
            .count()
            if any(f.name == "resources" for f in model._meta.many_to_many)
            else 0
        )
        if count:
            name = model._meta.verbose_name if count == 1 else model._meta.verbose_name_plural
            found.append(
                f"{count} {name} went through it; their history refers to it."
                " Deactivate it instead."
            )
    return found


def _ledger_usage(account):
    return LedgerEntry.objects.filter(source=ledger_source(account), kind=LedgerEntry.Kind.USAGE)


def account_removal_summary(account: RunpodAccount) -> RemovalSummary:
    from labgov.alerts.models import Alert
    from labgov.usage.models import DailySpend, MonthlySpend
    from labgov.usage.periods import closed_until

    resources = Resource.objects.filter(account=account)
    billing = BillingRecord.objects.filter(resource__account=account)
    records = billing.aggregate(count=Count("bucket_start"), earliest=Min("bucket_start"))
    ledger = _ledger_usage(account).aggregate(earliest=Min("occurred_at"))
    # Exact on SQLite too (it sums decimals as floats).
    billed = sum(grouped_sums(billing, ["resource__account_id"], "total_usd").values(), ZERO)
    posted = sum(grouped_sums(_ledger_usage(account), ["source"], "amount_usd").values(), ZERO)
    totals = AccountBillingRecord.objects.filter(account=account)
    moments = [
        m
        for m in (
            records["earliest"],
            ledger["earliest"],
            totals.aggregate(earliest=Min("bucket_start"))["earliest"],
        )
        if m is not None
    ]
    earliest = min(moments) if moments else None
    blockers = []
    until = closed_until(account.institution_id)
    if earliest is not None and until is not None and earliest < until:
        blockers.append(
            f"Its synced spend starts on {earliest:%Y-%m-%d}, in a period finance has closed"
            f" (through {until - dt.timedelta(days=1):%Y-%m-%d}); removing it would change"
            " closed months. Deactivate it instead."
        )
    blockers.extend(_outside_references(account))
    return RemovalSummary(
        resources=resources.count(),
        billing_records=records["count"],
        billed_usd=billed,
        ledger_usd=posted,
        account_totals=totals.count(),
        rules=AttributionRule.objects.filter(account=account).count(),
        assignments=Assignment.objects.filter(resource__account=account).count(),
        sync_runs=SyncRun.objects.filter(account=account).count(),
        alerts=Alert.objects.filter(account=account).count()
        + Alert.objects.filter(resource__account=account).exclude(account=account).count(),
        rollups=DailySpend.objects.filter(account=account).count()
        + MonthlySpend.objects.filter(account=account).count(),
        earliest=earliest,
        blockers=blockers,
    )


@transaction.atomic
def account_removal_request(*, actor, account: RunpodAccount) -> RunpodAccount:
    """The first of the two people a removal needs: ask for it (audited). Refused, in words,
    where `account_removal_summary` says it cannot be removed."""
    access.require_person(actor, "Asking for the removal of a Runpod account")
    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    if locked.removal_requested_by_id is not None:
        return locked
    summary = account_removal_summary(locked)
    if not summary.allowed:
        raise DomainError(" ".join(summary.blockers))
    locked.removal_requested_by = actor
    locked.removal_requested_at = timezone.now()
    locked.save(update_fields=["removal_requested_by", "removal_requested_at"])
    audit_record(
        actor=actor,
        action="runpod_account.removal_request",
        target=locked,
        institution_id=locked.institution_id,
        before={"removal_requested_by": None},
        after={"removal_requested_by": actor.pk},
    )
    return locked


@transaction.atomic
def account_removal_withdraw(*, actor, account: RunpodAccount) -> RunpodAccount:
    """Withdraw a removal request (anyone who may remove may withdraw; audited)."""
    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    if locked.removal_requested_by_id is None:
        return locked
    before = {"removal_requested_by": locked.removal_requested_by_id}
    locked.removal_requested_by = None
    locked.removal_requested_at = None
    locked.save(update_fields=["removal_requested_by", "removal_requested_at"])
    audit_record(
        actor=actor,
        action="runpod_account.removal_withdraw",
        target=locked,
        institution_id=locked.institution_id,
        before=before,
        after={"removal_requested_by": None},
    )
    return locked


@transaction.atomic
def account_remove(*, actor, account: RunpodAccount) -> RemovalSummary:
    """Remove a mistaken connection and everything it synced (see the module docstring), as
    the second of two institution admins: someone else must have asked for it
    (`account_removal_request`). Audited with what was removed and both people; refused, in
    words, where `account_removal_summary` says."""
    access.require_person(actor, "Removing a Runpod account")
    from labgov.alerts.models import Alert
    from labgov.runpod.sync import lock_claim
    from labgov.usage.models import DailySpend, LabDailySpend, MonthlySpend, SourceMonthlySpend

    locked = RunpodAccount.objects.select_for_update().get(pk=account.pk)
    if lock_claim(locked.pk, timezone.now()) is None:
        raise DomainError(f"A sync of {locked.name} is running: remove it once the sync ends.")
    summary = account_removal_summary(locked)
    if not summary.allowed:
        raise DomainError(" ".join(summary.blockers))
    requester_id = locked.removal_requested_by_id
    if requester_id is None:
        raise DomainError(
            f"Removing {locked.name} takes spend off the ledger, so it needs two people: ask for"
            " its removal first; another institution admin then carries it out."
        )
    if requester_id == actor.pk:
        raise DomainError(
            f"You asked for the removal of {locked.name}: another institution admin must carry"
            " it out."
        )
    reversals = _reverse_ledger_usage(locked, actor)
    audit_record(
        actor=actor,
        action="runpod_account.remove",
        target=locked,
        institution_id=locked.institution_id,
        before={
            "name": locked.name,
            "base_url": locked.base_url,
            "resources": summary.resources,
            "billing_records": summary.billing_records,
            "billed_usd": str(summary.billed_usd),
            "ledger_usage_reversed_usd": str(summary.ledger_usd),
            "ledger_reversal_entries": reversals,
            "sync_runs": summary.sync_runs,
            "alerts": summary.alerts,
            "removal_requested_by": requester_id,
        },
        note=f"Removed with its synced data; {reversals} ledger reversal entries posted",
    )
    resources = Resource.objects.filter(account=locked)
    try:
        Alert.objects.filter(account=locked).delete()
        Alert.objects.filter(resource__in=resources).delete()
        LabDailySpend.objects.filter(account=locked).delete()
        DailySpend.objects.filter(account=locked).delete()
        SourceMonthlySpend.objects.filter(account=locked).delete()
        MonthlySpend.objects.filter(account=locked).delete()
        BillingRecord.objects.filter(resource__in=resources).delete()
        AccountBillingRecord.objects.filter(account=locked).delete()
        TagClaim.objects.filter(resource__in=resources).delete()
        Assignment.objects.filter(resource__in=resources).delete()
        AttributionRule.objects.filter(account=locked).delete()
        resources.delete()
        SyncRun.objects.filter(account=locked).delete()
        locked.delete()
    except (ProtectedError, RestrictedError) as exc:
        held = getattr(exc, "protected_objects", None) or getattr(exc, "restricted_objects", ())
        what = sorted({str(type(obj)._meta.verbose_name_plural) for obj in held})
        raise DomainError(
            f"Other records refer to {locked.name} ({', '.join(what)}): deactivate it instead."
        ) from exc
    return summary


def _reverse_ledger_usage(account: RunpodAccount, actor) -> int:
    """Post, per allocation and day, the opposite of the usage the connection posted: the
    append-only ledger takes money back with new entries, never by deleting."""
    sums = grouped_sums(
        _ledger_usage(account).annotate(day=TruncDay("occurred_at", tzinfo=UTC)),
        ["allocation_id", "funding_source_id", "day"],
        "amount_usd",
    )
    entries = [
        LedgerEntry(
            funding_source_id=funding_source_id,
            allocation_id=allocation_id,
            kind=LedgerEntry.Kind.USAGE,
            amount_usd=-total,
            occurred_at=_midnight(day),
            actor=actor,
            memo=f"Runpod usage taken back: connection {account.name} removed (connected by"
            " mistake)",
            source=ledger_source(account),
        )
        for (allocation_id, funding_source_id, day), total in sorted(
            sums.items(), key=lambda item: (item[0][2], item[0][0] or 0)
        )
        if total != ZERO
    ]
    LedgerEntry.objects.bulk_create(entries)
    return len(entries)


def _midnight(day) -> dt.datetime:
    if isinstance(day, dt.datetime):
        return day.astimezone(UTC)
    return dt.datetime.combine(day, dt.time(), tzinfo=UTC)
