"""One object read with the rows its foreign keys point at: PostgreSQL joins them as written.

A detail page reads its object by primary key together with what it points at
(select_related): the alert page joins ten tables (its lab, resource, account, allocation, the
people who acknowledged, snoozed and resolved it…), a transfer twelve, a provisioning request
eight. For such a query PostgreSQL's planner still searches the orders it could join them in
(up to join_collapse_limit, 8, tables at a time): 7 to 11 ms of planning, on the 2-core test
machine, for a statement that then runs in well under a millisecond. Every join there goes
from a key to the one row it names, and the object's own row, found by its key, comes first:
the order as written is the best there is. With join_collapse_limit at 1 for that one
statement the planner keeps it (it still picks how to make each join): 1.3 ms of planning
instead of 11 for the provisioning request's.

The setting is made for the statement and put back at once to what it was (a deployment's
own, from the connection's options or a SET). A statement that fails inside a transaction
aborts it, and rolling back (to the savepoint or the start) undoes the change too, so
nothing is left changed either way.
"""

import contextlib

from django.db import DatabaseError, connections

# From this many tables joined the search costs more than the two statements that turn it
# off: 2 tables plan in 0.2 ms, 5 in about 1 ms, 8 in 7 to 11.
MANY_TABLES = 5


def tables_joined(queryset) -> int:
    """The queryset's own table and those its select_related names (a bare select_related(),
    which labgov does not use, counts as none)."""

    def count(tree) -> int:
        return sum(1 + count(sub) for sub in tree.values()) if isinstance(tree, dict) else 0

    return 1 + count(queryset.query.select_related)


@contextlib.contextmanager
def joins_as_written(queryset):
    """Inside: PostgreSQL joins the tables of each statement in the order the SQL names
    them, when the queryset joins many (MANY_TABLES); as it will otherwise."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql" or tables_joined(queryset) < MANY_TABLES:
        yield
        return
    with connection.cursor() as cursor:
        # The value it had, then 1: one round trip (a select list is evaluated in order).
        cursor.execute(
            "SELECT current_setting('join_collapse_limit'), "
            "set_config('join_collapse_limit', '1', false)"
        )
        (before, _) = cursor.fetchone()
    try:
        yield
    except BaseException:
        # The statement may have aborted the transaction (its rollback undoes the change); in
        # autocommit nothing is aborted and this succeeds.
        with contextlib.suppress(DatabaseError):
            _set(connection, before)
        raise
    _set(connection, before)


def _set(connection, value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('join_collapse_limit', %s, false)", [value])
