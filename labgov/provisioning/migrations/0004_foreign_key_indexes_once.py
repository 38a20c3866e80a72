"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0006_foreign_key_indexes_once'),
        ('provisioning', '0003_endpoint_and_cluster_creation_fields'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='provisioningrequest',
            name='lab',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.lab'),
        ),
        migrations.AlterField(
            model_name='provisioningrequest',
            name='requester',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='provisioning_requests', to=settings.AUTH_USER_MODEL),
        ),
    ]
