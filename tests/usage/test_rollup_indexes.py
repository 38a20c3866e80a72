"""The rollups' indexes: every foreign key leads an index of its table (a lookup by it, and the
check a protected row's delete makes, read an index), and none has a single-column index of
its own beside one it leads (usage/models.py, SpendRollup)."""

import importlib

import pytest
from django.db import connection

from labgov.usage.models import DailySpend, LabDailySpend, MonthlySpend, SourceMonthlySpend

ROLLUPS = [DailySpend, MonthlySpend, LabDailySpend, SourceMonthlySpend]
MIGRATION = importlib.import_module("labgov.usage.migrations.0011_rollup_indexes_lead_with_keys")


def _indexes(table: str) -> dict[str, dict]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return {name: info for name, info in found.items() if info["index"] or info["unique"]}


def _foreign_key_columns(model) -> list[str]:
    return [f.column for f in model._meta.concrete_fields if f.is_relation]


def _singles(table: str) -> set[str]:
    """Columns with a plain (not unique) index of their own."""
    return {
        info["columns"][0]
        for info in _indexes(table).values()
        if len(info["columns"]) == 1 and not info["unique"] and not info["primary_key"]
    }


def _foreign_keys(table: str) -> set[tuple]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return {
        (tuple(info["columns"]), info["foreign_key"])
        for info in found.values()
        if info["foreign_key"]
    }


@pytest.mark.parametrize("model", ROLLUPS, ids=lambda m: m.__name__)
def test_every_foreign_key_leads_an_index_and_none_has_a_second_one(db, model):
    table = model._meta.db_table
    indexes = _indexes(table)
    leading = {info["columns"][0] for info in indexes.values() if info["columns"]}
    wider = {info["columns"][0] for info in indexes.values() if len(info["columns"]) > 1}
    columns = _foreign_key_columns(model)
    assert columns  # the model has foreign keys to check
    assert [c for c in columns if c not in leading] == []
    # A single-column index of a key that leads a wider one too is kept up for no reader.
    assert _singles(table) & wider == set()


def test_the_migration_names_the_indexes_django_made():
    """The migration drops the single-column indexes by name: the names Django gives a
    foreign key's index, on any database (its tables' and columns' own)."""
    editor = connection.schema_editor()
    for table, column, index in MIGRATION.UNINDEXED:
        model = next(m for m in ROLLUPS if m._meta.db_table == table)
        assert column in _foreign_key_columns(model)
        assert editor._create_index_name(table, [column], suffix="") == index


def test_the_migration_drops_only_the_single_indexes_and_makes_them_going_back(postgres):
    """The migration's SQL, back and forth, inside the test's transaction (PostgreSQL's DDL is
    transactional; the whole migration is undone by tests/runpod/test_partitions.py). The
    foreign key constraints stay as they are."""
    tables = [m._meta.db_table for m in ROLLUPS]
    constraints = {t: _foreign_keys(t) for t in tables}
    assert all(constraints.values())

    with connection.cursor() as cursor:
        for statement in MIGRATION.MAKE:
            cursor.execute(statement)
    # Back: each key has its single-column index again, by the name Django first gave it.
    daily = _indexes(DailySpend._meta.db_table)
    for field in ("account", "allocation", "funding_source", "institution", "lab", "user"):
        column = DailySpend._meta.get_field(field).column
        names = [n for n, i in daily.items() if i["columns"] == [column] and not i["unique"]]
        assert len(names) == 1 and names[0].startswith(f"usage_dailyspend_{column}_"), names
    assert _singles(LabDailySpend._meta.db_table) == {"account_id", "lab_id"}
    assert _singles(SourceMonthlySpend._meta.db_table) == {
        "account_id",
        "institution_id",
        "funding_source_id",
    }
    assert len(_singles(MonthlySpend._meta.db_table)) == 6
    assert {t: _foreign_keys(t) for t in tables} == constraints

    with connection.cursor() as cursor:
        for statement in MIGRATION.DROP * 2:  # twice: nothing left to drop the second time
            cursor.execute(statement)
    assert _singles(DailySpend._meta.db_table) == set()
    assert _singles(LabDailySpend._meta.db_table) == set()
    assert _singles(MonthlySpend._meta.db_table) == set()
    # Its funding source leads no index but its own (the unique ones lead with the account).
    assert _singles(SourceMonthlySpend._meta.db_table) == {"funding_source_id"}
    assert {t: _foreign_keys(t) for t in tables} == constraints
