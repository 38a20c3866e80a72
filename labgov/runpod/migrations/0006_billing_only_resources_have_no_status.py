"""Resources seen only in billing carried a made-up status, "UNSEEN", which Runpod's status
enum does not have; they now have none (Resource.billing_only tells them apart)."""

from django.db import migrations


def forwards(apps, schema_editor):
    Resource = apps.get_model("runpod", "Resource")
    Resource.objects.filter(status="UNSEEN").update(status="")


def backwards(apps, schema_editor):
    Resource = apps.get_model("runpod", "Resource")
    Resource.objects.filter(status="").exclude(kind="endpoint").update(status="UNSEEN")


class Migration(migrations.Migration):
    dependencies = [("runpod", "0005_account_write_key_and_removal")]

    operations = [migrations.RunPython(forwards, backwards)]
