"""No index of labgov's tables is another's leading columns again: each one is written on every
insert and update of its table, and one whose columns lead another index answers nothing the
other does not (Django gives every foreign key an index of its own, beside the composite
indexes and unique constraints that lead with it: `db_index=False` where they do)."""

import pytest
from django.apps import apps
from django.db import connection

pytestmark = pytest.mark.django_db


def _labgov_tables() -> set[str]:
    return {
        model._meta.db_table
        for model in apps.get_models()  # not the many-to-many tables Django makes itself
        if model.__module__.startswith("labgov.") and model._meta.managed
    }


def test_no_index_repeats_the_leading_columns_of_another():
    if connection.vendor != "postgresql":
        pytest.skip("read from PostgreSQL's catalogue")
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, i.indexrelid::regclass::text, i.indkey::text, i.indclass::text,
                   i.indisunique, i.indpred IS NOT NULL OR i.indexprs IS NOT NULL
            FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
            WHERE c.relnamespace = 'public'::regnamespace AND NOT c.relispartition
            """
        )
        rows = cursor.fetchall()
    tables = _labgov_tables()
    by_table: dict[str, list] = {}
    for table, name, keys, classes, unique, special in rows:
        if table in tables and not special:
            by_table.setdefault(table, []).append(
                (name, list(zip(keys.split(), classes.split(), strict=True)), unique)
            )
    assert by_table, "no labgov table found"
    repeated = [
        f"{table}: {name} leads {other}"
        for table, indexes in by_table.items()
        for name, columns, unique in indexes
        if not unique
        for other, other_columns, _ in indexes
        if other != name
        and len(other_columns) >= len(columns)
        and other_columns[: len(columns)] == columns
    ]
    assert repeated == []
