"""insert_rows: plain rows into a model's table (COPY on PostgreSQL, bulk_create elsewhere),
every digit and NULL kept, the page cache's data version moved once after commit, and
nothing of a refused batch left."""

import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from labgov.core import dataversion
from labgov.core.bulk import insert_rows
from labgov.usage.models import DailySpend, LabDailySpend
from tests.factories import RunpodAccountFactory

pytestmark = pytest.mark.django_db

FIELDS = ["account_id", "institution_id", "category", "allocation_id", "amount_usd", "day"]


def test_rows_keep_every_digit_and_null_and_the_version_moves_after_commit(
    world, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        account = RunpodAccountFactory(institution=world.institution)
    # The account's own bump ran above: what the block below counts is the insert's.
    connection.run_on_commit.clear()
    day = dt.date(2026, 3, 2)
    g = "gpu"
    rows = [
        (account.pk, world.institution.pk, g, world.allocation.pk, Decimal("1.0000000001"), day),
        (account.pk, world.institution.pk, g, None, Decimal("-12345.6789012345"), day),
        # Text from strangers goes in as a value, never as SQL.
        (account.pk, world.institution.pk, "x'); DROP TABLE x; --\t\\N\n", None, Decimal(0), day),
    ]
    before = dataversion.current()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        assert insert_rows(DailySpend, FIELDS, iter(rows)) == 3
        assert insert_rows(DailySpend, FIELDS, []) == 0
    assert len(callbacks) == 1
    assert dataversion.current() == before + 1
    stored = sorted(
        DailySpend.objects.filter(account=account).values_list(
            "category", "allocation_id", "amount_usd", "day", "lab_id"
        ),
        key=lambda r: r[2],
    )
    assert stored == [
        ("gpu", None, Decimal("-12345.6789012345"), day, None),
        ("x'); DROP TABLE x; --\t\\N\n", None, Decimal(0), day, None),
        ("gpu", world.allocation.pk, Decimal("1.0000000001"), day, None),
    ]


def test_a_row_of_the_wrong_length_is_refused(world):
    account = RunpodAccountFactory(institution=world.institution)
    with pytest.raises(ValueError), transaction.atomic():
        insert_rows(LabDailySpend, ["account_id", "lab_id", "day"], [(account.pk, world.lab.pk)])
    assert not LabDailySpend.objects.filter(account=account).exists()


def test_a_refused_batch_leaves_nothing(world):
    account = RunpodAccountFactory(institution=world.institution)
    fields = ["account_id", "lab_id", "day", "category", "amount_usd"]
    good = (account.pk, world.lab.pk, dt.date(2026, 3, 2), "gpu", Decimal(1))
    twice = (account.pk, world.lab.pk, dt.date(2026, 3, 3), "gpu", Decimal(1))
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(LabDailySpend, fields, [good, twice, twice])  # its unique constraint
    # Django's IntegrityError, as an INSERT's would be (psycopg's cursor raises its own).
    assert not LabDailySpend.objects.filter(account=account).exists()
