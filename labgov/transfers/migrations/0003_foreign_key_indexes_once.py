"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0006_foreign_key_indexes_once'),
        ('funding', '0007_foreign_key_indexes_once'),
        ('transfers', '0002_spend_moves'),
    ]

    operations = [
        migrations.AlterField(
            model_name='costtransfer',
            name='from_funding_source',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='funding.fundingsource'),
        ),
        migrations.AlterField(
            model_name='costtransfer',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.institution'),
        ),
        migrations.AlterField(
            model_name='costtransfer',
            name='to_funding_source',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='funding.fundingsource'),
        ),
        migrations.AlterField(
            model_name='spendmove',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.institution'),
        ),
        migrations.AlterField(
            model_name='spendmoveshare',
            name='move',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='shares', to='transfers.spendmove'),
        ),
    ]
