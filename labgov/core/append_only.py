"""Rows that are written once and never changed: ledger entries, audit events.

Python refuses updates and deletes here; a database trigger (see `append_only_trigger_sql`,
installed by each app's migration) refuses them for anything that bypasses the ORM.
"""

from django.db import models


class AppendOnlyError(Exception):
    pass


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only; add a correction")

    def delete(self):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only; add a correction")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only; add a correction")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only; add a correction")


def append_only_trigger_operations(table: str):
    """Migration operations installing triggers that reject UPDATE and DELETE on `table`."""
    from django.db import migrations

    def forwards(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor == "postgresql":
            schema_editor.execute(
                f"""
                CREATE OR REPLACE FUNCTION labgov_append_only() RETURNS trigger AS $$
                BEGIN
                    RAISE EXCEPTION USING MESSAGE =
                        'append-only table ' || TG_TABLE_NAME || ': ' || TG_OP || ' refused';
                END;
                $$ LANGUAGE plpgsql;
                CREATE TRIGGER {table}_append_only
                    BEFORE UPDATE OR DELETE ON {table}
                    FOR EACH ROW EXECUTE FUNCTION labgov_append_only();
                """
            )
        elif vendor == "sqlite":
            for op in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"""
                    CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table}
                    BEGIN SELECT RAISE(ABORT, 'append-only table {table}: {op} refused'); END;
                    """
                )

    def backwards(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        elif vendor == "sqlite":
            for op in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{op}")

    return [migrations.RunPython(forwards, backwards)]


def ensure_sqlite_triggers(using: str = "default") -> None:
    """SQLite rebuilds a table for most schema changes and drops its triggers with it, so
    after every migrate the append-only triggers are put back (PostgreSQL keeps them)."""
    from django.apps import apps
    from django.db import connections

    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        for model in apps.get_models():
            if not issubclass(model, AppendOnlyModel):
                continue
            table = model._meta.db_table
            for op in ("UPDATE", "DELETE"):
                cursor.execute(
                    f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'append-only table {table}: {op} refused'); END;"
                )
