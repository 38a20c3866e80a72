"""The ledger's running totals: kept by the database on every insert, whatever inserts it,
and always equal to the sums of the entries."""

import threading
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from labgov.funding import totals
from labgov.funding.models import (
    COMMITTED_KINDS,
    SPENT_KINDS,
    Allocation,
    FundingSource,
    LedgerEntry,
    LedgerTotal,
)
from labgov.funding.services import ledger_post
from tests.factories import FundingSourceFactory

K = LedgerEntry.Kind


def _figures(world):
    fs = FundingSource.objects.with_figures().get(pk=world.funding_source.pk)
    allocation = Allocation.objects.with_figures().get(pk=world.allocation.pk)
    return (fs.committed_usd, fs.spent_usd), (allocation.committed_usd, allocation.spent_usd)


def _entry(world, kind, amount, *, allocation=True):
    return LedgerEntry(
        funding_source=world.funding_source,
        allocation=world.allocation if allocation else None,
        kind=kind,
        amount_usd=Decimal(amount),
    )


def test_the_sql_spells_the_models_kinds():
    assert "(" + ", ".join(f"'{k}'" for k in COMMITTED_KINDS) + ")" == totals.COMMITTED
    assert "(" + ", ".join(f"'{k}'" for k in SPENT_KINDS) + ")" == totals.SPENT


def test_every_way_of_inserting_moves_the_totals(world):
    before = _figures(world)
    ledger_post(
        actor=world.lab_admin,
        funding_source=world.funding_source,
        allocation=world.allocation,
        kind=K.COMMITMENT,
        amount_usd=Decimal("300.00"),
    )
    LedgerEntry.objects.bulk_create(
        [
            _entry(world, K.USAGE, "12.3456789012"),
            _entry(world, K.USAGE, "0.0000000001"),
            _entry(world, K.RELEASE, "-100.00"),
            # The source's own money, not an allocation's: only the source's total moves.
            _entry(world, K.ADJUSTMENT, "-2.50", allocation=False),
        ]
    )
    with connection.cursor() as cursor:  # not even the ORM
        cursor.execute(
            "INSERT INTO funding_ledgerentry (funding_source_id, allocation_id, kind, amount_usd,"
            " occurred_at, created_at, memo, idempotency_key, source)"
            " VALUES (%s, %s, 'usage', %s, %s, %s, '', '', '')",
            [
                world.funding_source.pk,
                world.allocation.pk,
                Decimal("1.25"),
                world.funding_source.created_at,
                world.funding_source.created_at,
            ],
        )
    (fs_committed, fs_spent), (a_committed, a_spent) = _figures(world)
    assert fs_committed - before[0][0] == Decimal("200.00")
    assert fs_spent - before[0][1] == Decimal("12.3456789013") - Decimal("2.50") + Decimal("1.25")
    assert a_committed - before[1][0] == Decimal("200.00")
    assert a_spent - before[1][1] == Decimal("12.3456789013") + Decimal("1.25")
    assert totals.differences() == []


def test_a_rolled_back_insert_leaves_no_trace_in_the_totals(world):
    before = _figures(world)
    with pytest.raises(RuntimeError), transaction.atomic():
        LedgerEntry.objects.bulk_create([_entry(world, K.USAGE, "999.00")])
        assert _figures(world)[0][1] == before[0][1] + Decimal("999.00")
        raise RuntimeError("the caller gives up")
    assert _figures(world) == before


def test_owners_without_entries_show_zero(world):
    source = FundingSourceFactory(lab=world.lab)
    fresh = FundingSource.objects.with_figures().get(pk=source.pk)
    assert (fresh.committed_usd, fresh.spent_usd) == (0, 0)
    assert fresh.remaining_usd == fresh.amount_usd


def test_check_finds_a_tampered_total_and_rebuild_restores_it(world):
    LedgerEntry.objects.bulk_create([_entry(world, K.USAGE, "40.00")])
    call_command("ledger_totals")  # all agree
    # Someone edits a total behind the ledger's back: the check names it, a rebuild heals it.
    LedgerTotal.objects.filter(owner_kind="allocation", owner_id=world.allocation.pk).update(
        spent_usd=Decimal("1000000")
    )
    with pytest.raises(CommandError, match="1 ledger totals differ"):
        call_command("ledger_totals")
    call_command("ledger_totals", "--rebuild")
    call_command("ledger_totals")
    assert totals.differences() == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_posters_lose_no_cent(postgres, world):
    """Eight connections insert into the same totals at once: every cent arrives, and the
    fixed upsert order leaves no deadlock."""
    barrier = threading.Barrier(8)
    errors = []

    def post(i):
        try:
            barrier.wait(timeout=10)
            for _ in range(5):
                with transaction.atomic():
                    LedgerEntry.objects.bulk_create(
                        [
                            _entry(world, K.USAGE, "0.0100000001"),
                            _entry(world, K.COMMITMENT, "1.00", allocation=i % 2 == 0),
                        ]
                    )
        except Exception as exc:  # noqa: BLE001 - the test reports what happened
            errors.append(exc)
        finally:
            connection.close()

    before = _figures(world)
    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    (fs_committed, fs_spent), (a_committed, a_spent) = _figures(world)
    assert fs_spent - before[0][1] == Decimal("0.0100000001") * 40
    assert fs_committed - before[0][0] == Decimal("40.00")
    assert a_committed - before[1][0] == Decimal("20.00")
    assert a_spent - before[1][1] == Decimal("0.0100000001") * 40
    assert totals.differences() == []
