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

# (table, column, index): the single-column indexes that go, by the names Django gave them
# when it made them (the same on PostgreSQL and SQLite). SQL, not Python with the schema
# editor: a RunPython step makes Django render every model of the project's state first,
# seconds each time the migration is applied or undone (tests/runpod/test_partitions.py
# undoes it).
UNINDEXED = [
    ("usage_dailyspend", "account_id", "usage_dailyspend_account_id_aa41ba3f"),
    ("usage_dailyspend", "allocation_id", "usage_dailyspend_allocation_id_db4f4d68"),
    ("usage_dailyspend", "funding_source_id", "usage_dailyspend_funding_source_id_09fb7e1f"),
    ("usage_dailyspend", "institution_id", "usage_dailyspend_institution_id_1906df9e"),
    ("usage_dailyspend", "lab_id", "usage_dailyspend_lab_id_4d86a8dd"),
    ("usage_dailyspend", "user_id", "usage_dailyspend_user_id_bcf7403d"),
    ("usage_labdailyspend", "account_id", "usage_labdailyspend_account_id_689fbe9e"),
    ("usage_labdailyspend", "lab_id", "usage_labdailyspend_lab_id_0be624bb"),
    ("usage_monthlyspend", "account_id", "usage_monthlyspend_account_id_f2436bfb"),
    ("usage_monthlyspend", "allocation_id", "usage_monthlyspend_allocation_id_1f179c11"),
    ("usage_monthlyspend", "funding_source_id", "usage_monthlyspend_funding_source_id_a41842b4"),
    ("usage_monthlyspend", "institution_id", "usage_monthlyspend_institution_id_4ca12f22"),
    ("usage_monthlyspend", "lab_id", "usage_monthlyspend_lab_id_c76a7f2d"),
    ("usage_monthlyspend", "user_id", "usage_monthlyspend_user_id_182b1807"),
    ("usage_sourcemonthlyspend", "account_id", "usage_sourcemonthlyspend_account_id_74023df6"),
    (
        "usage_sourcemonthlyspend",
        "institution_id",
        "usage_sourcemonthlyspend_institution_id_99ff94d4",
    ),
]
DROP = [f'DROP INDEX IF EXISTS "{index}"' for _, _, index in UNINDEXED]
MAKE = [
    f'CREATE INDEX IF NOT EXISTS "{index}" ON "{table}" ("{column}")'
    for table, column, index in UNINDEXED
]


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
                migrations.RunSQL(DROP, MAKE, elidable=False),
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
