from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from labgov.audit.models import AuditEvent
from labgov.core.append_only import AppendOnlyError
from labgov.funding.models import FundingSource, LedgerEntry
from labgov.funding.services import ledger_post

K = LedgerEntry.Kind


def _post(world, kind, amount, **kwargs):
    return ledger_post(
        actor=world.lab_admin,
        funding_source=world.funding_source,
        allocation=world.allocation,
        kind=kind,
        amount_usd=Decimal(amount),
        **kwargs,
    )


def test_balances_are_sums_of_entries(world):
    _post(world, K.COMMITMENT, "300.00")
    _post(world, K.RELEASE, "-100.00")
    _post(world, K.USAGE, "12.3456789012")
    _post(world, K.ADJUSTMENT, "-2.3456789012")
    fs = FundingSource.objects.with_figures().get(pk=world.funding_source.pk)
    assert fs.committed_usd == Decimal("200.00")
    assert fs.spent_usd == Decimal("10.00")
    assert fs.remaining_usd == Decimal("9790.00")
    allocation = type(world.allocation).objects.with_figures().get(pk=world.allocation.pk)
    assert allocation.remaining_usd == Decimal("790.00")


def test_fractions_of_a_cent_are_kept(world):
    for _ in range(4):
        _post(world, K.USAGE, "0.000137")
    fs = FundingSource.objects.with_figures().get(pk=world.funding_source.pk)
    assert fs.spent_usd == Decimal("0.000548")


def test_idempotency_key_posts_once(world):
    first = _post(world, K.USAGE, "5", idempotency_key="sync:1:2026-01-01")
    again = _post(world, K.USAGE, "5", idempotency_key="sync:1:2026-01-01")
    assert first.pk == again.pk
    assert LedgerEntry.objects.count() == 1


def test_adjustments_are_audited(world):
    entry = _post(world, K.ADJUSTMENT, "-20.00", memo="Runpod credit for outage")
    event = AuditEvent.objects.get(action="ledger.adjust")
    assert event.target_id == str(entry.pk)
    assert event.note == "Runpod credit for outage"


def test_entries_cannot_be_changed_through_the_orm(world):
    entry = _post(world, K.USAGE, "5")
    entry.amount_usd = Decimal("1")
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    with pytest.raises(AppendOnlyError):
        LedgerEntry.objects.filter(pk=entry.pk).update(amount_usd=Decimal("0"))
    with pytest.raises(AppendOnlyError):
        LedgerEntry.objects.all().delete()


@pytest.mark.parametrize(
    "sql", ["UPDATE funding_ledgerentry SET amount_usd = 0", "DELETE FROM funding_ledgerentry"]
)
def test_entries_cannot_be_changed_in_sql(world, sql):
    _post(world, K.USAGE, "5")
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
    assert LedgerEntry.objects.get().amount_usd == Decimal("5")


def test_amounts_must_be_decimal(world):
    with pytest.raises(TypeError):
        ledger_post(actor=None, funding_source=world.funding_source, kind=K.USAGE, amount_usd=5.0)


def test_allocation_must_belong_to_the_funding_source(world):
    from labgov.core.errors import DomainError

    with pytest.raises(DomainError):
        ledger_post(
            actor=None,
            funding_source=world.other_funding_source,
            allocation=world.allocation,
            kind=K.USAGE,
            amount_usd=Decimal("1"),
        )
