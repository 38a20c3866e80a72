"""Billing records partitioned by calendar month (UTC) on PostgreSQL (README, "Billing
partitions"; labgov/runpod/partitions.py says why there is no default partition).

The model does not change: same columns, primary key (resource_id, bucket_start) and check
constraint, so Django's state is untouched. Existing rows move into their months; the months
they cover, the current one and the next three get partitions. Reversing turns billing back
into one plain table with every attached month's rows; it refuses while a month is detached,
whose rows would otherwise be left behind.

Self-contained on purpose (no import of labgov.runpod.partitions): a migration must keep
doing what it did when the code around it changes.
"""

import datetime as dt

from django.db import migrations

PARENT = "runpod_billingrecord"
MONTHS_AHEAD = 3


def _next(month: dt.date) -> dt.date:
    return (month + dt.timedelta(days=32)).replace(day=1)


def _relkind(cursor, name: str):
    cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [name])
    row = cursor.fetchone()
    return row[0] if row else None


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        if _relkind(cursor, PARENT) == "p":
            return
        cursor.execute(
            f"SELECT DISTINCT date_trunc('month', bucket_start AT TIME ZONE 'UTC')::date "
            f"FROM {PARENT}"
        )
        months = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT date_trunc('month', now() AT TIME ZONE 'UTC')::date")
        month = cursor.fetchone()[0]
        for _ in range(MONTHS_AHEAD + 1):
            months.add(month)
            month = _next(month)
        old = f"{PARENT}_unpartitioned"
        cursor.execute(f"ALTER TABLE {PARENT} RENAME TO {old}")
        cursor.execute(f"ALTER TABLE {old} RENAME CONSTRAINT {PARENT}_pkey TO {old}_pkey")
        # Same columns in the same order, with their defaults and the check constraint.
        cursor.execute(
            f"CREATE TABLE {PARENT} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (bucket_start)"
        )
        cursor.execute(
            f"ALTER TABLE {PARENT} ADD CONSTRAINT {PARENT}_pkey PRIMARY KEY (resource_id, bucket_start)"
        )
        for month in sorted(months):
            cursor.execute(
                f"CREATE TABLE {PARENT}_p{month:%Y_%m} PARTITION OF {PARENT} "
                f"FOR VALUES FROM ('{month.isoformat()} 00:00:00+00') "
                f"TO ('{_next(month).isoformat()} 00:00:00+00')"
            )
        cursor.execute(f"INSERT INTO {PARENT} SELECT * FROM {old}")
        cursor.execute(f"DROP TABLE {old}")
        cursor.execute(f"ANALYZE {PARENT}")


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        if _relkind(cursor, PARENT) != "p":
            return
        cursor.execute(
            """
            SELECT c.relname FROM pg_class c
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
              AND c.relname LIKE %s AND NOT c.relispartition ORDER BY 1
            """,
            [f"{PARENT}\\_p%"],
        )
        detached = [row[0] for row in cursor.fetchall()]
        if detached:
            raise RuntimeError(
                "Billing months are detached (" + ", ".join(detached) + "): attach them "
                "(manage.py billing_partitions attach YYYY-MM) or drop them before turning "
                "billing back into one table, or their records would be left behind."
            )
        plain = f"{PARENT}_plain"
        cursor.execute(
            f"CREATE TABLE {plain} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE INCLUDING COMMENTS)"
        )
        cursor.execute(f"INSERT INTO {plain} SELECT * FROM {PARENT}")
        cursor.execute(f"DROP TABLE {PARENT}")  # and its partitions
        cursor.execute(f"ALTER TABLE {plain} RENAME TO {PARENT}")
        cursor.execute(
            f"ALTER TABLE {PARENT} ADD CONSTRAINT {PARENT}_pkey PRIMARY KEY (resource_id, bucket_start)"
        )
        cursor.execute(f"ANALYZE {PARENT}")


class Migration(migrations.Migration):
    dependencies = [
        ("runpod", "0008_assignment_share"),
    ]

    operations = [migrations.RunPython(partition, unpartition)]
