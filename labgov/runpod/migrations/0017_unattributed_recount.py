"""Each resource's unattributed spend counted once from its records.

Until now a sync refreshed every resource's figure from all of the account's records when its
last slice was written, so a sync that failed half-way left the figures of the slices it had
written until the next one finished. Each slice now moves them by what it changed, in its own
transaction (labgov/runpod/sync.py), and never counts again: a figure a failed sync left
behind is counted here once, from the records."""

from django.db import migrations

RECOUNT = """
    UPDATE runpod_resource SET unattributed_usd = coalesce((
        SELECT sum(b.total_usd) FROM runpod_billingrecord b
        WHERE b.resource_id = runpod_resource.id AND b.allocation_id IS NULL
    ), 0)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runpod", "0016_resource_running_mounts"),
    ]

    operations = [migrations.RunSQL(RECOUNT, migrations.RunSQL.noop)]
