"""Syncing one Runpod account: inventory, billing records, attribution and usage.

Each step is idempotent. Billing is fetched in slices of the window, and each slice is written
(records, attribution, ledger usage) in its own transaction: memory stays bounded, and a sync
that fails half-way leaves every slice either as it was or wholly updated, never in between.

What runs after a sync (commitments, alerts, and whatever else consumes synced spend) is not
this module's business: settings.LABGOV_AFTER_SYNC lists those steps, in order, and the sync
calls each with its finished run. The sync imports none of its consumers.

The lock order. Slices are written side by side (settings.LABGOV_SYNC_WRITERS) while people
re-assign resources, make rules and move spend; so that no two writers each wait for what the
other holds, every transaction that writes an account's synced data takes its locks in this
order, each held to its commit:

1. The account row (labgov/runpod/locks.py), first of all: a slice takes its share (FOR KEY
   SHARE), so slices run side by side; every other writer (the sync's inventory and rules
   steps; a re-assignment, a rule, a cost transfer, a removal, a provisioned pod's
   attribution) takes it alone (FOR UPDATE), and so waits for the slices in flight. Such a
   writer that also locks a resource or an allocation FOR UPDATE takes the account row first.
2. The slice's own rows: its billing records and the account's records of its days, which no
   other slice writes (slices never share a day). Their foreign keys share-lock the resources
   and allocations they name, which only a lock FOR UPDATE on those rows waits for (step 1).
3. The account row, one slice at a time (FOR NO KEY UPDATE), before anything slices share: a
   slice takes it when it meets a resource billed but never listed, else once its records are
   written. What the slice still writes of its own rows after it is its own.
4. Resources: rows for those billed but never listed (after the one advisory lock, shared by
   all accounts, under which no two connections claim the same Runpod id), first assignments
   by rule, and the unattributed spend of those the slice's records changed.
5. The ledger: the slice's usage entries in one INSERT, whose trigger upserts the totals of
   their funding sources and allocations in one statement sorted by owner (funding/totals.py).
6. Rollups: the slice's days, the same days by lab (the account's own rows), then their
   months and the same months by funding source (the account's own rows).

The sync's own bookkeeping on the account row (its lock, progress, balance) is single
statements outside these transactions. A slice that still meets a deadlock or a serialization
failure (another application's writer, a partition made mid-slice) is rolled back and written
again whole from its payload, up to SLICE_ATTEMPTS times; then the sync fails and says which.
"""

import datetime as dt
import logging
import random
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

from labgov.core import dataversion
from labgov.core.errors import DomainError
from labgov.core.periods import UTC, day_start, hour_floor
from labgov.runpod import billing_store, partitions
from labgov.runpod.attribution import rules_apply
from labgov.runpod.errors import RunpodError
from labgov.runpod.inventory import inventory_sync
from labgov.runpod.locks import account_lock, account_lock_serial, account_lock_slice
from labgov.runpod.models import RunpodAccount, SyncRun
from labgov.runpod.providers import span_written
from labgov.runpod.types import BillingKind
from labgov.usage.periods import local_day_start, zone

log = logging.getLogger(__name__)

# The connection is gone (PostgreSQL restarted, or ended it): Django's wrapped errors, and
# psycopg's own from the bulk writer, which talks to the driver directly.
DATABASE_GONE = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
# PostgreSQL ended a transaction that waited for another (SQLSTATE 40P01, 40001): the database
# is fine, and the transaction may succeed when written again. Django wraps psycopg's error
# (which then is its __cause__) in an OperationalError, so both are DATABASE_GONE's too.
CONTENTION = {"40P01": "deadlock", "40001": "serialization failure"}
CONTENTION_WHY = {
    "deadlock": (
        "it and another writer of this account's data (a re-assignment, a rule, a cost "
        "transfer, another slice) each waited for rows the other held"
    ),
    "serialization failure": "another transaction changed rows it depended on",
}
# How often a slice is written whole before the sync gives up on it.
SLICE_ATTEMPTS = 3
# Slices downloaded ahead of the writers: two, so that two writers finishing together both
# find a slice waiting (with one, the second waited for its download).
FETCH_AHEAD = 2

BILLING_KINDS = (
    BillingKind.POD,
    BillingKind.NETWORK_VOLUME,
    BillingKind.SERVERLESS,
    BillingKind.CLUSTER,
    BillingKind.ENDPOINT,
)


class SyncBusy(Exception):
    """Another worker holds this account's sync lock."""


class SliceContended(Exception):
    """A slice met a deadlock or a serialization failure every time it was written."""

    def __init__(self, what: str, start: dt.datetime, end: dt.datetime, attempts: int):
        self.message = DATABASE_CONTENDED.format(
            what=what,
            where=f" while writing billing of {_span(start, end)}, {attempts} times in a row",
            why=CONTENTION_WHY[what],
        )
        super().__init__(self.message)


def contention(exc: BaseException | None) -> str | None:
    """What PostgreSQL ended the transaction for ("deadlock", "serialization failure"), looking
    through Django's wrapping of psycopg's error; None for any other error."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        what = CONTENTION.get(getattr(exc, "sqlstate", None) or "")
        if what is not None:
            return what
        exc = exc.__cause__ or exc.__context__
    return None


def _span(start: dt.datetime, end: dt.datetime) -> str:
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    return f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True)
class Window:
    start: dt.datetime
    end: dt.datetime

    def slices(self, hours: int) -> Iterator["Window"]:
        """Pieces of `hours`, cut at multiples of `hours` from the start's UTC midnight: with
        whole days, no two pieces share a day, so they can be written side by side."""
        step = dt.timedelta(hours=hours)
        midnight = self.start.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        cursor = self.start
        while cursor < self.end:
            upper = midnight + step * ((cursor - midnight) // step + 1)
            upper = min(upper, self.end)
            yield Window(cursor, upper)
            cursor = upper


def default_window(account: RunpodAccount, now: dt.datetime) -> Window:
    """Whole UTC days up to now. A first sync starts at the UTC midnight on or before the
    start of its first day in the institution's calendar, so that day is held whole (a day
    is held once every hour of it lies inside successful windows taken together); later
    ones at the midnight before what is complete, less the overlap."""
    if account.billing_complete_through is None:
        first = (now - dt.timedelta(days=settings.LABGOV_SYNC_FIRST_DAYS)).astimezone(
            zone(account.institution.time_zone)
        )
        start = local_day_start(first.date(), account.institution.time_zone)
    else:
        start = account.billing_complete_through - dt.timedelta(
            hours=settings.LABGOV_SYNC_OVERLAP_HOURS
        )
    return Window(utc_midnight(start), now)


def utc_midnight(moment: dt.datetime) -> dt.datetime:
    return day_start(moment.astimezone(UTC).date())


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


def _skipped(run: SyncRun, why: str) -> SyncRun:
    _progress(run, status=SyncRun.Status.SKIPPED, finished_at=timezone.now(), phase="", error=why)
    return run


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
    account = RunpodAccount.objects.get(pk=account_id)
    # What the sync writes is this institution's: its pages alone are retired.
    with dataversion.scope([account.institution_id]):
        return _account_sync(account, trigger, actor, start, end, client_factory)


def _account_sync(account, trigger, actor, start, end, client_factory) -> SyncRun:
    from labgov.runpod.services import client_for_account

    client_factory = client_factory or client_for_account
    now = timezone.now()
    run = SyncRun.objects.create(
        account=account, trigger=trigger, triggered_by=actor, started_at=now, phase="starting"
    )
    if not account.is_active:
        return _skipped(run, "This connection is deactivated; it is not synced.")
    if account.is_focus:
        return _skipped(run, "A FOCUS billing source is imported from files, not synced.")
    token = lock_claim(account.pk, now)
    if token is None:
        return _skipped(run, "Another sync of this account was running.")
    _abandoned_runs_close(run)
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
    except SliceContended as exc:
        log.warning("sync of account %s failed: %s", account.pk, exc.message)
        _progress(run, status=SyncRun.Status.FAILED, finished_at=timezone.now(), error=exc.message)
    except DATABASE_GONE as exc:
        what = contention(exc)
        if what is not None:
            # Outside a slice (inventory, rules), so not retried; the connection is fine.
            log.warning("sync of account %s met a %s: %s", account.pk, what, exc)
            error = DATABASE_CONTENDED.format(what=what, where="", why=CONTENTION_WHY[what])
        else:
            # PostgreSQL restarted, or ended this connection: not a bug, and the next sync
            # mends it (every slice was written whole or not at all). Record it in words on a
            # new connection; if the database is still away, the lock expires on its own.
            log.warning("sync of account %s lost its database connection: %s", account.pk, exc)
            if not connection.in_atomic_block:
                connection.close()
            error = DATABASE_LOST.format(
                reason=str(exc).strip().splitlines()[0] if str(exc) else ""
            )
        _progress(run, status=SyncRun.Status.FAILED, finished_at=timezone.now(), error=error)
    except (RunpodError, DomainError) as exc:
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
    after_sync_run(run)
    return run


DATABASE_LOST = (
    "The connection to the database was lost during the sync ({reason}): PostgreSQL "
    "restarted or ended it. Every day already written is kept whole; the next sync fetches "
    "the rest."
)
DATABASE_CONTENDED = (
    "The sync met a {what} in the database{where}: PostgreSQL ended its transaction because "
    "{why}. Every day already written is kept whole; the next sync fetches the rest."
)
ABANDONED = (
    "The worker running this sync stopped before it finished (killed, or its machine "
    "restarted). Every day it wrote is kept whole; a later sync fetched its window again."
)


def _abandoned_runs_close(run: SyncRun) -> None:
    """Runs of this account still marked running while we hold its lock lost their worker
    mid-way (their lock expired): say so, instead of showing them running for ever."""
    SyncRun.objects.filter(account_id=run.account_id, status=SyncRun.Status.RUNNING).exclude(
        pk=run.pk
    ).exclude(phase="starting").update(
        status=SyncRun.Status.FAILED, finished_at=run.started_at, phase="", error=ABANDONED
    )


def after_sync_run(run: SyncRun) -> None:
    """Run the steps of settings.LABGOV_AFTER_SYNC on a finished (succeeded or failed) run.
    Each step is `step(*, run) -> dict | None`; what it returns joins the run's counts. Every
    step runs even when an earlier one fails; a failure is logged, named in the run's counts
    and then raised, as a bug in the sync itself would be."""
    counts = dict(run.counts or {})
    seconds = dict(counts.get("seconds") or {})
    failures: list[tuple[str, Exception]] = []
    for path in settings.LABGOV_AFTER_SYNC:
        started = time.perf_counter()
        try:
            counts.update(import_string(path)(run=run) or {})
        except Exception as exc:
            log.exception("after-sync step %s failed for sync run %s", path, run.pk)
            failures.append((path, exc))
        # Named by module too: two apps' steps may share a function name.
        seconds[f"after:{path.removeprefix('labgov.')}"] = round(time.perf_counter() - started, 2)
    if run.status == SyncRun.Status.SUCCEEDED:
        counts["seconds"] = seconds
    if failures:
        counts["after_sync_failed"] = [path for path, _ in failures]
    _progress(run, counts=counts)
    if failures:
        raise failures[0][1]


def _sync(account, run, token, window: Window, client_factory) -> dict:
    hours = settings.LABGOV_SYNC_SLICE_HOURS
    slices = list(window.slices(hours))
    counts = {"records": 0, "ledger_entries": 0, "slice_retries": 0}
    # Seconds spent per phase, kept with the run: where a slow sync spends its time.
    seconds: dict[str, float] = {}
    clock = time.perf_counter
    started = clock()
    _progress(run, phase="inventory", progress_done=0, progress_total=len(slices) + 1)
    raw = billing_store.uses_bulk_sql()
    # Whole-day slices never share a day, so on PostgreSQL several can be written at once
    # (each in its own transaction and connection): the database, not Python, is the work.
    writers = settings.LABGOV_SYNC_WRITERS if raw and hours % 24 == 0 else 1
    writer_connections = _WriterConnections()
    with (
        client_factory(account) as client,
        ThreadPoolExecutor(max_workers=1) as fetcher,
        writer_connections,
        ThreadPoolExecutor(max_workers=writers) as writer_pool,
    ):
        counts.update(inventory_sync(account=account, client=client, now=run.started_at))
        with transaction.atomic():
            account_lock(account.pk)
            counts["rules_assigned"] = len(rules_apply(account=account))
        counts["balance_read"] = _balance_read(account, client)
        seconds["inventory"] = clock() - started
        # The window's months get their billing partitions now, outside any slice's
        # transaction: making one locks billing for every reader until its transaction ends.
        partitions.ensure_months(window.start, window.end)
        _progress(run, phase="billing", progress_done=1)

        def fetch(part: Window):
            return billing_store.fetch_slice(client, BILLING_KINDS, part.start, part.end, raw=raw)

        def collect(future) -> None:
            written, entries, retries = future.result()
            counts["records"] += written
            counts["ledger_entries"] += entries
            counts["slice_retries"] += retries
            if not lock_extend(account.pk, token):
                raise RuntimeError("the sync lock was lost; another worker may have taken over")
            _progress(run, progress_done=run.progress_done + 1, counts=counts)

        # The next slices download (FETCH_AHEAD of them, one at a time) while earlier ones
        # are written; at most `writers + FETCH_AHEAD` are held at once, so memory stays
        # bounded whatever the window. A writer that finishes takes the next slice at once,
        # whichever of the slices in flight it wrote: waiting for them in order left it idle
        # while an earlier, larger slice was still being written.
        ahead: deque = deque()
        fetched = 0

        def fetch_ahead() -> None:
            nonlocal fetched
            while fetched < len(slices) and len(ahead) < FETCH_AHEAD:
                ahead.append(fetcher.submit(fetch, slices[fetched]))
                fetched += 1

        fetch_ahead()
        in_flight: set = set()
        billing_started = clock()
        waited = 0.0
        for _ in range(len(slices)):
            wait_started = clock()
            payload = ahead.popleft().result()
            waited += clock() - wait_started
            fetch_ahead()
            if writers == 1:
                in_flight.add(_completed(_slice_write, account, payload))
            else:
                in_flight.add(
                    writer_pool.submit(
                        _slice_write_in_thread, account.pk, payload, writer_connections
                    )
                )
            del payload
            while len(in_flight) >= writers:
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    in_flight.discard(future)
                    collect(future)
        for future in as_completed(in_flight):
            collect(future)
        seconds["billing"] = clock() - billing_started
        seconds["billing_waiting_for_runpod"] = waited
    counts["seconds"] = {name: round(value, 2) for name, value in seconds.items()}
    return counts


def _balance_read(account, client) -> bool:
    """Keep the balance Runpod reports, for balance alerts. Only the deprecated GraphQL API
    has it, so its absence or failure never fails the sync."""
    try:
        balance = client.account_balance()
    except RunpodError as exc:
        log.info("balance of account %s not read: %s", account.pk, exc.message)
        return False
    if balance is None:
        return False
    RunpodAccount.objects.filter(pk=account.pk).update(
        balance_usd=balance.balance_usd,
        balance_spend_per_hr_usd=balance.spend_per_hr_usd,
        balance_fetched_at=timezone.now(),
    )
    return True


def _slice_write(account, payload) -> tuple[int, int, int]:
    """Write one slice: its records, the ledger usage and rollups of its days, together, in
    the lock order of this module's docstring. A deadlock or serialization failure rolls it
    all back and it is written again whole; returns (records, ledger entries, retries)."""
    attempt = 1
    while True:
        try:
            with transaction.atomic():
                account_lock_slice(account.pk)
                written = billing_store.write_slice(account=account, payload=payload)
                account_lock_serial(account.pk)
                # The unattributed queue moves as the records moved it; the ledger's usage
                # and the rollups of the slice's days follow one scan of their records, or
                # the sums the write reported when it wrote every record of its days.
                entries = span_written(
                    account=account,
                    days=written.days,
                    unattributed_moved=written.unattributed_moved,
                    day_sums=written.day_sums,
                )
            return written.records, entries, attempt - 1
        except DATABASE_GONE as exc:
            what = contention(exc)
            if what is None:
                raise
            if attempt == SLICE_ATTEMPTS:
                raise SliceContended(what, payload.start, payload.end, attempt) from exc
            log.warning(
                "billing of %s for account %s met a %s (attempt %d of %d); writing it again",
                _span(payload.start, payload.end), account.pk, what, attempt, SLICE_ATTEMPTS,
            )  # fmt: skip
            _pause_before_retry(attempt)
            attempt += 1


def _pause_before_retry(attempt: int) -> None:
    """A short pause, jittered: whoever the slice met finishes first, and the two do not meet
    again in step."""
    time.sleep(random.uniform(0.05, 0.2) * attempt)  # noqa: S311 - jitter, not a secret


def _slice_write_in_thread(account_id: int, payload, held: "_WriterConnections"):
    held.claim()
    account = RunpodAccount.objects.get(pk=account_id)
    with dataversion.scope([account.institution_id]):  # a thread starts with no scope
        return _slice_write(account, payload)


class _WriterConnections:
    """The writer threads' database connections, each kept from one slice to the next (a new
    one is a new PostgreSQL backend, which loads its catalog caches again: about a tenth of
    a slice's database time) and all closed when the billing phase ends, however it ends
    (the pool's threads outlive it by nothing: it is shut down first)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: list = []

    def claim(self) -> None:
        """In a writer thread, before each slice: its connection, replaced if it broke (a
        slice that lost the database) or outlived CONN_MAX_AGE."""
        own = connections[DEFAULT_DB_ALIAS]
        own.close_if_unusable_or_obsolete()
        with self._lock:
            if not any(own is other for other in self._held):
                own.inc_thread_sharing()  # closed by the thread that ends the billing phase
                self._held.append(own)

    def __enter__(self) -> "_WriterConnections":
        return self

    def __exit__(self, *exc_info) -> None:
        with self._lock:
            held, self._held = self._held, []
        for own in held:
            try:
                own.close()
            finally:
                own.dec_thread_sharing()


def _completed(function, *args) -> Future:
    future: Future = Future()
    try:
        future.set_result(function(*args))
    except Exception as exc:  # handed to collect(), which raises it
        future.set_exception(exc)
    return future
