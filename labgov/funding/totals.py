"""The ledger's running totals (`LedgerTotal`), kept by the database itself.

An AFTER INSERT trigger on `funding_ledgerentry` adds every inserted entry to the total of its
funding source and, when it has one, of its allocation, in the inserting transaction: whatever
code inserts entries (a service's `create`, the sync's `bulk_create`, raw SQL), the totals
follow, and a rolled-back insert rolls its totals back with it. The ledger refuses updates and
deletes (`core/append_only.py`), so inserts are the only change there is to follow.

- PostgreSQL: one statement-level trigger with a transition table, so a sync posting a
  thousand entries makes one grouped upsert, in a fixed order (no deadlock between two
  posters).
- SQLite (the demo): a row-level trigger. SQLite drops a table's triggers when a migration
  rebuilds it, so `ensure_sqlite_trigger` puts it back after every migrate.
"""

from decimal import Decimal

from django.db import connection as default_connection
from django.db import transaction

# The kinds summed as committed and as spent, as SQL lists for every statement below
# (models.py's COMMITTED_KINDS and SPENT_KINDS; a test holds them equal).
COMMITTED = "('commitment', 'release')"
SPENT = "('usage', 'adjustment')"


def _sums(entries: str) -> str:
    """The totals of the ledger rows in `entries` (the ledger, or a trigger's new rows), one
    row per owner: a source's total counts all its entries, an allocation's only its own."""
    amounts = (
        f"CASE WHEN kind IN {COMMITTED} THEN amount_usd ELSE 0 END AS committed, "
        f"CASE WHEN kind IN {SPENT} THEN amount_usd ELSE 0 END AS spent"
    )
    return (
        # Only this module's constant table names go in: nothing from outside reaches the SQL.
        "SELECT owner_kind, owner_id, sum(committed), sum(spent) FROM ("  # noqa: S608
        f" SELECT 'funding_source' AS owner_kind, funding_source_id AS owner_id, {amounts}"
        f" FROM {entries}"
        " UNION ALL"
        f" SELECT 'allocation' AS owner_kind, allocation_id AS owner_id, {amounts}"
        f" FROM {entries} WHERE allocation_id IS NOT NULL"
        ") AS e GROUP BY owner_kind, owner_id"
    )


# The totals as the entries' sums, to fill the table and to check it.
SUMS = _sums("funding_ledgerentry")

PG_INSTALL = (
    """
CREATE OR REPLACE FUNCTION funding_ledger_totals_add() RETURNS trigger AS $$
BEGIN
    INSERT INTO funding_ledgertotal (owner_kind, owner_id, committed_usd, spent_usd)
    """
    + _sums("new_entries")
    + """
    ORDER BY owner_kind, owner_id
    ON CONFLICT (owner_kind, owner_id) DO UPDATE SET
        committed_usd = funding_ledgertotal.committed_usd + EXCLUDED.committed_usd,
        spent_usd = funding_ledgertotal.spent_usd + EXCLUDED.spent_usd;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER funding_ledgerentry_totals
    AFTER INSERT ON funding_ledgerentry
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION funding_ledger_totals_add();
"""
)
PG_UNINSTALL = """
DROP TRIGGER IF EXISTS funding_ledgerentry_totals ON funding_ledgerentry;
DROP FUNCTION IF EXISTS funding_ledger_totals_add();
"""


def _sqlite_upsert(owner_kind: str, owner_column: str) -> str:
    return f"""
        INSERT INTO funding_ledgertotal (owner_kind, owner_id, committed_usd, spent_usd)
        SELECT '{owner_kind}', NEW.{owner_column},
               CASE WHEN NEW.kind IN {COMMITTED} THEN NEW.amount_usd ELSE 0 END,
               CASE WHEN NEW.kind IN {SPENT} THEN NEW.amount_usd ELSE 0 END
        WHERE NEW.{owner_column} IS NOT NULL
        ON CONFLICT (owner_kind, owner_id) DO UPDATE SET
            committed_usd = committed_usd + excluded.committed_usd,
            spent_usd = spent_usd + excluded.spent_usd;"""


SQLITE_INSTALL = f"""
CREATE TRIGGER IF NOT EXISTS funding_ledgerentry_totals AFTER INSERT ON funding_ledgerentry
BEGIN
    {_sqlite_upsert("funding_source", "funding_source_id")}
    {_sqlite_upsert("allocation", "allocation_id")}
END;
"""
SQLITE_UNINSTALL = "DROP TRIGGER IF EXISTS funding_ledgerentry_totals"


def install(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_INSTALL)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_INSTALL)


def uninstall(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_UNINSTALL)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_UNINSTALL)


def ensure_sqlite_trigger(using: str = "default") -> None:
    from django.db import connections

    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    tables = set(connection.introspection.table_names())
    if {"funding_ledgerentry", "funding_ledgertotal"} <= tables:
        with connection.cursor() as cursor:
            cursor.execute(SQLITE_INSTALL)


def _lock(cursor, connection) -> None:
    """No entry may be inserted between reading the sums and writing them."""
    if connection.vendor == "postgresql":
        cursor.execute("LOCK TABLE funding_ledgerentry IN SHARE ROW EXCLUSIVE MODE")
        cursor.execute("LOCK TABLE funding_ledgertotal IN SHARE ROW EXCLUSIVE MODE")


def rebuild(connection=default_connection) -> int:
    """Set every total to the sums of the entries (after a restore from an older backup, or
    if a check finds a difference). Returns the number of totals written."""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        _lock(cursor, connection)
        cursor.execute("DELETE FROM funding_ledgertotal")
        cursor.execute(
            "INSERT INTO funding_ledgertotal (owner_kind, owner_id, committed_usd, spent_usd) "
            + SUMS
        )
        return cursor.rowcount


def differences(connection=default_connection) -> list[tuple[str, int, Decimal, Decimal]]:
    """(owner kind, owner id, difference committed, difference spent) for every total that is
    not the sum of its entries; empty when all agree."""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        _lock(cursor, connection)
        cursor.execute(SUMS)
        expected = {(k, i): (c, s) for k, i, c, s in cursor.fetchall()}
        cursor.execute(
            "SELECT owner_kind, owner_id, committed_usd, spent_usd FROM funding_ledgertotal"
        )
        actual = {(k, i): (c, s) for k, i, c, s in cursor.fetchall()}
    # SQLite sums decimals as floating point: there, agreement is to a millionth of a cent.
    tolerance = Decimal("0") if connection.vendor == "postgresql" else Decimal("1e-6")
    found = []
    for key in sorted(set(expected) | set(actual)):
        c0, s0 = (Decimal(str(v or 0)) for v in expected.get(key, (0, 0)))
        c1, s1 = (Decimal(str(v or 0)) for v in actual.get(key, (0, 0)))
        if abs(c1 - c0) > tolerance or abs(s1 - s0) > tolerance:
            found.append((key[0], key[1], c1 - c0, s1 - s0))
    return found
