"""The data version: one counter in the shared cache that every committed write to labgov's
tables moves on, so a cached page keyed by it is never older than the last write.

Writes are noticed where all of them pass, the database cursor (an execute wrapper on every
connection), not in services or signals: syncs, rollups, attribution, alert evaluation and
invoicing write in bulk and in raw SQL, which sends no signals, and a hook in each of ~100
write sites would be missed by the next one. A write inside a transaction bumps the version
once, after commit (a page computed from the old data meanwhile is stored under the old
version, which is dead by then); a write in autocommit bumps at once.

A connection that has written and not committed (a request inside its own transaction, or a
test, whose transaction never commits) sees data nobody else does: `for_read` answers None
inside a real transaction (read around the cache) and, outside one, bumps first, so a page
read right after a write on the same connection is fresh."""

import logging
import re
import secrets

from django.core.cache import caches
from django.db import connections
from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

KEY = "labgov:data-version"


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

_WRITE = re.compile(
    r"\s*(?:insert|update|delete|merge|truncate|alter|create|drop|with|copy)\b", re.I
)
_COPY_OUT = re.compile(r"\s*copy\b.*\bto\s+stdout\b", re.I | re.S)
_TARGET = re.compile(r'\s*(?:insert\s+into|update|delete\s+from)\s+"?(\w+)"?', re.I)
_READ_ONLY_WITH = re.compile(r"\b(?:insert|update|delete|merge)\b", re.I)


def current() -> int:
    version = cache.get(KEY)
    return version if version is not None else _start()


def bump() -> int:
    try:
        return cache.incr(KEY)
    except ValueError:  # never set, or the cache lost it
        _start()
        return cache.incr(KEY)


def _start() -> int:
    # A lost counter (evicted, or the cache emptied) restarts at a random number, so a page
    # still cached under one of its old numbers is not taken for current: 2**62 starts leave
    # no practical chance of landing on a number a cached page holds.
    cache.add(KEY, secrets.randbits(62), timeout=None)
    return cache.get(KEY)


def has_own_writes(using: str = "default") -> bool:
    return getattr(connections[using], "_labgov_wrote", False)


def for_read(using: str = "default") -> int | None:
    """The version to key a cached page by, or None when this connection must not use the
    cache (it has uncommitted writes of its own)."""
    connection = connections[using]
    if getattr(connection, "_labgov_wrote", False):
        if _in_real_transaction(connection):
            return None
        connection._labgov_wrote = False
        return bump()
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
    return not (target and target.group(1).lower().startswith(IGNORED_TABLES))


def _after_commit(connection) -> None:
    connection._labgov_wrote = False
    try:
        bump()
    except Exception:
        # The write has committed; failing the request now would not undo it. A cache that
        # cannot be reached cannot serve stale pages either.
        logger.exception("Could not move the data version on")


def wrote(using: str = "default") -> None:
    """For a write the execute wrapper cannot see: SQL sent on a psycopg cursor of Django's
    connection (runpod/billing_store.py)."""
    _wrote(connections[using])


def _wrote(connection) -> None:
    connection._labgov_wrote = True
    if not connection.in_atomic_block:
        _after_commit(connection)
    elif not any(
        getattr(func, "_labgov_version", False) for _, func, _ in connection.run_on_commit
    ):
        connection.on_commit(_Bump(connection))


def _notice_writes(execute, sql, params, many, context):
    result = execute(sql, params, many, context)
    if is_page_write(sql):
        _wrote(context["connection"])
    return result


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
