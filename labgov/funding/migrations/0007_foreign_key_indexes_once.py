"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0006_foreign_key_indexes_once'),
        ('funding', '0006_ledger_totals'),
    ]

    operations = [
        migrations.AlterField(
            model_name='fundingproposal',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='funding_proposals', to='accounts.institution'),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='allocation',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='ledger_entries', to='funding.allocation'),
        ),
        migrations.AlterField(
            model_name='ledgerentry',
            name='funding_source',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='ledger_entries', to='funding.fundingsource'),
        ),
    ]
