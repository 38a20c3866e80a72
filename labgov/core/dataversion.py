"""The data versions: counters in the page cache that committed writes to labgov's tables move
on, so a cached page keyed by them is never older than the last write it could show.

There is one global version and one per institution. A write that concerns one institution
moves that institution's version; a page stores the versions of its viewer's institutions
beside the global one and is used only while all of them are unchanged. So a sync of one
account, or a change made by a person of institution B, retires no page of institution A.

Which institutions a write concerns is declared by the code around it (`scope`, `scoped`):
the sync names its account's institution, and so does the other work tasks and commands run
for one institution (an evaluation, a provisioning, an email: `scoped` on the service); every
web request names its signed-in person's institutions (all their memberships, ended ones
too, and their home institution), looked up when the write commits. A task starts with no
scope (labgov/celery.py), even run eagerly inside a request. A write with no scope (work over
every institution, an anonymous request, a staff member's request: the Django admin edits
anything), a write to a table that is not one
institution's (people, memberships, GPU types, tokens, Django's own tables; `SCOPED_TABLES`),
and a statement whose target is not plain to read move the global version, which retires
every page: retiring too much costs a slower page, too little a page showing wrong money.

Writes are noticed where all of them pass, the database cursor (an execute wrapper on every
connection), not in services or signals: syncs, rollups, attribution, alert evaluation and
invoicing write in bulk and in raw SQL, which sends no signals, and a hook in each of ~100
write sites would be missed by the next one. A write inside a transaction bumps the versions
once, after commit (a page computed from the old data meanwhile is stored under the old
versions, which are dead by then); a write in autocommit bumps at once.

A connection that has written and not committed (a request inside its own transaction, or a
test, whose transaction never commits) sees data nobody else does: `for_read` answers None
inside a real transaction (read around the cache) and, outside one, bumps first, so a page
read right after a write on the same connection is fresh."""

import contextlib
import contextvars
import functools
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from django.core.cache import caches
from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

KEY = "labgov:data-version"
INSTITUTION_KEY = "labgov:data-version:institution:{}"


class _PageCache:
    """The "pages" cache (settings), looked up on each use so tests' settings apply."""

    def __getattr__(self, name):
        return getattr(caches["pages"], name)


cache = _PageCache()

# Writes that change no page: the session store and the login throttle (django-axes), and
# the time of a person's last login, which every login sets and no page shows.
IGNORED_TABLES = ("django_session", "axes_")
_LAST_LOGIN = re.compile(
    r'\s*update\s+"accounts_user"\s+set\s+"last_login"\s*=\s*%s\s+where\b', re.I
)

# Tables whose every row belongs to one institution (through its account, lab, funding source,
# allocation or subject) and is shown only to people of that institution; a scoped write to
# one of them moves only its scope's versions. Every other table (people, memberships, GPU
# types and prices, API tokens, Django's own) is shared: a write to it moves the global one.
# tests/dashboard/test_page_cache_scope.py classifies every model's table, so a new one is placed
# on purpose.
SCOPED_TABLES = (
    "accounts_institution",
    "accounts_lab",
    "alerts_",
    "audit_",
    "exports_",
    "funding_",
    "idle_",
    "invoicing_",
    "notifications_",
    "provisioning_",
    "retention_",
    "runpod_",
    "transfers_",
    "usage_",
    "utilization_",
)
# A person's email choice is theirs in every institution they belong to.
SHARED_TABLES = ("runpod_gputype", "notifications_emailchoice")

# Tables no cached page reads (tests/dashboard/test_page_cache_scope.py renders every cached
# page and checks): the GPU catalog and its prices, which every sync writes again. And a new
# month's billing partition, empty when it is made, changes no page.
PAGELESS_TABLES = ("runpod_gputype",)
_PARTITION_MADE = re.compile(
    r'\s*create\s+table\s+(?:if\s+not\s+exists\s+)?"?runpod_billingrecord_p\d{4}_\d{2}"?\s+'
    r"partition\s+of\b",
    re.I,
)

_WRITE = re.compile(
    r"\s*(?:insert|update|delete|merge|truncate|alter|create|drop|with|copy)\b", re.I
)
_COPY_OUT = re.compile(r"\s*copy\b.*\bto\s+stdout\b", re.I | re.S)
_TARGET = re.compile(r'\s*(?:insert\s+into|update|delete\s+from)\s+"?(\w+)"?', re.I)
_READ_ONLY_WITH = re.compile(r"\b(?:insert|update|delete|merge)\b", re.I)
# Every table a statement may write: the targets of its INSERT, UPDATE, DELETE, MERGE and
# COPY … FROM (in a WITH too). A word read as a table that is none is unknown, and unknown
# tables are shared: any error is on the side of retiring more.
_TARGETS = re.compile(
    r'\b(?:insert\s+into|update|delete\s+from|merge\s+into|copy)\s+(?:only\s+)?"?(\w+)"?',
    re.I,
)
# Not writes of a table: a row lock, and the update of an upsert (its table is the insert's).
_NOT_A_TARGET = re.compile(r"\b(?:for\s+(?:no\s+key\s+)?|do\s+)update\b", re.I)


# --- scopes -----------------------------------------------------------------------------------

EVERYWHERE = "everywhere"  # a write that concerns every institution (or no single one)


class Scope:
    """The institutions the writes made inside it concern: a set, or a callable that answers
    them when the writes commit (a request's person may have joined one meanwhile); None or an
    empty answer means every institution."""

    def __init__(self, institutions: Iterable[int] | Callable[[], Iterable[int] | None] | None):
        self._institutions = institutions

    def institutions(self) -> frozenset[int] | None:
        found = self._institutions() if callable(self._institutions) else self._institutions
        found = frozenset(found) if found is not None else frozenset()
        return found or None


_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "labgov_dataversion_scope", default=None
)


@contextmanager
def scope(institutions) -> Iterator[None]:
    """Writes made inside concern only these institutions (ids, or a callable answering them
    when the writes commit). The innermost scope counts; threads start with none (a thread
    that writes for a scope enters it itself)."""
    token = _scope.set(Scope(institutions))
    try:
        yield
    finally:
        _scope.reset(token)


def scoped(institutions: Callable[..., Iterable[int] | None]):
    """For a function whose writes concern the institutions its arguments name (what a task
    runs: one account's sync, one request's provisioning, one institution's evaluation):
    `institutions(*args, **kwargs)` answers them once, when it is called, and its writes
    count against those alone. An empty answer (the object is gone) means every
    institution."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with scope(frozenset(institutions(*args, **kwargs) or ())):
                return function(*args, **kwargs)

        return wrapper

    return decorate


def begin_unscoped() -> contextvars.Token:
    """A task's start (labgov/celery.py): its writes are its own, never those of whoever queued
    it (a task run eagerly inside a web request would otherwise count against the person's
    institutions). What the task writes for one institution declares it (`scoped`, `scope`);
    the rest moves the global version."""
    return _scope.set(None)


def end_unscoped(token: contextvars.Token) -> None:
    # A token made in another context (a task ended elsewhere) has nothing to restore here.
    with contextlib.suppress(ValueError):
        _scope.reset(token)


def _write_scope(sql) -> object:
    """The scope a write counts against: the current one when every table it writes is one
    institution's, else EVERYWHERE."""
    current = _scope.get()
    if current is None:
        return EVERYWHERE
    if sql is None:  # told by the code that sent it (wrote()), which is in the scope
        return current
    if not isinstance(sql, str):
        sql = str(sql)
    tables = _TARGETS.findall(_NOT_A_TARGET.sub(" ", sql))
    if not tables:
        return EVERYWHERE  # DDL, TRUNCATE, or a shape this module does not read
    for table in tables:
        table = table.lower()
        if table.startswith(SHARED_TABLES) or not table.startswith(SCOPED_TABLES):
            return EVERYWHERE
    return current


def is_scoped_table(table: str) -> bool:
    table = table.lower()
    return table.startswith(SCOPED_TABLES) and not table.startswith(SHARED_TABLES)


# --- the counters -----------------------------------------------------------------------------


def institution_key(institution_id: int) -> str:
    return INSTITUTION_KEY.format(int(institution_id))


def current() -> int:
    version = cache.get(KEY)
    return version if version is not None else _start(KEY)


def versions(institution_ids: Iterable[int], found: dict | None = None) -> dict[str, int]:
    """The current versions of these institutions, by key (one round trip, `found` holding
    any already read); a lost one restarts as the global one does."""
    keys = [institution_key(pk) for pk in institution_ids]
    found = dict(found or {})
    missing = [key for key in keys if key not in found]
    if missing:
        found.update(cache.get_many(missing))
    return {key: found[key] if found.get(key) is not None else _start(key) for key in keys}


def bump(institutions: Iterable[int] | None = None) -> int | None:
    """Move the global version on (every page is retired), or, given institutions, only
    theirs. Returns the new global version, or None when only institutions moved."""
    if institutions is None:
        return _incr(KEY)
    for institution_id in sorted(set(institutions)):
        _incr(institution_key(institution_id))
    return None


def _incr(key: str) -> int:
    try:
        return cache.incr(key)
    except ValueError:  # never set, or the cache lost it
        _start(key)
        return cache.incr(key)


def _start(key: str = KEY) -> int:
    # A lost counter (evicted, or the cache emptied) restarts at a random number, so a page
    # still cached under one of its old numbers is not taken for current: 2**62 starts leave
    # no practical chance of landing on a number a cached page holds.
    cache.add(key, secrets.randbits(62), timeout=None)
    return cache.get(key)


# --- noticing writes --------------------------------------------------------------------------


def has_own_writes(using: str = "default") -> bool:
    return getattr(connections[using], "_labgov_wrote", False)


def for_read(using: str = "default") -> int | None:
    """The global version to key a cached page by, or None when this connection must not use
    the cache (it has uncommitted writes of its own)."""
    connection = connections[using]
    if getattr(connection, "_labgov_wrote", False):
        if _in_real_transaction(connection):
            return None
        _after_commit(connection)
    return current()


def _in_real_transaction(connection) -> bool:
    # The atomic blocks a TestCase wraps each test in never commit: inside only those, a
    # write is as good as committed for the code under test.
    return connection.in_atomic_block and not all(
        getattr(block, "_from_testcase", False) for block in connection.atomic_blocks
    )


def is_page_write(sql) -> bool:
    if not isinstance(sql, str):
        sql = str(sql)
    if not _WRITE.match(sql):
        return False
    if sql.lstrip()[:4].lower() == "with" and not _READ_ONLY_WITH.search(sql):
        return False
    if _COPY_OUT.match(sql) or _LAST_LOGIN.match(sql):
        return False
    target = _TARGET.match(sql)
    if target and target.group(1).lower().startswith(IGNORED_TABLES):
        return False
    if _PARTITION_MADE.match(sql):
        return False
    tables = _TARGETS.findall(_NOT_A_TARGET.sub(" ", sql))
    return not (tables and all(t.lower().startswith(PAGELESS_TABLES) for t in tables))


def _after_commit(connection) -> None:
    pending = getattr(connection, "_labgov_pending", None) or {EVERYWHERE}
    connection._labgov_wrote = False
    connection._labgov_pending = set()
    try:
        institutions = _institutions_of(pending)
    except Exception:
        logger.exception("Could not tell which institutions a write concerns; retiring all")
        institutions = None
    try:
        bump(institutions)
    except Exception:
        # The write has committed; failing the request now would not undo it. A cache that
        # cannot be reached cannot serve stale pages either.
        logger.exception("Could not move the data version on")


def _institutions_of(pending) -> frozenset[int] | None:
    """The institutions the pending writes concern, or None for every one."""
    if EVERYWHERE in pending:
        return None
    found: set[int] = set()
    for each in pending:
        institutions = each.institutions()
        if institutions is None:
            return None
        found |= institutions
    return frozenset(found) or None


def wrote(using: str = "default", sql: str | None = None) -> None:
    """For a write the execute wrapper cannot see: SQL sent on a psycopg cursor of Django's
    connection (runpod/billing_store.py), in the scope around it; or, given the statement
    (a COPY, core/bulk.py), counted as the wrapper counts one: its tables decide its scope,
    and a write of tables no page reads counts for none."""
    if sql is not None and not is_page_write(sql):
        return
    _wrote(connections[using], sql)


def _wrote(connection, sql) -> None:
    connection._labgov_wrote = True
    pending = getattr(connection, "_labgov_pending", None)
    if pending is None:
        pending = connection._labgov_pending = set()
    pending.add(_write_scope(sql))
    if not connection.in_atomic_block:
        _after_commit(connection)
    elif not any(
        getattr(func, "_labgov_version", False) for _, func, _ in connection.run_on_commit
    ):
        connection.on_commit(_Bump(connection))


def _notice_writes(execute, sql, params, many, context):
    result = execute(sql, params, many, context)
    if is_page_write(sql) and not _changed_nothing(sql, many, context.get("cursor")):
        _wrote(context["connection"], sql)
    return result


_PLAIN_DML = re.compile(r"\s*(?:insert|update|delete)\b", re.I)
_RETURNING = re.compile(r"\breturning\b", re.I)


def _changed_nothing(sql, many, cursor) -> bool:
    """A plain INSERT, UPDATE or DELETE that touched no row changes no page: the periodic
    jobs' conditional UPDATEs that find nothing to claim or mark (every few minutes) would
    otherwise retire every page each time. Only where the row count is the statement's whole
    effect: not a WITH (its inner writes are not counted), not with RETURNING (SQLite counts
    those rows only as they are fetched), not executemany. A statement trigger may fire on no
    rows, but labgov's one (the ledger totals') adds nothing from an empty insert."""
    if many or cursor is None or not isinstance(sql, str):
        return False
    if not _PLAIN_DML.match(sql) or _RETURNING.search(sql):
        return False
    try:
        return cursor.rowcount == 0
    except Exception:  # a cursor that cannot say: count it as a write
        return False


class _Bump:
    """The after-commit callback, marked so a transaction registers it once however many
    statements it writes (a rolled-back savepoint drops it with the rest)."""

    _labgov_version = True

    def __init__(self, connection):
        self.connection = connection

    def __call__(self) -> None:
        _after_commit(self.connection)


def install(sender=None, connection=None, **kwargs) -> None:
    if _notice_writes not in connection.execute_wrappers:
        connection.execute_wrappers.append(_notice_writes)


def connect() -> None:
    """From CoreConfig.ready: every connection opened from now on, and any already open."""
    connection_created.connect(install, dispatch_uid="labgov-data-version")
    for connection in connections.all(initialized_only=True):
        install(connection=connection)
