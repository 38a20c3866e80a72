"""The data version moves on with every write to labgov's tables, however it is written, once
per transaction and after its commit; session and login-throttle writes leave it alone."""

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection, transaction

from labgov.core import dataversion
from labgov.funding.models import Allocation
from labgov.usage.models import DailySpend

pytestmark = pytest.mark.django_db


def _moved(action) -> bool:
    before = dataversion.for_read()
    action()
    return dataversion.for_read() != before


def test_orm_bulk_and_raw_sql_writes_move_it(world):
    import datetime as dt

    from tests.dashboard.conftest import add_spend
    from tests.factories import RunpodAccountFactory

    assert _moved(lambda: Allocation.objects.filter(pk=world.allocation.pk).update(cap_usd=5))
    add_spend(
        RunpodAccountFactory(institution=world.institution), dt.date(2026, 3, 2), "1", ledger=False
    )
    assert _moved(lambda: DailySpend.objects.all().delete())
    # A write that changed no row (nothing left to delete) changes no page.
    assert not _moved(lambda: DailySpend.objects.all().delete())

    def raw():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE funding_allocation SET project_name = 'x' WHERE id = %s",
                [world.allocation.pk],
            )

    assert _moved(raw)


def test_reads_sessions_and_logins_do_not(world, client):
    assert not _moved(lambda: list(Allocation.objects.all()))
    assert not _moved(lambda: SessionStore().create())
    assert not _moved(lambda: client.force_login(world.member))


def test_inside_a_transaction_it_moves_once_after_commit(world, django_capture_on_commit_callbacks):
    before = dataversion.current()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        for cap in (5, 6, 7):
            Allocation.objects.filter(pk=world.allocation.pk).update(cap_usd=cap)
        # Uncommitted writes of this connection: read around the cache.
        assert dataversion.for_read() is None
        assert dataversion.current() == before
    assert len(callbacks) == 1
    assert dataversion.current() == before + 1
    assert dataversion.for_read() == before + 1


def test_a_rolled_back_savepoint_does_not_lose_the_next_bump(
    world, django_capture_on_commit_callbacks
):
    before = dataversion.current()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            Allocation.objects.filter(pk=world.allocation.pk).update(cap_usd=5)
            raise RuntimeError
        Allocation.objects.filter(pk=world.allocation.pk).update(cap_usd=6)
    assert len(callbacks) == 1
    assert dataversion.current() > before


def test_sql_on_psycopgs_own_cursor_is_told_by_the_code_that_sends_it(
    world, django_capture_on_commit_callbacks
):
    import psycopg

    if connection.vendor != "postgresql":
        pytest.skip("psycopg cursors are PostgreSQL's")
    before = dataversion.current()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute("UPDATE funding_allocation SET cap_usd = 5 WHERE id = %s", [1])
        assert not callbacks  # unseen by the execute wrapper
        dataversion.wrote()
    assert len(callbacks) == 1
    assert dataversion.current() == before + 1


def test_a_lost_counter_restarts_away_from_its_old_numbers():
    from django.core.cache import caches

    cache = caches["pages"]
    first = dataversion.current()
    for _ in range(3):
        dataversion.bump()
    cache.delete(dataversion.KEY)
    assert dataversion.current() not in range(first, first + 4)


@pytest.mark.parametrize(
    ("sql", "write"),
    [
        ("SELECT 1", False),
        ('SELECT * FROM "funding_allocation" FOR UPDATE', False),
        ('INSERT INTO "usage_dailyspend" ("day") VALUES (%s)', True),
        ("insert into runpod_billingrecord select * from x", True),
        ('UPDATE "django_session" SET "expire_date" = %s', False),
        ('DELETE FROM "axes_accessattempt"', False),
        ('UPDATE "accounts_user" SET "last_login" = %s WHERE "accounts_user"."id" = %s', False),
        ('UPDATE "accounts_user" SET "is_active" = %s WHERE "accounts_user"."id" = %s', True),
        ("WITH x AS (SELECT 1) SELECT * FROM x", False),
        ("WITH x AS (DELETE FROM usage_dailyspend RETURNING *) SELECT count(*) FROM x", True),
        ("COPY (SELECT id FROM runpod_billingrecord) TO STDOUT WITH CSV", False),
        ("COPY runpod_billingrecord FROM STDIN", True),
        ("TRUNCATE usage_dailyspend", True),
        ("SAVEPOINT s1", False),
    ],
)
def test_which_statements_are_writes(sql, write):
    assert dataversion.is_page_write(sql) is write
