"""The monthly rollups by funding source (SourceMonthlySpend): the sums of an account's
MonthlySpend rows by funding source and month (none: unattributed), rebuilt with them and
filled from them by their migration."""

import datetime as dt
import importlib
from decimal import Decimal as D

from django.apps import apps
from django.db import transaction

from labgov.usage.models import Category, DailySpend, SourceMonthlySpend
from labgov.usage.services import months_rebuild, source_months_rebuild
from tests.dashboard.conftest import add_spend
from tests.derived_rollups import assert_derived_rollups_match
from tests.factories import AllocationFactory, RunpodAccountFactory

NOVEMBER = dt.date(2026, 11, 1)
DECEMBER = dt.date(2026, 12, 1)


def _spend(world):
    """Two accounts paying two funding sources over two months: several allocations and
    categories of one source in a month, a source whose month nets to zero (a row of zero,
    as finance's page lists it), and unattributed spend."""
    main = RunpodAccountFactory(institution=world.institution, name="Main")
    spare = RunpodAccountFactory(institution=world.institution, name="Spare")
    classmate = AllocationFactory(funding_source=world.funding_source)
    other = AllocationFactory(funding_source=world.other_funding_source)
    rows = [
        (main, NOVEMBER, "1.0000000001", world.allocation, Category.GPU_COMPUTE),
        (main, NOVEMBER + dt.timedelta(days=9), "2.5", classmate, Category.GPU_COMPUTE),
        (main, NOVEMBER, "0.25", world.allocation, Category.POD_DISK),
        (main, NOVEMBER, "-3", other, Category.CPU_COMPUTE),  # a credit back …
        (main, NOVEMBER + dt.timedelta(days=1), "3", other, Category.GPU_COMPUTE),  # … zero
        (main, NOVEMBER, "9.99", None, Category.GPU_COMPUTE),  # unattributed
        (main, DECEMBER, "4", world.allocation, Category.GPU_COMPUTE),
        (spare, NOVEMBER, "0.0000000001", classmate, Category.GPU_COMPUTE),
    ]
    for account, day, amount, allocation, category in rows:
        add_spend(account, day, amount, allocation=allocation, category=category, ledger=False)
    SourceMonthlySpend.objects.all().delete()  # what the rebuild and the migration make again
    return main, spare


def test_the_rebuild_sums_an_accounts_monthly_rollups_by_funding_source_and_month(world):
    main, spare = _spend(world)
    with transaction.atomic():
        source_months_rebuild(account=main, months=[NOVEMBER, DECEMBER])
        source_months_rebuild(account=spare, months=[NOVEMBER])
    assert_derived_rollups_match()
    rows = {
        (r.account_id, r.funding_source_id, r.month): r.amount_usd
        for r in SourceMonthlySpend.objects.all()
    }
    assert rows == {
        (main.pk, world.funding_source.pk, NOVEMBER): D("3.7500000001"),
        (main.pk, None, NOVEMBER): D("9.99"),
        (main.pk, world.funding_source.pk, DECEMBER): D("4"),
        (spare.pk, world.funding_source.pk, NOVEMBER): D("0.0000000001"),
        (main.pk, world.other_funding_source.pk, NOVEMBER): D("0"),  # kept: it had spend
    }
    assert {r.institution_id for r in SourceMonthlySpend.objects.all()} == {world.institution.pk}

    # The monthly rollups rebuilt after the account's daily ones changed: the sums follow,
    # and only that account's rows of that month move.
    DailySpend.objects.filter(account=main, allocation=None).delete()
    with transaction.atomic():
        months_rebuild(account=main, months={NOVEMBER})
    assert_derived_rollups_match()
    assert not SourceMonthlySpend.objects.filter(funding_source=None).exists()
    assert SourceMonthlySpend.objects.filter(account=spare).count() == 1
    assert SourceMonthlySpend.objects.filter(account=main, month=DECEMBER).count() == 1


def test_the_migration_fills_them_from_the_rollups_there(world):
    _spend(world)
    migration = importlib.import_module("labgov.usage.migrations.0010_source_monthly_spend")
    migration.fill(apps, None)
    assert_derived_rollups_match()
    assert SourceMonthlySpend.objects.count() == 5
