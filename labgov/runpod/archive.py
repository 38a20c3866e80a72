"""Archiving months of billing records (PostgreSQL): detach a closed month's partition, dump
it with `pg_dump -t`, drop it; restore it with `pg_restore` and attach it again.

A detached month's records leave the billing table (the parent no longer sees them) but
nothing built from them moves: daily and monthly rollups, ledger usage and invoices stay as
they were, so pages keep showing the month. Only a month finance has closed for every
institution with records in it may go, and never the current month or a later one: those
are still being synced. Each detach and attach is audited once per institution concerned,
on the closed period that froze its records.
"""

import datetime as dt
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.runpod.partitions import (
    PARENT,
    bounds,
    forget,
    is_partitioned,
    month_of_table,
    month_start,
    table_name,
)
from labgov.usage.models import ClosedPeriod
from labgov.usage.periods import closed_until, month_of

POSTGRESQL_ONLY = (
    "Billing partitions exist on PostgreSQL only; on this database billing records are one "
    "plain table, with nothing to detach or attach."
)


@dataclass(frozen=True)
class InstitutionShare:
    institution_id: int
    rows: int
    last_bucket: dt.datetime
    closed_until: dt.datetime | None

    @property
    def closed(self) -> bool:
        return self.closed_until is not None and self.last_bucket < self.closed_until


@dataclass(frozen=True)
class MonthPartition:
    month: dt.date
    table: str
    attached: bool
    rows: int
    size_bytes: int
    institutions: list[InstitutionShare]

    @property
    def closed(self) -> bool:
        """Closed for every institution with records in it (an empty month is closed)."""
        return all(share.closed for share in self.institutions)


def _require_partitioned() -> None:
    if connection.vendor != "postgresql" or not is_partitioned():
        raise DomainError(POSTGRESQL_ONLY)


def _tables() -> dict[dt.date, tuple[str, bool]]:
    """Every month's table, attached or not: month -> (table, attached)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, c.relispartition FROM pg_class c
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
              AND c.relname LIKE %s
            """,
            [f"{PARENT}\\_p%"],
        )
        rows = cursor.fetchall()
    found = {}
    for name, attached in rows:
        month = month_of_table(name)
        if month is not None and name == table_name(month):
            found[month] = (name, attached)
    return found


def _shares(table: str) -> list[InstitutionShare]:
    """Who has records in one month's table, how many, and up to when their spend is frozen."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT a.institution_id, sum(per.n), max(per.last)
            FROM (SELECT resource_id, count(*) AS n, max(bucket_start) AS last
                  FROM "{table}" GROUP BY resource_id) per
            JOIN runpod_resource r ON r.id = per.resource_id
            JOIN runpod_runpodaccount a ON a.id = r.account_id
            GROUP BY a.institution_id ORDER BY a.institution_id
            """  # noqa: S608 - `table` is one of ours, named by table_name()
        )
        rows = cursor.fetchall()
    return [
        InstitutionShare(
            institution_id=institution_id,
            rows=int(rows_in),
            last_bucket=last,
            closed_until=closed_until(institution_id),
        )
        for institution_id, rows_in, last in rows
    ]


def _partition(month: dt.date, table: str, attached: bool) -> MonthPartition:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*), pg_total_relation_size(%s) FROM "{table}"', [table])  # noqa: S608
        rows, size = cursor.fetchone()
    return MonthPartition(
        month=month,
        table=table,
        attached=attached,
        rows=rows,
        size_bytes=size,
        institutions=_shares(table),
    )


def billing_months() -> list[MonthPartition]:
    """Every month of billing records, attached or detached, oldest first."""
    _require_partitioned()
    return [
        _partition(month, table, attached) for month, (table, attached) in sorted(_tables().items())
    ]


def _audit(*, actor, action: str, part: MonthPartition, note: str) -> None:
    from labgov.accounts.models import Institution

    zones = dict(
        Institution.objects.filter(
            pk__in=[s.institution_id for s in part.institutions]
        ).values_list("pk", "time_zone")
    )
    for share in part.institutions:
        # On the closed period that froze the latest of its records in this month (the
        # institution itself if none did: a restored month attached after the fact).
        target = (
            ClosedPeriod.objects.filter(
                institution_id=share.institution_id,
                month__lte=month_of(share.last_bucket, zones[share.institution_id]),
            )
            .order_by("-month")
            .first()
        ) or Institution.objects.get(pk=share.institution_id)
        audit_record(
            actor=actor,
            action=action,
            target=target,
            institution_id=share.institution_id,
            after={"month": f"{part.month:%Y-%m}", "table": part.table, "records": share.rows},
            note=note,
        )


@transaction.atomic
def billing_month_detach(
    *, actor, month: dt.date, now: dt.datetime | None = None
) -> MonthPartition:
    """Detach one month's partition from billing, leaving its table for `pg_dump -t`."""
    _require_partitioned()
    month = month.replace(day=1)
    now = now or timezone.now()
    if month >= month_start(now):
        raise DomainError(
            f"{month:%B %Y} is the current month or a later one: its records are still being "
            "synced. Only a past month that finance has closed can be detached."
        )
    found = _tables().get(month)
    if found is None:
        raise DomainError(f"There is no partition of billing records for {month:%B %Y}.")
    table, attached = found
    if not attached:
        raise DomainError(f"{month:%B %Y} is already detached (table {table}).")
    part = _partition(month, table, attached)
    if not part.institutions:
        raise DomainError(
            f"{month:%B %Y} holds no billing records: there is nothing to archive (an empty "
            "partition costs nothing; leave it attached)."
        )
    open_for = [share for share in part.institutions if not share.closed]
    if open_for:
        from labgov.accounts.models import Institution

        names = ", ".join(
            Institution.objects.filter(pk__in=[s.institution_id for s in open_for])
            .order_by("name")
            .values_list("name", flat=True)
        )
        raise DomainError(
            f"{month:%B %Y} is not closed for every institution with records in it (still "
            f"open for: {names}). Finance closes a month before its records can be archived."
        )
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{PARENT}" DETACH PARTITION "{table}"')
    forget([month])
    _audit(
        actor=actor,
        action="billing.month_detach",
        part=part,
        note=f"Billing records of {month:%B %Y} detached for archiving (table {table}).",
    )
    return MonthPartition(**{**part.__dict__, "attached": False})


@transaction.atomic
def billing_month_attach(*, actor, month: dt.date) -> MonthPartition:
    """Put a detached (or restored) month's table back into billing."""
    _require_partitioned()
    month = month.replace(day=1)
    found = _tables().get(month)
    if found is None:
        raise DomainError(
            f"There is no table {table_name(month)} for {month:%B %Y}: restore it from its "
            "archive (pg_restore) first."
        )
    table, attached = found
    if attached:
        raise DomainError(f"{month:%B %Y} is attached already.")
    start, end = bounds(month)
    with connection.cursor() as cursor:
        # Its own rows are checked against the month's bounds as it is attached.
        cursor.execute(
            f'ALTER TABLE "{PARENT}" ATTACH PARTITION "{table}" '
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    part = _partition(month, table, True)
    _audit(
        actor=actor,
        action="billing.month_attach",
        part=part,
        note=f"Billing records of {month:%B %Y} attached again (table {table}).",
    )
    return part
