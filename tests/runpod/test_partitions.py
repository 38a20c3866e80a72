"""Billing records partitioned by month on PostgreSQL: every writer makes its months, a closed
month can be detached for archiving (and attached back) without moving what was built from
it, and the migration goes both ways keeping every row."""

import datetime as dt
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.runpod import partitions
from labgov.runpod.archive import billing_month_attach, billing_month_detach
from labgov.runpod.models import BillingRecord, SyncRun
from labgov.runpod.sync import account_sync
from labgov.usage.models import ClosedPeriod, DailySpend, MonthlySpend
from labgov.usage.services import rollups_rebuild
from tests.factories import ResourceFactory, RunpodAccountFactory

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 20, 14, 30, tzinfo=UTC)
SEPTEMBER = dt.date(2026, 9, 1)


def _tables() -> dict[str, bool]:
    """Month tables of billing: name -> attached."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, relispartition FROM pg_class WHERE relkind = 'r' AND relname LIKE %s",
            ["runpod\\_billingrecord\\_p%"],
        )
        return dict(cursor.fetchall())


def _relkind() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = 'runpod_billingrecord'::regclass")
        return cursor.fetchone()[0]


def _drop_months(*months: dt.date) -> None:
    """Start from months without a partition (whatever the migration made on the day the
    test database was built); the test's transaction puts them back."""
    with connection.cursor() as cursor:
        for month in months:
            cursor.execute(f'DROP TABLE IF EXISTS "{partitions.table_name(month)}"')
    partitions.forget(months)


def _records(resource, start: dt.datetime, hours: int, usd="0.5") -> list[BillingRecord]:
    return BillingRecord.objects.bulk_create(
        BillingRecord(
            resource=resource,
            kind="pod",
            bucket_start=start + dt.timedelta(hours=h),
            bucket_end=start + dt.timedelta(hours=h + 1),
            total_usd=Decimal(usd),
            gpu_usd=Decimal(usd),
        )
        for h in range(hours)
    )


def test_billing_is_partitioned_by_month_after_migrate(postgres):
    assert _relkind() == "p"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_partkeydef('runpod_billingrecord'::regclass)")
        assert cursor.fetchone()[0] == "RANGE (bucket_start)"
        # No default partition: "latest record per resource" stays an ordered Append.
        cursor.execute(
            "SELECT count(*) FROM pg_partitioned_table WHERE partrelid = "
            "'runpod_billingrecord'::regclass AND partdefid <> 0"
        )
        assert cursor.fetchone()[0] == 0


def test_orm_writes_into_a_month_without_partition(postgres, world):
    _drop_months(dt.date(2019, 3, 1), dt.date(2019, 4, 1))
    account = RunpodAccountFactory(institution=world.institution)
    pod = ResourceFactory(account=account)
    _records(pod, dt.datetime(2019, 3, 31, 22, tzinfo=UTC), 4)  # across March and April
    BillingRecord.objects.create(
        resource=pod,
        kind="pod",
        bucket_start=dt.datetime(2019, 5, 2, tzinfo=UTC),
        bucket_end=dt.datetime(2019, 5, 2, 1, tzinfo=UTC),
        total_usd=Decimal("1"),
    )
    tables = _tables()
    for name in ("runpod_billingrecord_p2019_03", "runpod_billingrecord_p2019_04"):
        assert tables[name] is True
    assert tables["runpod_billingrecord_p2019_05"] is True
    assert BillingRecord.objects.filter(resource=pod).count() == 5
    # Creating them again is a no-op.
    partitions.ensure_months(dt.date(2019, 3, 1), dt.date(2019, 5, 31))
    assert BillingRecord.objects.filter(resource=pod).count() == 5


def _bill(pod, start: dt.datetime) -> BillingRecord:
    return BillingRecord(
        resource=pod,
        kind="pod",
        bucket_start=start,
        bucket_end=start + dt.timedelta(hours=1),
        total_usd=Decimal("1"),
    )


def test_a_month_remembered_by_a_rolled_back_transaction_is_made_again(
    postgres, world, django_capture_on_commit_callbacks
):
    """The memory of months is a hint: a transaction that made a month and told it on commit
    (as a test's captured callbacks do) may still roll back. Every ORM writer then looks
    again and makes the month instead of failing with a raw IntegrityError."""
    march = dt.date(2018, 3, 1)
    _drop_months(march)
    with django_capture_on_commit_callbacks(execute=True):
        partitions.ensure([march])
    assert march in partitions._known_here()
    # What the test's rollback would do: the partition goes, the memory stays.
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE "{partitions.table_name(march)}"')
    assert march in partitions._known_here()

    pod = ResourceFactory(account=RunpodAccountFactory(institution=world.institution))
    BillingRecord.objects.bulk_create([_bill(pod, dt.datetime(2018, 3, 5, tzinfo=UTC))])
    assert _tables()["runpod_billingrecord_p2018_03"] is True

    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE "{partitions.table_name(march)}"')
    partitions._known_here().add(march)
    _bill(pod, dt.datetime(2018, 3, 6, tzinfo=UTC)).save()  # save() too
    BillingRecord.objects.create(
        **{
            f: getattr(_bill(pod, dt.datetime(2018, 3, 7, tzinfo=UTC)), f)
            for f in ("resource", "kind", "bucket_start", "bucket_end", "total_usd")
        }
    )
    assert BillingRecord.objects.filter(resource=pod).count() == 2


def test_the_memory_of_months_is_per_database(postgres, world):
    """A month seen on one database says nothing of another (the dashboard bench builds a
    small database, then a large one, in one process)."""
    june = dt.date(2018, 6, 1)
    _drop_months(june)
    partitions._known[("elsewhere", "5432", "another_database")] = {june}
    assert june not in partitions._known_here()
    pod = ResourceFactory(account=RunpodAccountFactory(institution=world.institution))
    BillingRecord.objects.bulk_create([_bill(pod, dt.datetime(2018, 6, 1, tzinfo=UTC))])
    assert _tables()["runpod_billingrecord_p2018_06"] is True
    del partitions._known[("elsewhere", "5432", "another_database")]


def test_a_month_detached_by_another_process_is_refused_as_archived(postgres, world):
    """An operator detached a month while this process still remembers it as attached: a
    write into it says the month is archived, never a raw IntegrityError, and leaves the
    surrounding transaction usable."""
    august = dt.date(2018, 8, 1)
    _drop_months(august)
    partitions.ensure([august])
    partitions._known_here().add(august)  # as its commit would have told it
    with connection.cursor() as cursor:  # what `billing_partitions detach` does elsewhere
        cursor.execute(
            f'ALTER TABLE "{partitions.PARENT}" DETACH PARTITION "{partitions.table_name(august)}"'
        )
    pod = ResourceFactory(account=RunpodAccountFactory(institution=world.institution))
    with pytest.raises(DomainError, match="August 2018 are archived"):
        BillingRecord.objects.bulk_create([_bill(pod, dt.datetime(2018, 8, 9, tzinfo=UTC))])
    with pytest.raises(DomainError, match="archived"):
        _bill(pod, dt.datetime(2018, 8, 9, tzinfo=UTC)).save()
    assert BillingRecord.objects.filter(resource=pod).count() == 0  # the transaction goes on
    assert _tables()["runpod_billingrecord_p2018_08"] is False


@pytest.mark.usefixtures("at_sim_now")
def test_a_sync_across_a_month_boundary_makes_both_months_and_resync_replaces(
    postgres, sim, sim_account, fast_clients
):
    october, november = dt.date(2026, 10, 1), dt.date(2026, 11, 1)
    _drop_months(october, november)
    start = dt.datetime(2026, 10, 30, tzinfo=UTC)
    end = dt.datetime(2026, 11, 2, tzinfo=UTC)

    def sync():
        run = account_sync(
            account_id=sim_account.pk, client_factory=fast_clients, start=start, end=end
        )
        assert run.status == SyncRun.Status.SUCCEEDED, run.error
        records = BillingRecord.objects.filter(resource__account=sim_account)
        return (
            records.count(),
            sorted(records.values_list("resource_id", "bucket_start", "total_usd")),
        )

    first = sync()
    tables = _tables()
    assert tables["runpod_billingrecord_p2026_10"] is True
    assert tables["runpod_billingrecord_p2026_11"] is True
    records = BillingRecord.objects.filter(resource__account=sim_account)
    assert records.filter(bucket_start__lt=dt.datetime(2026, 11, 1, tzinfo=UTC)).exists()
    assert records.filter(bucket_start__gte=dt.datetime(2026, 11, 1, tzinfo=UTC)).exists()
    assert sync() == first  # replaced, not added


def test_the_bulk_writer_makes_a_month_it_was_not_prepared_for(postgres, world):
    import json

    from labgov.runpod.billing_store import SlicePayload, write_slice
    from labgov.runpod.types import BillingKind

    _drop_months(dt.date(2020, 1, 1))
    account = RunpodAccountFactory(institution=world.institution)
    ResourceFactory(account=account, runpod_id="pod-a")
    record = {
        "podId": "pod-a",
        "startTime": "2020-01-15T00:00:00Z",
        "endTime": "2020-01-15T01:00:00Z",
        "totalAmount": 0.5,
        "gpuAmount": 0.5,
    }
    body = json.dumps({"records": [record], "metadata": {"recordCount": 1}}).encode()
    start = dt.datetime(2020, 1, 15, tzinfo=UTC)
    payload = SlicePayload(
        start=start, end=start + dt.timedelta(hours=1), bodies={BillingKind.POD: body}
    )
    assert write_slice(account=account, payload=payload)[0] == 1
    assert BillingRecord.objects.get(resource__account=account).total_usd == Decimal("0.5")


@pytest.fixture
def two_months(postgres, world):
    """Records in September (to archive) and November (the current month), with rollups."""
    account = RunpodAccountFactory(institution=world.institution)
    pod = ResourceFactory(account=account)
    _records(pod, dt.datetime(2026, 9, 10, tzinfo=UTC), 3)
    _records(pod, dt.datetime(2026, 11, 10, tzinfo=UTC), 2, usd="0.25")
    rollups_rebuild(account=account, days=[dt.date(2026, 9, 10), dt.date(2026, 11, 10)])
    return account


def _built_from_records():
    return (
        sorted(DailySpend.objects.values_list("day", "category", "amount_usd")),
        sorted(MonthlySpend.objects.values_list("month", "category", "amount_usd")),
    )


def test_detach_refuses_an_open_month(two_months):
    with pytest.raises(DomainError, match="not closed for every institution"):
        billing_month_detach(actor=None, month=SEPTEMBER, now=NOW)
    assert _tables()["runpod_billingrecord_p2026_09"] is True
    assert BillingRecord.objects.filter(resource__account=two_months).count() == 5


@pytest.mark.parametrize("month", [dt.date(2026, 11, 1), dt.date(2026, 12, 1)])
def test_detach_refuses_the_current_and_future_months(two_months, world, month):
    for m in (SEPTEMBER, dt.date(2026, 10, 1), dt.date(2026, 11, 1)):
        ClosedPeriod.objects.create(institution=world.institution, month=m)
    with pytest.raises(DomainError, match="current month or a later one"):
        billing_month_detach(actor=None, month=month, now=NOW)
    assert BillingRecord.objects.filter(resource__account=two_months).count() == 5


def _reconciliation_status(client, institution) -> str:
    """What finance's page of September says of its reconciliation."""
    url = reverse("invoicing:period", args=[institution.pk, 2026, 9])
    body = client.get(url).content.decode()
    return body.split('id="reconciliation-status"><strong>', 1)[1].split("</strong>", 1)[0]


def test_detach_a_closed_month_then_attach_it_back(two_months, world, client_for):
    ClosedPeriod.objects.create(institution=world.institution, month=SEPTEMBER)
    built = _built_from_records()
    finance = client_for(world.finance)
    assert _reconciliation_status(finance, world.institution) == "Not reconciled"  # no sync

    part = billing_month_detach(actor=None, month=SEPTEMBER, now=NOW)

    assert part.rows == 3 and not part.attached
    assert _tables()["runpod_billingrecord_p2026_09"] is False  # left for pg_dump -t
    records = BillingRecord.objects.filter(resource__account=two_months)
    assert list(records.values_list("total_usd", flat=True)) == [Decimal("0.25")] * 2
    assert _built_from_records() == built  # rollups (what pages show) stay as they were
    # The period page says why it cannot recompute labgov's side, instead of a difference.
    assert _reconciliation_status(finance, world.institution) == "Records archived"
    # An export of the period's records would miss the month: refused, in words.
    records_csv = reverse("exports:period_records_csv", args=[world.institution.pk, 2026, 9])
    refused = finance.get(records_csv, follow=True)
    assert "billing records of September 2026 are archived" in refused.content.decode()
    assert refused.redirect_chain and not refused.get("Content-Disposition")
    event = AuditEvent.objects.get(action="billing.month_detach")
    assert event.institution_id == world.institution.pk
    assert event.after["month"] == "2026-09" and event.after["records"] == 3
    # Writing into the archived month is refused in words, not by a PostgreSQL error.
    with pytest.raises(DomainError, match="archived"):
        partitions.ensure_months(SEPTEMBER, SEPTEMBER)
    with pytest.raises(DomainError, match="already detached"):
        billing_month_detach(actor=None, month=SEPTEMBER, now=NOW)

    billing_month_attach(actor=None, month=SEPTEMBER)

    assert records.count() == 5
    assert _tables()["runpod_billingrecord_p2026_09"] is True
    assert AuditEvent.objects.filter(action="billing.month_attach").count() == 1
    assert _built_from_records() == built
    assert _reconciliation_status(finance, world.institution) == "Not reconciled"
    exported = b"".join(finance.get(records_csv).streaming_content).decode()
    assert exported.count("\n") == 1 + 3  # the header and September's records


@pytest.fixture
def at_now():
    import time_machine

    with time_machine.travel(NOW, tick=False):
        yield


@pytest.mark.usefixtures("at_now")
def test_the_command_lists_and_refuses_in_words(two_months, world, capsys):
    ClosedPeriod.objects.create(institution=world.institution, month=SEPTEMBER)
    call_command("billing_partitions", "list")
    listing = capsys.readouterr().out
    assert "2026-09           3" in listing and "attached  yes, for every institution" in listing
    assert "2026-11           2" in listing and "(current month)" in listing
    with pytest.raises(CommandError, match="current month or a later one"):
        call_command("billing_partitions", "detach", "2999-01")
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("billing_partitions", "detach", "September")
    call_command("billing_partitions", "detach", "2026-09")
    assert "pg_dump -t runpod_billingrecord_p2026_09" in capsys.readouterr().out
    call_command("billing_partitions", "list")
    assert "detached" in capsys.readouterr().out
    with pytest.raises(CommandError, match="restore it from its archive"):
        call_command("billing_partitions", "attach", "2001-01")
    call_command("billing_partitions", "attach", "2026-09")
    assert BillingRecord.objects.filter(resource__account=two_months).count() == 5


def _rows():
    return sorted(BillingRecord.objects.values_list("resource_id", "bucket_start", "total_usd"))


def test_the_migration_goes_back_to_one_table_and_forward_again(postgres, world):
    account = RunpodAccountFactory(institution=world.institution)
    pod = ResourceFactory(account=account)
    _records(pod, dt.datetime(2025, 12, 31, 23, tzinfo=UTC), 2)  # December and January
    rows = _rows()

    # Going back also undoes later migrations that alter runpod_resource, which PostgreSQL
    # refuses while the rows above still have deferred foreign-key checks pending.
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate([("runpod", "0008_assignment_share")])
    assert _relkind() == "r"
    assert _rows() == rows
    with pytest.raises(CommandError, match="not partitioned"):
        call_command("billing_partitions", "list")

    executor.loader.build_graph()
    executor.migrate([("runpod", "0009_billing_partitioned_by_month")])
    assert _relkind() == "p"
    assert _rows() == rows
    tables = _tables()
    assert tables["runpod_billingrecord_p2025_12"] and tables["runpod_billingrecord_p2026_01"]


def test_the_command_says_partitioning_is_postgresql_only(db):
    if connection.vendor == "postgresql":
        pytest.skip("this database is PostgreSQL, where billing is partitioned")
    with pytest.raises(CommandError, match="PostgreSQL only"):
        call_command("billing_partitions", "list")


def test_the_daily_task_makes_this_month_and_the_next_three(postgres, settings):
    import time_machine

    from labgov.runpod.tasks import billing_partitions_ahead

    entry = settings.CELERY_BEAT_SCHEDULE["runpod-billing-partitions-ahead"]
    assert entry["task"] == "labgov.runpod.tasks.billing_partitions_ahead"
    months = [dt.date(2031, m, 1) for m in (5, 6, 7, 8)]
    _drop_months(*months)
    with time_machine.travel(dt.datetime(2031, 5, 31, 23, 59, tzinfo=UTC), tick=False):
        assert billing_partitions_ahead() == 4
        call_command("billing_partitions", "ahead")  # the same, by hand: a no-op now
    tables = _tables()
    assert all(tables[partitions.table_name(m)] for m in months)
    assert "runpod_billingrecord_p2031_09" not in tables
