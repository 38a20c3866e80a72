"""An assignment's resource had two indexes: the foreign key's own and (resource, starts_at),
which leads with it and answers every question the other did. Each assignment made wrote
both (a rule matching 50,000 resources makes 50,000)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runpod', '0018_resource_indexes_once'),
    ]

    operations = [
        migrations.AlterField(
            model_name='assignment',
            name='resource',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='assignments', to='runpod.resource'),
        ),
    ]
