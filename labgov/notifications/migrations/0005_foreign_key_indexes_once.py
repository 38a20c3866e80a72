"""Foreign keys lose the index Django gives each of its own where an index or a unique
constraint of their table leads with the same column and answers every question it did: each
insert wrote both (tests/core/test_schema_indexes.py keeps it so). Django drops the index and
adds the foreign key again, which PostgreSQL checks by reading the table once."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0004_threads_and_email_choice'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='mutedkind',
            name='user',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='muted_kinds', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='notification',
            name='recipient',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='notifications', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='webhookdelivery',
            name='webhook',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='notifications.labwebhook'),
        ),
    ]
