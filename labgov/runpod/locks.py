"""The account row's three locks, the first step of the lock order every writer of an account's
synced data follows (the order is written down in labgov/runpod/sync.py's docstring).

PostgreSQL's row locks have four strengths, and these three use how they meet:

- `account_lock_slice` (FOR KEY SHARE): the first statement of a sync slice. Slices hold it
  side by side; it keeps out only `account_lock`.
- `account_lock_serial` (FOR NO KEY UPDATE): taken before anything slices share (resources,
  the ledger and its totals, rollups), held to commit. One holder at a time, and it keeps out
  no slice's `account_lock_slice`, so a slice holding its share can take it.
- `account_lock` (FOR UPDATE): the first statement of every other writer of the account's
  synced data (a re-assignment, a rule, a cost transfer, a removal). It waits for the slices
  in flight and new slices wait for it.

Taking a lock this transaction holds already, or a weaker one, returns at once. Inserting a
row that refers to the account (a resource, a rollup) takes FOR KEY SHARE too, which keeps
out only `account_lock`, as a slice's share does.

On SQLite these do nothing: it lets one transaction write at a time anyway.
"""

from django.db import connection
from django.db.transaction import TransactionManagementError

from labgov.runpod.models import RunpodAccount


def account_lock(account_id: int) -> None:
    """Alone: the first statement of a writer of the account's synced data that is not a
    sync slice."""
    _lock(account_id, "FOR UPDATE")


def account_lock_slice(account_id: int) -> None:
    """A sync slice's share: the first statement of its transaction."""
    _lock(account_id, "FOR KEY SHARE")


def account_lock_serial(account_id: int) -> None:
    """One writer at a time from here to commit: before writing what slices share. A no-op
    under `account_lock`."""
    _lock(account_id, "FOR NO KEY UPDATE")


def _lock(account_id: int, strength: str) -> None:
    if not connection.in_atomic_block:
        raise TransactionManagementError("An account lock outside a transaction holds nothing.")
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # Only this module's constants go into the SQL; the id is a parameter.
        cursor.execute(
            f"SELECT 1 FROM {RunpodAccount._meta.db_table} WHERE id = %s {strength}",  # noqa: S608
            [account_id],
        )
