"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0006_foreign_key_indexes_once'),
        ('runpod', '0020_foreign_key_indexes_once'),
        ('usage', '0011_rollup_indexes_lead_with_keys'),
    ]

    operations = [
        migrations.AlterField(
            model_name='closedperiod',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='closed_periods', to='accounts.institution'),
        ),
        migrations.AlterField(
            model_name='spendversion',
            name='account',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runpod.runpodaccount'),
        ),
    ]
