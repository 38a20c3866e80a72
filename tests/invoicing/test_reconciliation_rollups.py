"""The reconciliation reads a UTC calendar's days from the daily rollups, and gets exactly what
the billing records say: to the cent and to the last digit, with split shares, unattributed
spend and cost transfers in the month."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labgov.accounts.access import forget_scope
from labgov.accounts.services import institution_time_zone_set
from labgov.invoicing.reconciliation import _record_sums, period_reconciliation
from labgov.runpod.models import BillingRecord
from labgov.runpod.services import resource_assign
from labgov.transfers.services import cost_transfer_create
from labgov.transfers.splits import resource_split_set
from labgov.usage.periods import period_days
from labgov.usage.services import rollups_rebuild
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
NOV = dt.date(2026, 11, 1)
HOUR = dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 12, 2, 12), tick=False):
        yield


def _hours(resource, start: dt.datetime, n: int, *, step: str, **columns: str) -> None:
    """n hourly records, each column growing by `step` every hour (amounts to 1e-10)."""
    records = []
    for i in range(n):
        values = {k: D(v) + D(step) * i for k, v in columns.items()}
        records.append(
            BillingRecord(
                resource=resource,
                kind=resource.kind,
                bucket_start=start + HOUR * i,
                bucket_end=start + HOUR * (i + 1),
                total_usd=sum(values.values(), D(0)) + D("0.0000000003"),  # "other"
                **values,
            )
        )
    BillingRecord.objects.bulk_create(records)


@pytest.fixture
def synced_world(world):
    """Two accounts synced over November (records and their rollups, every day): a pod paid by
    the member's allocation and split 60/40 with another lab's from the 12th, a pod and a
    volume nobody pays for, a cost transfer, and hours across the month's UTC edges."""
    main = RunpodAccountFactory(institution=world.institution, name="Main")
    spare = RunpodAccountFactory(institution=world.institution, name="Spare")
    pod = ResourceFactory(account=main, kind="pod", name="train")
    idle = ResourceFactory(account=main, kind="pod", name="idle")
    volume = ResourceFactory(account=spare, kind="network_volume", name="data")
    _hours(pod, at(2026, 10, 31, 20), 24 * 31, step="0.0000000007", gpu_usd="0.6900000001",
           cpu_usd="0.0312345678", disk_usd="0.0001370000")  # fmt: skip
    _hours(idle, at(2026, 11, 5, 3), 50, step="0.0000000011", disk_usd="0.0001370001")
    _hours(volume, at(2026, 10, 31, 22), 24 * 31, step="0.0000000013",
           storage_standard_usd="0.0095890411", storage_high_performance_usd="2E-10")  # fmt: skip
    days = [at(2026, 10, 31).date() + dt.timedelta(days=i) for i in range(33)]
    for account in (main, spare):
        rollups_rebuild(account=account, days=days)
    resource_assign(actor=world.inst_admin, resource=pod, allocation=world.allocation)
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    for user in (world.inst_admin, world.finance, world.lab_admin):
        forget_scope(user)
    resource_split_set(
        actor=world.inst_admin,
        resource=pod,
        shares=[(world.allocation, D(60)), (other, D(40))],
        starts_at=at(2026, 11, 12, 7),
    )
    cost_transfer_create(
        actor=world.finance,
        account=main,
        from_allocation=world.allocation,
        to_allocation=other,
        month=NOV,
        amount_usd=D("3.33"),
        justification="Evaluation runs belong to NLP",
    )
    for account in (main, spare):
        synced(account, at(2026, 10, 1), at(2026, 12, 2))
    return main, spare


def _exact(sums) -> dict:
    """Every figure with its digits (str), so 1.50 and 1.5 differ."""
    return {
        pk: (
            str(s.attributed_usd),
            str(s.unattributed_usd),
            sorted((day, str(v)) for day, v in s.by_day.items()),
            sorted((str(c), str(v)) for c, v in s.by_category.items()),
        )
        for pk, s in sums.items()
    }


def _record_queries(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if 'FROM "runpod_billingrecord"' in q["sql"]]


def test_the_rollups_give_what_the_records_give_to_the_last_digit(world, synced_world):
    ids = [a.pk for a in synced_world]
    days = period_days(2026, 11)
    with CaptureQueriesContext(connection) as queries:
        from_rollups = _record_sums(ids, days, rollups=True)
    assert not _record_queries(queries)  # every day was read from the rollups
    from_records = _record_sums(ids, days, rollups=False)
    assert _exact(from_rollups) == _exact(from_records)
    main, spare = (from_rollups[a.pk] for a in synced_world)
    # The world holds what it should: attributed and split spend, unattributed spend on both.
    assert main.attributed_usd and main.unattributed_usd and spare.unattributed_usd
    assert not spare.attributed_usd
    assert D(str(main.by_day[dt.date(2026, 11, 1)])).as_tuple().exponent == -10


def test_the_period_reads_the_rollups_and_matches_the_records(world, synced_world):
    with CaptureQueriesContext(connection) as queries:
        (main, spare) = period_reconciliation(world.institution, NOV)
    assert not _record_queries(queries)
    records = BillingRecord.objects.filter(
        resource__account=synced_world[0], bucket_start__gte=at(2026, 11, 1),
        bucket_start__lt=at(2026, 12, 1),
    )  # fmt: skip
    attributed = sum(records.exclude(allocation=None).values_list("total_usd", flat=True), D(0))
    unattributed = sum(records.filter(allocation=None).values_list("total_usd", flat=True), D(0))
    assert (main.attributed_usd, main.unattributed_usd) == (attributed, unattributed)
    assert str(main.attributed_usd) == str(attributed)
    assert sum((d.records_usd for d in main.days), D(0)) == attributed + unattributed
    assert sum((c.records_usd for c in main.categories), D(0)) == attributed + unattributed
    assert spare.records_usd == spare.unattributed_usd > 0


def test_days_nothing_rolled_up_are_read_from_the_records(world, synced_world):
    """Records written outside a sync, with no rollups for their day: read raw for that day."""
    main, _ = synced_world
    late = ResourceFactory(account=main, kind="pod", name="late")
    BillingRecord.objects.filter(
        resource__account=main, bucket_start__date=dt.date(2026, 11, 30)
    ).delete()
    rollups_rebuild(account=main, days=[dt.date(2026, 11, 30)])
    bill(late, at(2026, 11, 30, 5), gpu="0.1234567891")
    ids = [a.pk for a in synced_world]
    days = period_days(2026, 11)
    with CaptureQueriesContext(connection) as queries:
        mixed = _record_sums(ids, days, rollups=True)
    assert len(_record_queries(queries)) == 1
    assert _exact(mixed) == _exact(_record_sums(ids, days, rollups=False))
    assert mixed[main.pk].by_day[dt.date(2026, 11, 30)] == D("0.1234567891")


@pytest.mark.parametrize(
    ("zone", "reads_records"), [("Europe/Berlin", True), ("Africa/Abidjan", False)]
)
def test_a_calendar_off_utc_days_reads_the_records(world, synced_world, zone, reads_records):
    institution = institution_time_zone_set(
        actor=world.inst_admin, institution=world.institution, time_zone=zone
    )
    with CaptureQueriesContext(connection) as queries:
        periods = period_reconciliation(institution, NOV)
    assert bool(_record_queries(queries)) == reads_records
    days = period_days(2026, 11, zone)
    ids = [a.pk for a in synced_world]
    raw = _record_sums(ids, days, rollups=False)
    for period in periods:
        ours = raw[period.account.pk]
        assert period.attributed_usd == ours.attributed_usd
        assert [d.records_usd for d in period.days] == [
            ours.by_day.get(day, D(0)) for day, _, _ in days
        ]
