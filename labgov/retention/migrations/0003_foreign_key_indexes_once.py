"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0006_foreign_key_indexes_once'),
        ('retention', '0002_deletion_blockers_and_hold_roles'),
    ]

    operations = [
        migrations.AlterField(
            model_name='approval',
            name='case',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='approvals', to='retention.retentioncase'),
        ),
        migrations.AlterField(
            model_name='retentioncase',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.institution'),
        ),
        migrations.AlterField(
            model_name='retentionpolicy',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.institution'),
        ),
    ]
