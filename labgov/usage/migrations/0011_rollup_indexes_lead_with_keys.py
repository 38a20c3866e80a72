"""The rollups' foreign keys lose their single-column indexes: each table's own indexes lead
with every one of them (MonthlySpend gains those it lacked: allocation, lab and person, then
the month), so the single ones served no reader and cost every rollup write (usage/models.py,
SpendRollup).

The database only drops (or, going back, makes) those indexes: Django's AlterField would also
drop each foreign key constraint and add it again, checking every rollup row once per key
under a lock on the table."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (model, field) whose single-column index goes.
UNINDEXED = [
    ("dailyspend", "account"),
    ("dailyspend", "allocation"),
    ("dailyspend", "funding_source"),
    ("dailyspend", "institution"),
    ("dailyspend", "lab"),
    ("dailyspend", "user"),
    ("labdailyspend", "account"),
    ("labdailyspend", "lab"),
    ("monthlyspend", "account"),
    ("monthlyspend", "allocation"),
    ("monthlyspend", "funding_source"),
    ("monthlyspend", "institution"),
    ("monthlyspend", "lab"),
    ("monthlyspend", "user"),
    ("sourcemonthlyspend", "account"),
    ("sourcemonthlyspend", "institution"),
]


def _single_indexes(schema_editor, model, column: str) -> list[str]:
    """The names of the plain indexes on exactly this one column."""
    with schema_editor.connection.cursor() as cursor:
        found = schema_editor.connection.introspection.get_constraints(cursor, model._meta.db_table)
    return [
        name
        for name, info in found.items()
        if info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] == [column]
    ]


def drop_indexes(apps, schema_editor):
    for model_name, field_name in UNINDEXED:
        model = apps.get_model("usage", model_name)
        column = model._meta.get_field(field_name).column
        for name in _single_indexes(schema_editor, model, column):
            schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")


def make_indexes(apps, schema_editor):
    # `apps` is the state before this migration: its fields have db_index, and Django's own
    # SQL for a field's index gives the name the first migration gave it.
    for model_name, field_name in UNINDEXED:
        model = apps.get_model("usage", model_name)
        field = model._meta.get_field(field_name)
        if not _single_indexes(schema_editor, model, field.column):
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_user_home_institution"),
        ("funding", "0006_ledger_totals"),
        ("runpod", "0016_resource_running_mounts"),
        ("usage", "0010_source_monthly_spend"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="dailyspend",
                    name="account",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="runpod.runpodaccount",
                    ),
                ),
                migrations.AlterField(
                    model_name="dailyspend",
                    name="allocation",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="funding.allocation",
                    ),
                ),
                migrations.AlterField(
                    model_name="dailyspend",
                    name="funding_source",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="funding.fundingsource",
                    ),
                ),
                migrations.AlterField(
                    model_name="dailyspend",
                    name="institution",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.institution",
                    ),
                ),
                migrations.AlterField(
                    model_name="dailyspend",
                    name="lab",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.lab",
                    ),
                ),
                migrations.AlterField(
                    model_name="dailyspend",
                    name="user",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="labdailyspend",
                    name="account",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="runpod.runpodaccount",
                    ),
                ),
                migrations.AlterField(
                    model_name="labdailyspend",
                    name="lab",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.lab",
                    ),
                ),
                migrations.AlterField(
                    model_name="monthlyspend",
                    name="account",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="runpod.runpodaccount",
                    ),
                ),
                migrations.AlterField(
                    model_name="monthlyspend",
                    name="allocation",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="funding.allocation",
                    ),
                ),
                migrations.AlterField(
                    model_name="monthlyspend",
                    name="funding_source",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="funding.fundingsource",
                    ),
                ),
                migrations.AlterField(
                    model_name="monthlyspend",
                    name="institution",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.institution",
                    ),
                ),
                migrations.AlterField(
                    model_name="monthlyspend",
                    name="lab",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.lab",
                    ),
                ),
                migrations.AlterField(
                    model_name="monthlyspend",
                    name="user",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="sourcemonthlyspend",
                    name="account",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="runpod.runpodaccount",
                    ),
                ),
                migrations.AlterField(
                    model_name="sourcemonthlyspend",
                    name="institution",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.institution",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_indexes, make_indexes, elidable=False),
            ],
        ),
        migrations.AddIndex(
            model_name="monthlyspend",
            index=models.Index(
                fields=["allocation", "month"], name="usage_month_allocat_573919_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="monthlyspend",
            index=models.Index(fields=["lab", "month"], name="usage_month_lab_id_67aa5f_idx"),
        ),
        migrations.AddIndex(
            model_name="monthlyspend",
            index=models.Index(fields=["user", "month"], name="usage_month_user_id_f6fabc_idx"),
        ),
    ]
