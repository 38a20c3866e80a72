"""A pod labgov first saw already stopped has been idle since its last hour of compute in the
billing history, not since that first sighting; before the history held, it says so."""

import csv
import datetime as dt
import io
from decimal import Decimal

from django.urls import reverse

from labgov.dashboard.tables import display
from labgov.runpod.models import AccountBillingRecord, BillingRecord
from tests.dashboard.conftest import NOW
from tests.factories import ResourceFactory

HOUR = dt.timedelta(hours=1)


def _bill(resource, start, *, gpu="0"):
    BillingRecord.objects.create(
        resource=resource,
        kind="pod",
        bucket_start=start,
        bucket_end=start + HOUR,
        total_usd=Decimal(gpu) + Decimal("0.05"),
        gpu_usd=Decimal(gpu),
        disk_usd=Decimal("0.05"),
    )


def _idle_since(world, client_for, page="lab", **params):
    pk = world.lab.pk if page == "lab" else world.funding_source.pk
    url = reverse(f"dashboard:{page}", args=[pk])
    data = client_for(world.lab_admin).get(url, params).context["data"]
    return {r.cells[0]: r for r in data.tables["storage"].rows}, data


def test_idle_since_of_a_pod_first_seen_stopped_comes_from_billing(world, spend, client_for):
    history_start = NOW - dt.timedelta(days=8)
    AccountBillingRecord.objects.create(
        account=spend.account,
        bucket_start=history_start,
        bucket_end=history_start + HOUR,
        total_usd=Decimal("1"),
    )
    # Both first seen (and so "changed") at the first sync, now, already stopped.
    first_sync = {"first_seen_at": NOW, "status_changed_at": NOW, "status": "EXITED"}
    ran = ResourceFactory(
        account=spend.account,
        name="stopped-in-history",
        volume_disk_gb=100,
        current_allocation=world.allocation,
        **first_sync,
    )
    _bill(ran, NOW - dt.timedelta(days=6), gpu="0.69")  # its last hour of compute
    for h in range(1, 30):
        _bill(ran, NOW - dt.timedelta(days=6) + h * HOUR)
    long_ago = ResourceFactory(
        account=spend.account,
        name="stopped-before-history",
        volume_disk_gb=100,
        current_allocation=world.allocation,
        **first_sync,
    )
    _bill(long_ago, history_start)
    # A stop labgov saw happen (after its first sighting) keeps the time it saw.
    seen_stop = NOW - dt.timedelta(days=2)
    type(spend.stopped).objects.filter(pk=spend.stopped.pk).update(
        first_seen_at=NOW - dt.timedelta(days=30), status_changed_at=seen_stop
    )
    rows, data = _idle_since(world, client_for)
    columns = data.tables["storage"].columns
    column = next(c for c in columns if c.key == "since")
    since = columns.index(column)

    def shown(name: str) -> str:
        return display(rows[name].cells[since], column).text

    assert shown("stopped-in-history") == "2026-03-12 13:00"
    assert shown("stopped-before-history") == "before 2026-03-10"
    assert "<td>before 2026-03-10</td>" in data.tables["storage"].body_html
    assert rows["forgotten"].cells[since] == seen_stop

    url = reverse("dashboard:lab", args=[world.lab.pk])
    response = client_for(world.lab_admin).get(url, {"format": "csv", "table": "storage"})
    table = {r[0]: r for r in csv.reader(io.StringIO(response.content.decode()))}
    assert table["stopped-in-history"][since] == "2026-03-12T13:00+00:00"
    assert table["stopped-before-history"][since] == "before 2026-03-10T12:00+00:00"

    # The funding source's page reads the same history for the same pods.
    rows, data = _idle_since(world, client_for, page="funding")
    columns = data.tables["storage"].columns
    column = next(c for c in columns if c.key == "since")
    since = columns.index(column)
    assert shown("stopped-in-history") == "2026-03-12 13:00"
    assert shown("stopped-before-history") == "before 2026-03-10"
    assert rows["forgotten"].cells[since] == seen_stop


def test_a_page_without_unseen_stops_reads_no_billing_history(world, spend, client_for):
    """The stopped pods' history is one more query, run only for pods first seen stopped: a
    stop labgov saw happen has its time, so the page reads no billing records for it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    type(spend.stopped).objects.filter(pk=spend.stopped.pk).update(
        first_seen_at=NOW - dt.timedelta(days=30), status_changed_at=NOW - dt.timedelta(days=2)
    )
    with CaptureQueriesContext(connection) as queries:
        rows, _ = _idle_since(world, client_for)
    assert rows["forgotten"].cells  # the stopped pod is shown
    history = [q["sql"] for q in queries if "runpod_accountbillingrecord" in q["sql"]]
    assert history == []
