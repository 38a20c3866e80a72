from django.db import migrations

from labgov.core.append_only import append_only_trigger_operations


class Migration(migrations.Migration):
    dependencies = [("funding", "0001_initial")]
    operations = append_only_trigger_operations("funding_ledgerentry")
