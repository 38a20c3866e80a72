"""The daily rollups by lab (LabDailySpend): the sums of an account's attributed DailySpend rows
by lab, day and category, rebuilt with them and filled from them by their migration."""

import datetime as dt
import importlib
from decimal import Decimal as D

from django.apps import apps
from django.db import transaction

from labgov.usage.models import Category, DailySpend, LabDailySpend
from labgov.usage.services import lab_days_rebuild
from tests.dashboard.conftest import add_spend
from tests.derived_rollups import assert_derived_rollups_match
from tests.factories import AllocationFactory, RunpodAccountFactory

DAY = dt.date(2026, 11, 3)


def _spend(world):
    """Two accounts paying two labs' allocations: several allocations of one lab on one day
    and category, a group that sums to zero, and unattributed spend; daily rollups only."""
    main = RunpodAccountFactory(institution=world.institution, name="Main")
    spare = RunpodAccountFactory(institution=world.institution, name="Spare")
    classmate = AllocationFactory(funding_source=world.funding_source)
    other = AllocationFactory(funding_source=world.other_funding_source)
    rows = [
        (main, DAY, "1.0000000001", world.allocation, Category.GPU_COMPUTE),
        (main, DAY, "2.5", classmate, Category.GPU_COMPUTE),
        (main, DAY, "0.25", world.allocation, Category.POD_DISK),
        (main, DAY, "7", other, Category.GPU_COMPUTE),
        (main, DAY, "-3", world.allocation, Category.CPU_COMPUTE),  # a credit back …
        (main, DAY, "3", classmate, Category.CPU_COMPUTE),  # … and a charge: zero in sum
        (main, DAY, "9.99", None, Category.GPU_COMPUTE),  # unattributed: in no lab's chart
        (spare, DAY, "4", world.allocation, Category.GPU_COMPUTE),
        (spare, DAY + dt.timedelta(days=1), "0.0000000001", classmate, Category.GPU_COMPUTE),
    ]
    for account, day, amount, allocation, category in rows:
        add_spend(account, day, amount, allocation=allocation, category=category, ledger=False)
    LabDailySpend.objects.all().delete()  # what the rebuild and the migration make again
    return main, spare


def test_the_rebuild_sums_an_accounts_attributed_rollups_by_lab_day_and_category(world):
    main, spare = _spend(world)
    with transaction.atomic():
        lab_days_rebuild(account=main, days=[DAY])
        lab_days_rebuild(account=spare, days=[DAY, DAY + dt.timedelta(days=1)])
    assert_derived_rollups_match()
    rows = {
        (r.account_id, r.lab_id, r.category): r.amount_usd
        for r in LabDailySpend.objects.filter(day=DAY)
    }
    assert rows == {
        (main.pk, world.lab.pk, Category.GPU_COMPUTE): D("3.5000000001"),
        (main.pk, world.lab.pk, Category.POD_DISK): D("0.25"),
        (main.pk, world.other_funding_source.lab_id, Category.GPU_COMPUTE): D("7"),
        (spare.pk, world.lab.pk, Category.GPU_COMPUTE): D("4"),
    }  # no row for the CPU that sums to zero, none for the unattributed $9.99

    # Rebuilt again after the account's rollups of the day changed: only its own rows move.
    DailySpend.objects.filter(account=main, category=Category.POD_DISK).delete()
    with transaction.atomic():
        lab_days_rebuild(account=main, days=[DAY])
    assert_derived_rollups_match()
    assert LabDailySpend.objects.filter(account=spare).count() == 2


def test_the_migration_fills_them_from_the_rollups_there(world):
    _spend(world)
    migration = importlib.import_module("labgov.usage.migrations.0009_lab_daily_spend")
    migration.fill(apps, None)
    assert_derived_rollups_match()
    assert LabDailySpend.objects.count() == 5
