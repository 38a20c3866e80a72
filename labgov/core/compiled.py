"""Hot read queries compiled to SQL once per process.

Django builds and compiles a queryset on every call: for a page's small queries of a fixed
shape that costs several times what PostgreSQL takes to answer them (2 ms against 0.3 ms
for the scope every page reads). A `CompiledValues` builds its values_list queryset once with
stand-in values, keeps the SQL, and runs it again with the real values in the stand-ins'
places. The queryset stays the one definition of the query.

Only for querysets whose shape does not depend on the values (no IN list of varying length:
`field__any_of=ids` is one instead, `= ANY(%s)` with the ids as one array on PostgreSQL; no
branch on them: a shape or a parameter that differs between two compilations with
different stand-ins is refused, and the queryset is then built each time), that read no
clock (a `now()` inside the build would be kept as a constant), and whose columns need no
converter (ints, text, booleans, dates and numerics on PostgreSQL). Elsewhere (SQLite,
whose adapters turn dates into text) the queryset is built and run each time, as before.
"""

import datetime as dt
import functools
import threading
from collections.abc import Callable

from django.db import connections
from django.db.models import Field, QuerySet
from django.db.models.lookups import In


@Field.register_lookup
class AnyOf(In):
    """`field__any_of=ids`: what `__in` selects, as `field = ANY(%s)` with the ids in one
    array parameter on PostgreSQL, so the SQL is the same however many ids there are (and an
    empty list selects nothing); `IN (…)` elsewhere."""

    lookup_name = "any_of"

    def as_postgresql(self, compiler, connection):
        if self.rhs_is_direct_value():
            lhs, lhs_params = self.process_lhs(compiler, connection)
            values = [value for value in self.rhs if value is not None]
            return f"{lhs} = ANY(%s)", (*lhs_params, values)
        return self.as_sql(compiler, connection)


# Values no real query carries, one per parameter: a stand-in found among the compiled
# parameters is the slot of its value.
def _stand_in(value, i: int):
    if isinstance(value, list | tuple | set | frozenset):  # ids for an any_of
        return [_stand_in(0, i)]
    if isinstance(value, bool):
        raise TypeError("a boolean cannot have a stand-in")
    if isinstance(value, int):
        return -739_104_253 - i
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return dt.date(1, 2, 3) + dt.timedelta(days=i)
    raise TypeError(f"no stand-in for {type(value).__name__}")


class CompiledValues:
    """`build(**values)` returns a values_list queryset; `rows(**values)` runs it. Its
    values are ints (ids), dates and collections of ids (for an `any_of`), passed by name."""

    def __init__(self, build: Callable[..., QuerySet], *, prepared: bool | None = None):
        """`prepared`: whether PostgreSQL keeps the query prepared (parsed once and, where a
        generic plan is as cheap, planned once); by default a query taking dates is planned
        each time for its dates, the rest is prepared (see rows)."""
        self.build = build
        self.prepared = prepared
        self._compiled: dict[str, tuple[str, list, dict[int, str]] | None] = {}
        # Per compiled key: whether its rows hold a timestamptz (known after its first run).
        self._timestamps: dict[str, bool] = {}
        self._lock = threading.Lock()

    def _compile(self, alias: str, values: dict) -> tuple[str, list, dict[int, str]] | None:
        """The SQL, its parameters and which of them are the values; None when the queryset
        cannot be compiled once (the caller then builds it each time)."""
        compiled = []
        # Twice, with two sets of stand-ins: a parameter that is not a value's slot must be
        # the same in both, or the build derived it from a value (`day + 1`, a date's month):
        # kept, it would be a constant of the first compilation, wrong for every later value.
        for offset in (0, len(values) + 1):
            stand_ins = {
                name: _stand_in(value, offset + i) for i, (name, value) in enumerate(values.items())
            }
            sql, params = self.build(**stand_ins).query.get_compiler(using=alias).as_sql()
            slots = {}
            for i, param in enumerate(params):
                for name, stand_in in stand_ins.items():
                    if type(param) is type(stand_in) and param == stand_in:
                        slots[i] = name
            if set(slots.values()) != set(stand_ins):
                return None  # a stand-in was adapted (SQLite's dates) or is not a parameter
            compiled.append((sql, list(params), slots))
        (sql, params, slots), (other_sql, other_params, other_slots) = compiled
        if sql != other_sql or slots != other_slots or len(params) != len(other_params):
            return None  # the shape depends on the values
        if any(params[i] != other_params[i] for i in range(len(params)) if i not in slots):
            return None  # a parameter derived from a value
        return sql, params, slots

    def rows(self, using: str = "default", **values) -> list[tuple]:
        connection = connections[using]
        if connection.vendor != "postgresql":
            return list(self.build(**values))
        key = f"{connection.alias}:{','.join(values)}"
        if key not in self._compiled:
            with self._lock:
                self._compiled[key] = self._compile(connection.alias, values)
        compiled = self._compiled[key]
        if compiled is None:
            return list(self.build(**values))
        sql, params, slots = compiled
        params = list(params)
        for i, name in slots.items():
            value = values[name]
            params[i] = list(value) if isinstance(value, tuple | set | frozenset) else value
        # A range of days is planned for its days: a generic plan, made once for any range,
        # guesses a range holds a few rows (16 of a lab's 3,900 in 30 days), and read a lab's
        # days of rollups by sorting them, at 1.3-4x the CPU of a plan for those dates. A query
        # of few rows whatever the range (a person's own, the rollups by lab) stays prepared.
        prepared = self.prepared
        if prepared is None:
            prepared = not any(isinstance(v, dt.date) for v in values.values())
        with _prepared_cursor(connection) if prepared else connection.cursor() as cursor:
            if self._timestamps.get(key) and _utc_session(connection):
                _fast_timestamps(cursor.cursor)
            cursor.execute(sql, params)
            if key not in self._timestamps:
                self._timestamps[key] = any(
                    column.type_code == _TIMESTAMPTZ for column in cursor.description or ()
                )
            return cursor.fetchall()


_TIMESTAMPTZ = 1184  # PostgreSQL's type oid


def _utc_session(connection) -> bool:
    """Whether Django loads this connection's timestamptz values as UTC-aware datetimes, the
    session's own time zone (USE_TZ with TIME_ZONE UTC: Django sets the session's to it)."""
    return connection.timezone is dt.UTC and connection.timezone_name == "UTC"


def _fast_timestamps(cursor) -> None:
    """psycopg's own timestamptz loader for this cursor, in place of Django's. Django's (a
    Python subclass, which re-stamps each value with the connection's time zone) parses each
    value in Python; psycopg's, registered as its own class, is its C one, and in a UTC session
    gives the same UTC-aware datetimes. The running-now query of a lab's page (43 rows, three
    timestamps each) read 0.95 -> 0.37 ms of CPU. On the cursor only: Django reads the
    connection's loader (its time zone) for every cursor it makes."""
    from psycopg.types.datetime import TimestamptzLoader

    cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


def _prepared_cursor(connection):
    """A cursor whose queries PostgreSQL keeps prepared on the connection (parsed and, once
    a generic plan is found as cheap, planned once): PostgreSQL planned the small compiled
    queries on every request, at about what running them costs. Server-side
    binding, as psycopg prepares only that; still Django's wrapper, so the queries are
    counted, logged and seen by the execute wrappers like any other. Django's own cursor
    when prepared statements are off (DATABASES OPTIONS prepare_threshold None, for a
    pooler that cannot keep them)."""
    connection.ensure_connection()
    if connection.connection.prepare_threshold is None:
        return connection.cursor()
    with connection.wrap_database_errors:
        raw = _prepared_cursor_class()(connection.connection)
    return connection._prepare_cursor(raw)


@functools.cache
def _prepared_cursor_class():
    """Made once, on first use: its base is PostgreSQL's (psycopg), which a SQLite install
    need not import."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    class Prepared(ServerBindingCursor):
        def _maybe_prepare_gen(self, pgq, *, prepare=None, binary=None):
            # psycopg keeps the query Django logs (connection.queries, CaptureQueriesContext)
            # only for statements it does not prepare: the one that ran, with $1… in it.
            self._query = pgq
            return super()._maybe_prepare_gen(pgq, prepare=True, binary=binary)

    return Prepared
