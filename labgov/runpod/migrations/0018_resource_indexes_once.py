"""A resource's row is written by every sync slice that moves its unattributed spend (one
UPDATE a slice for each resource billed that day): it keeps one index per question it
answers, and room on its page for the new version of the row.

- `account` and `current_allocation` each had two indexes: the foreign key's own and one that
  leads with it (resource_unique_runpod_id, Meta.indexes). Each was one more index entry to
  write each time the row moved off its page.
- fillfactor 70 on PostgreSQL: 30 % of each page stays free, so the row's new version goes on
  the same page with no index entry at all (a heap-only update). In bench/sync_bench.py, at
  the default 100, half of a first sync's 54,556 resource updates found no room and wrote an
  entry in each of the table's seven indexes."""

import django.db.models.deletion
from django.db import migrations, models


def _fillfactor(value: int):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE runpod_resource SET (fillfactor = {value})")

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("funding", "0006_ledger_totals"),
        ("runpod", "0017_unattributed_recount"),
    ]

    operations = [
        migrations.AlterField(
            model_name="resource",
            name="account",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="resources",
                to="runpod.runpodaccount",
            ),
        ),
        migrations.AlterField(
            model_name="resource",
            name="current_allocation",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="funding.allocation",
            ),
        ),
        migrations.RunPython(_fillfactor(70), _fillfactor(100)),
    ]
