# Adds Allocation.tag_code: a random code per allocation (existing rows each get their own).

from django.db import migrations, models

import labgov.funding.models


def fill_codes(apps, schema_editor):
    Allocation = apps.get_model("funding", "Allocation")
    for allocation in Allocation.objects.filter(tag_code__isnull=True).only("pk"):
        allocation.tag_code = labgov.funding.models.new_tag_code()
        allocation.save(update_fields=["tag_code"])


class Migration(migrations.Migration):
    dependencies = [
        ("funding", "0003_ledgerentry_source_ledgerentry_ledger_source_idx"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="tag_code",
            field=models.CharField(editable=False, max_length=40, null=True),
        ),
        migrations.RunPython(fill_codes, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="allocation",
            name="tag_code",
            field=models.CharField(
                default=labgov.funding.models.new_tag_code,
                editable=False,
                max_length=40,
                unique=True,
            ),
        ),
    ]
