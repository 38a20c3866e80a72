"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0006_foreign_key_indexes_once'),
        ('runpod', '0019_assignment_resource_index_once'),
    ]

    operations = [
        migrations.AlterField(
            model_name='accountbillingrecord',
            name='account',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='runpod.runpodaccount'),
        ),
        migrations.AlterField(
            model_name='assignmentshare',
            name='assignment',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='shares', to='runpod.assignment'),
        ),
        migrations.AlterField(
            model_name='focusdrop',
            name='account',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='runpod.runpodaccount'),
        ),
        migrations.AlterField(
            model_name='focusfile',
            name='account',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='runpod.runpodaccount'),
        ),
        migrations.AlterField(
            model_name='runpodaccount',
            name='institution',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='runpod_accounts', to='accounts.institution'),
        ),
        migrations.AlterField(
            model_name='syncrun',
            name='account',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='sync_runs', to='runpod.runpodaccount'),
        ),
        migrations.AlterField(
            model_name='tagclaim',
            name='resource',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='tag_claims', to='runpod.resource'),
        ),
    ]
