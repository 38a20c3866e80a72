"""Syncing one Runpod account: inventory, billing records, attribution and usage.

Each step is idempotent. Billing is fetched in slices of the window, and each slice is written
(records, attribution, ledger usage) in its own transaction: memory stays bounded, and a sync
that fails half-way leaves every slice either as it was or wholly updated, never in between.
"""

import datetime as dt
import logging
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from labgov.core.periods import hour_floor
from labgov.runpod import billing_store
from labgov.runpod.attribution import rules_apply, usage_reconcile
from labgov.runpod.errors import RunpodError
from labgov.runpod.inventory import inventory_sync
from labgov.runpod.models import RunpodAccount, SyncRun
from labgov.runpod.types import BillingKind
from labgov.usage.services import rollups_rebuild

log = logging.getLogger(__name__)

BILLING_KINDS = (
    BillingKind.POD,
    BillingKind.NETWORK_VOLUME,
    BillingKind.SERVERLESS,
    BillingKind.CLUSTER,
    BillingKind.ENDPOINT,
)


class SyncBusy(Exception):
    """Another worker holds this account's sync lock."""


@dataclass(frozen=True)
class Window:
    start: dt.datetime
    end: dt.datetime

    def slices(self, hours: int) -> Iterator["Window"]:
        cursor = self.start
        while cursor < self.end:
            upper = min(cursor + dt.timedelta(hours=hours), self.end)
            yield Window(cursor, upper)
            cursor = upper


def default_window(account: RunpodAccount, now: dt.datetime) -> Window:
    end = now
    if account.billing_complete_through is None:
        start = hour_floor(now) - dt.timedelta(days=settings.LABGOV_SYNC_FIRST_DAYS)
    else:
        start = account.billing_complete_through - dt.timedelta(
            hours=settings.LABGOV_SYNC_OVERLAP_HOURS
        )
    return Window(hour_floor(start), end)


def _complete_through(account, window: Window, now: dt.datetime) -> dt.datetime | None:
    """How far billing is now known whole: it advances to the window's last full hour only
    when the window joins what was complete before (no gap left behind it)."""
    known = account.billing_complete_through
    if known is not None and window.start > known:
        return known
    reached = hour_floor(min(window.end, now))
    return reached if known is None else max(known, reached)


def lock_claim(account_id: int, now: dt.datetime) -> str | None:
    token = secrets.token_hex(16)
    claimed = (
        RunpodAccount.objects.filter(pk=account_id)
        .filter(Q(sync_locked_until__isnull=True) | Q(sync_locked_until__lt=now))
        .update(
            sync_lock_token=token,
            sync_locked_until=now + dt.timedelta(seconds=settings.LABGOV_SYNC_LOCK_SECONDS),
        )
    )
    return token if claimed == 1 else None


def lock_extend(account_id: int, token: str) -> bool:
    return (
        RunpodAccount.objects.filter(pk=account_id, sync_lock_token=token).update(
            sync_locked_until=timezone.now()
            + dt.timedelta(seconds=settings.LABGOV_SYNC_LOCK_SECONDS)
        )
        == 1
    )


def lock_release(account_id: int, token: str) -> None:
    RunpodAccount.objects.filter(pk=account_id, sync_lock_token=token).update(
        sync_lock_token="", sync_locked_until=None
    )


def _progress(run: SyncRun, **fields) -> None:
    for name, value in fields.items():
        setattr(run, name, value)
    SyncRun.objects.filter(pk=run.pk).update(**fields)


def account_sync(
    *,
    account_id: int,
    trigger: str = SyncRun.Trigger.SCHEDULE,
    actor=None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    client_factory: Callable | None = None,
) -> SyncRun:
    """Sync one account. Always returns its SyncRun (succeeded, failed or skipped); errors are
    recorded in it in words, never raised, except bugs, which are recorded and re-raised."""
    from labgov.runpod.services import client_for_account

    client_factory = client_factory or client_for_account
    account = RunpodAccount.objects.get(pk=account_id)
    now = timezone.now()
    run = SyncRun.objects.create(
        account=account, trigger=trigger, triggered_by=actor, started_at=now, phase="starting"
    )
    token = lock_claim(account.pk, now)
    if token is None:
        _progress(
            run,
            status=SyncRun.Status.SKIPPED,
            finished_at=timezone.now(),
            phase="",
            error="Another sync of this account was running.",
        )
        return run
    try:
        window = Window(
            hour_floor(start) if start else default_window(account, now).start,
            end or now,
        )
        _progress(run, window_start=window.start, window_end=window.end)
        counts = _sync(account, run, token, window, client_factory)
        complete_through = _complete_through(account, window, now)
        if complete_through != account.billing_complete_through:
            RunpodAccount.objects.filter(pk=account.pk).update(
                billing_complete_through=complete_through
            )
        _progress(
            run,
            status=SyncRun.Status.SUCCEEDED,
            finished_at=timezone.now(),
            phase="done",
            counts=counts,
        )
    except RunpodError as exc:
        log.warning("sync of account %s failed: %s", account.pk, exc.message)
        _progress(
            run,
            status=SyncRun.Status.FAILED,
            finished_at=timezone.now(),
            error=exc.message,
        )
    except Exception as exc:
        log.exception("sync of account %s failed unexpectedly", account.pk)
        _progress(
            run,
            status=SyncRun.Status.FAILED,
            finished_at=timezone.now(),
            error=f"Internal error ({exc.__class__.__name__}); the details are in the log.",
        )
        raise
    finally:
        lock_release(account.pk, token)
    return run


def _sync(account, run, token, window: Window, client_factory) -> dict:
    slices = list(window.slices(settings.LABGOV_SYNC_SLICE_HOURS))
    counts = {"records": 0, "ledger_entries": 0}
    _progress(run, phase="inventory", progress_done=0, progress_total=len(slices) + 1)
    raw = billing_store.uses_bulk_sql()
    with client_factory(account) as client, ThreadPoolExecutor(max_workers=1) as fetcher:
        counts.update(inventory_sync(account=account, client=client, now=run.started_at))
        with transaction.atomic():
            counts["rules_assigned"] = len(rules_apply(account=account))
        _progress(run, phase="billing", progress_done=1)

        def fetch(part: Window):
            return billing_store.fetch_slice(client, BILLING_KINDS, part.start, part.end, raw=raw)

        # The next slice downloads while this one is written; at most two are held at once.
        pending = fetcher.submit(fetch, slices[0]) if slices else None
        for index in range(len(slices)):
            payload = pending.result()
            pending = fetcher.submit(fetch, slices[index + 1]) if index + 1 < len(slices) else None
            with transaction.atomic():
                written, days = billing_store.write_slice(account=account, payload=payload)
                counts["ledger_entries"] += usage_reconcile(account=account, days=days)
                rollups_rebuild(account=account, days=days)
            counts["records"] += written
            del payload
            if not lock_extend(account.pk, token):
                raise RuntimeError("the sync lock was lost; another worker may have taken over")
            _progress(run, progress_done=index + 2, counts=counts)
    from labgov.provisioning.services import commitments_reconcile

    counts["commitments_released"] = commitments_reconcile()
    return counts
