"""Billing records on PostgreSQL: one partition per calendar month (UTC) of `bucket_start`.

Why partitions: a month finance has closed can be detached and archived (`pg_dump -t`) without
touching the months still in use, and ten years of records stay ten years of small tables.

Why no DEFAULT partition: with one, PostgreSQL cannot prove the monthly partitions are ordered,
so "the latest record of this resource" (ORDER BY bucket_start DESC LIMIT 1, asked per
resource by alerts and history) becomes a MergeAppend probing every partition instead of an
ordered Append that stops at the newest month holding a record. So every writer makes sure
the months it writes exist first (`ensure_months`), and a daily task creates the coming months
ahead of time.

The months already seen are remembered per database (`_known`), to spare a catalogue query per
write. The memory is a hint, never the truth: a transaction that made a month may still roll
back after telling it, and an operator may detach a month from another process. So a writer
that trusted it and meets "no partition of relation" forgets what it knew, looks again and
writes once more (`write_months`): the month is created, or the write is refused with the
archived message when its partition is detached.

Why before the sync's transactions: CREATE TABLE … PARTITION OF locks the parent table
exclusively until its transaction ends; inside a sync's slice it would hold every reader of
billing for the rest of the slice. The sync creates its window's months before it starts
writing, on autocommit; creating one inside a slice only happens for a record Runpod dates
outside the window asked for (see billing_store).

On any other database (SQLite, for the demo) billing is one plain table and all of this is a
no-op.
"""

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.db import IntegrityError, connection, transaction

from labgov.core.errors import DomainError
from labgov.core.periods import UTC

log = logging.getLogger(__name__)
T = TypeVar("T")

PARENT = "runpod_billingrecord"
# Months created ahead of the current one by the daily task (and by the migration).
MONTHS_AHEAD = 3
# Serializes partition creation between processes (two syncs meeting a new month).
_LOCK_KEY = 7_402_158_311

# Months known to be attached partitions, per database (host, port, name), as committed: only
# what a query outside any transaction saw, or what a transaction that created it committed,
# is remembered. A hint only: see the module's docstring.
_known: dict[tuple, set[dt.date]] = {}


def _database() -> tuple:
    settings = connection.settings_dict
    return (settings.get("HOST"), settings.get("PORT"), settings.get("NAME"))


def _known_here() -> set[dt.date]:
    return _known.setdefault(_database(), set())


def month_start(moment: dt.datetime | dt.date) -> dt.date:
    if isinstance(moment, dt.datetime):
        moment = moment.astimezone(UTC).date() if moment.tzinfo else moment.date()
    return moment.replace(day=1)


def next_month(month: dt.date) -> dt.date:
    return (month.replace(day=1) + dt.timedelta(days=32)).replace(day=1)


def months_between(start: dt.datetime | dt.date, end: dt.datetime | dt.date) -> list[dt.date]:
    """Every month holding an instant of [start, end], both included."""
    month, last = month_start(start), month_start(end)
    months = []
    while month <= last:
        months.append(month)
        month = next_month(month)
    return months


def table_name(month: dt.date) -> str:
    return f"{PARENT}_p{month:%Y_%m}"


def month_of_table(name: str) -> dt.date | None:
    prefix = f"{PARENT}_p"
    if not name.startswith(prefix):
        return None
    try:
        return dt.datetime.strptime(name[len(prefix) :], "%Y_%m").date()  # noqa: DTZ007 - a date
    except ValueError:
        return None


def bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime(month.year, month.month, 1, tzinfo=UTC)
    following = next_month(month)
    return start, dt.datetime(following.year, following.month, 1, tzinfo=UTC)


def is_partitioned() -> bool:
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)", [PARENT])
        row = cursor.fetchone()
    return bool(row and row[0])


def _state(cursor, months: Iterable[dt.date]) -> tuple[bool, set[dt.date], set[dt.date]]:
    """Whether billing is partitioned, and which of `months` are attached or detached."""
    names = {table_name(m): m for m in months}
    cursor.execute(
        """
        SELECT c.relname, c.relkind, c.relispartition FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s)
        """,
        [[PARENT, *names]],
    )
    rows = cursor.fetchall()
    partitioned = any(name == PARENT and kind == "p" for name, kind, _ in rows)
    attached = {names[name] for name, _, part in rows if name in names and part}
    detached = {names[name] for name, _, part in rows if name in names and not part}
    return partitioned, attached, detached


def ensure_months(
    start: dt.datetime | dt.date, end: dt.datetime | dt.date, *, trust_cache: bool = True
) -> None:
    """Make sure every month of [start, end] has its partition. Cheap when they exist. A writer
    that cannot write again after a missing partition (raw SQL) asks with trust_cache=False."""
    ensure(months_between(start, end), trust_cache=trust_cache)


def months_of(moments: Iterable[dt.datetime]) -> set[dt.date]:
    """The months of these bucket starts."""
    return {month_start(m) for m in moments if isinstance(m, dt.datetime)}


def ensure(months: Iterable[dt.date], *, trust_cache: bool = True) -> None:
    if connection.vendor != "postgresql":
        return
    wanted = set(months)
    if trust_cache:
        wanted -= _known_here()
    if not wanted:
        return
    with connection.cursor() as cursor:
        partitioned, attached, detached = _state(cursor, wanted)
    if not partitioned:
        return
    missing = wanted - attached
    if missing:
        _create(missing)
    _remember(wanted)


def _remember(months: set[dt.date]) -> None:
    known = _known_here()
    if connection.in_atomic_block:
        # Seen (or made) inside a transaction that may yet roll back: remember it once the
        # transaction commits, never before.
        transaction.on_commit(lambda: known.update(months))
    else:
        known.update(months)


def forget(months: Iterable[dt.date] | None = None) -> None:
    """Forget what is known of these months (of every month, with None) on this database."""
    if months is None:
        _known_here().clear()
    else:
        _known_here().difference_update(months)


def is_missing_partition(exc: BaseException) -> bool:
    """Whether a write failed because a row's month has no attached partition."""
    while exc is not None:
        if str(exc).startswith("no partition of relation"):
            return True
        exc = exc.__cause__
    return False


def write_months(months: set[dt.date], write: Callable[[], T]) -> T:
    """Run `write` (which lands rows in `months`) after making sure the months exist; if it
    still meets a missing partition (the memory of months was stale), look again without it
    and write once more. A detached month is refused in words (`DomainError`)."""
    ensure(months)
    if connection.vendor != "postgresql":
        return write()
    try:
        # A savepoint: the failed statement leaves the surrounding transaction usable.
        with transaction.atomic():
            return write()
    except IntegrityError as exc:
        if not is_missing_partition(exc):
            raise
    log.warning("billing partition missing although remembered: looking again %s", sorted(months))
    forget(months)
    ensure(months, trust_cache=False)
    with transaction.atomic():
        return write()


def _create(months: set[dt.date]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        _, attached, detached = _state(cursor, months)
        if detached:
            first = min(detached)
            raise DomainError(
                f"Billing records of {first:%B %Y} are archived: that month's partition "
                f"({table_name(first)}) is detached. Attach it again (manage.py "
                f"billing_partitions attach {first:%Y-%m}) before writing records in it."
            )
        for month in sorted(months - attached):
            start, end = bounds(month)
            log.info("creating billing partition %s", table_name(month))
            # Bounds are literals: DDL takes no parameters.
            cursor.execute(
                f'CREATE TABLE IF NOT EXISTS "{table_name(month)}" PARTITION OF "{PARENT}" '
                f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )


def detached_within(start: dt.datetime, end: dt.datetime) -> list[dt.date]:
    """Months of [start, end) whose records are archived (their partition detached)."""
    if connection.vendor != "postgresql" or end <= start:
        return []
    with connection.cursor() as cursor:
        partitioned, _, detached = _state(
            cursor, months_between(start, end - dt.timedelta(microseconds=1))
        )
    return sorted(detached) if partitioned else []


def ensure_ahead(now: dt.datetime, months: int = MONTHS_AHEAD) -> list[dt.date]:
    """Create the current month and the next `months` ahead (the daily task). Returns them."""
    wanted = [month_start(now)]
    for _ in range(months):
        wanted.append(next_month(wanted[-1]))
    ensure(wanted, trust_cache=False)
    return wanted
