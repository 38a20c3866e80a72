import datetime as dt
from decimal import Decimal

import pytest

from labgov.accounts.access import forget_scope
from labgov.accounts.models import Role
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.money import ZERO, grouped_sums
from labgov.funding.models import Allocation, LedgerEntry
from labgov.transfers.models import CostTransfer
from labgov.transfers.selectors import transfers_for
from labgov.transfers.services import (
    Refused,
    available_to_move,
    cost_transfer_approve,
    cost_transfer_create,
    cost_transfer_reject,
)
from labgov.usage.models import Category, DailySpend, MonthlySpend
from labgov.usage.periods import period_close
from labgov.usage.services import rollups_rebuild
from tests.derived_rollups import assert_derived_rollups_match
from tests.factories import MembershipFactory
from tests.transfers.conftest import NOV

NOV_SPEND = Decimal("48.0000000048")


def _move(actor, account, source, target, amount, **kwargs):
    return cost_transfer_create(
        actor=actor,
        account=account,
        from_allocation=source,
        to_allocation=target,
        month=kwargs.pop("month", NOV),
        amount_usd=Decimal(amount),
        justification=kwargs.pop("justification", "Charged to the wrong grant"),
        **kwargs,
    )


def _monthly(account) -> dict:
    return {
        k[0]: v
        for k, v in grouped_sums(
            MonthlySpend.objects.filter(account=account, month=NOV), ["allocation_id"], "amount_usd"
        ).items()
    }


def _spent(allocation) -> Decimal:
    return Allocation.objects.with_figures().get(pk=allocation.pk).spent_usd


def _assert_ledger_equals_rollups(*allocations):
    """The allocations' spent figure (ledger) equals their rollups, to the last digit."""
    for allocation in allocations:
        rollup = grouped_sums(
            DailySpend.objects.filter(allocation=allocation), ["allocation_id"], "amount_usd"
        ).get((allocation.pk,), ZERO)
        assert _spent(allocation) == rollup


def test_finance_moves_spend_at_once_in_ledger_rollups_and_audit(world, spent):
    account, pod, second, other = spent
    transfer = _move(world.finance, account, world.allocation, other, "10.5")
    assert transfer.state == CostTransfer.State.APPLIED
    assert transfer.decided_by == world.finance and not transfer.needs_approval
    legs = LedgerEntry.objects.filter(source=f"cost-transfer:{transfer.pk}")
    assert sorted(legs.values_list("allocation_id", "amount_usd")) == sorted(
        [(world.allocation.pk, Decimal("-10.5")), (other.pk, Decimal("10.5"))]
    )
    assert {e.kind for e in legs} == {LedgerEntry.Kind.ADJUSTMENT}
    monthly = _monthly(account)
    assert monthly[world.allocation.pk] == NOV_SPEND - Decimal("10.5")
    assert monthly[other.pk] == Decimal("10.5")
    assert sum(monthly.values()) == NOV_SPEND  # nothing created, nothing lost
    _assert_ledger_equals_rollups(world.allocation, other)
    assert_derived_rollups_match()  # the lab's daily chart moves with it
    actions = set(
        AuditEvent.objects.filter(
            target_type="transfers.costtransfer", target_id=str(transfer.pk)
        ).values_list("action", flat=True)
    )
    assert actions == {"cost_transfer.create", "cost_transfer.apply"}
    # A re-sync rebuilds the month's rollups from records; the transfer's rows stay.
    rollups_rebuild(account=account, days=[NOV, dt.date(2026, 11, 2)])
    assert _monthly(account) == monthly
    assert_derived_rollups_match()
    # Both funding sources' invoices see it.
    out = transfers_for(world.funding_source, NOV, dt.date(2026, 12, 1))
    into = transfers_for(world.other_funding_source, NOV, dt.date(2026, 12, 1))
    assert [(line.amount_usd, line.direction) for line in out] == [(Decimal("-10.5"), "out")]
    assert [(line.amount_usd, line.direction) for line in into] == [(Decimal("10.5"), "in")]
    assert transfers_for(world.funding_source, dt.date(2026, 10, 1), NOV) == []


def test_lab_admin_proposes_within_the_lab_and_a_second_person_approves(world, spent):
    account, pod, second, other = spent
    transfer = _move(world.lab_admin, account, world.allocation, second, "5", resource=pod)
    assert transfer.state == CostTransfer.State.PENDING
    assert not LedgerEntry.objects.filter(source=f"cost-transfer:{transfer.pk}").exists()
    assert _monthly(account) == {world.allocation.pk: NOV_SPEND}
    # The proposer cannot approve it, even after becoming finance.
    MembershipFactory(
        user=world.lab_admin, role=Role.FINANCE, lab=None, institution=world.institution
    )
    forget_scope(world.lab_admin)
    with pytest.raises(DomainError, match="your own transfer"):
        cost_transfer_approve(actor=world.lab_admin, transfer=transfer)
    with pytest.raises(DomainError, match="Only finance"):
        cost_transfer_approve(actor=world.member, transfer=transfer)
    approved = cost_transfer_approve(actor=world.finance, transfer=transfer, note="ok")
    assert approved.state == CostTransfer.State.APPLIED and approved.decided_by == world.finance
    assert _monthly(account) == {world.allocation.pk: NOV_SPEND - 5, second.pk: Decimal(5)}
    _assert_ledger_equals_rollups(world.allocation, second)
    apply = AuditEvent.objects.get(action="cost_transfer.apply", target_id=str(transfer.pk))
    assert apply.actor == world.finance
    assert apply.after["proposed_by"] == world.lab_admin.pk
    assert apply.after["decided_by"] == world.finance.pk
    with pytest.raises(DomainError, match="applied"):
        cost_transfer_reject(actor=world.inst_admin, transfer=transfer, note="too late")


def test_a_rejection_needs_a_reason_and_moves_nothing(world, spent):
    account, pod, second, _ = spent
    transfer = _move(world.lab_admin, account, world.allocation, second, "5")
    with pytest.raises(DomainError, match="why"):
        cost_transfer_reject(actor=world.finance, transfer=transfer, note=" ")
    cost_transfer_reject(actor=world.finance, transfer=transfer, note="Not allowable")
    transfer.refresh_from_db()
    assert transfer.state == CostTransfer.State.REJECTED
    assert _monthly(account) == {world.allocation.pk: NOV_SPEND}
    assert AuditEvent.objects.filter(action="cost_transfer.reject").count() == 1


def test_a_lab_admin_cannot_move_spend_across_labs(world, spent):
    """The attack: the lab admin pushes their lab's spend onto the other lab's grant, and
    pulls the other lab's spend onto nothing of theirs."""
    account, pod, second, other = spent
    with pytest.raises(DomainError, match="own lab"):
        _move(world.lab_admin, account, world.allocation, other, "5")
    with pytest.raises(DomainError, match="lab's admins"):
        _move(world.lab_admin, account, other, world.allocation, "5")
    with pytest.raises(DomainError, match="lab's admins"):
        _move(world.member, account, world.allocation, second, "5")
    assert not CostTransfer.objects.exists()


def test_a_closed_month_is_refused(world, spent):
    account, pod, second, _ = spent
    october = dt.date(2026, 10, 1)
    assert available_to_move(account=account, allocation=world.allocation, month=october) > 0
    period_close(actor=world.finance, institution=world.institution, year=2026, month=10)
    with pytest.raises(Refused, match="closed") as refused:
        _move(world.finance, account, world.allocation, second, "1", month=october)
    assert refused.value.problems[0][0] == "month"
    assert not CostTransfer.objects.exists()


def test_more_than_was_spent_is_refused_and_every_problem_is_told(world, spent):
    account, pod, second, _ = spent
    with pytest.raises(Refused) as refused:
        _move(world.finance, account, world.allocation, second, "48.0000000049")
    assert refused.value.problems[0][0] == "amount_usd"
    _move(world.finance, account, world.allocation, second, "40")
    # What is left is what may move; on the resource the same.
    with pytest.raises(Refused, match="At most \\$8.0000000048"):
        _move(world.finance, account, world.allocation, second, "8.0000000049", resource=pod)
    _move(world.finance, account, world.allocation, second, "8.0000000048", resource=pod)
    assert _monthly(account)[world.allocation.pk] == ZERO
    # Several problems at once, each with its field.
    with pytest.raises(Refused) as refused:
        _move(world.finance, account, world.allocation, world.allocation, "0", justification="")
    fields = {field for field, _ in refused.value.problems}
    assert {"justification", "amount_usd", "to_allocation"} <= fields


def test_approval_checks_the_spend_again(world, spent):
    account, pod, second, _ = spent
    first = _move(world.lab_admin, account, world.allocation, second, "30")
    _move(world.finance, account, world.allocation, second, "30")
    with pytest.raises(Refused, match="At most"):
        cost_transfer_approve(actor=world.finance, transfer=first)
    first.refresh_from_db()
    assert first.state == CostTransfer.State.PENDING


def test_the_database_refuses_a_self_approved_proposal(world, spent):
    from django.db import IntegrityError, transaction

    account, pod, second, _ = spent
    transfer = _move(world.lab_admin, account, world.allocation, second, "1")
    with pytest.raises(IntegrityError), transaction.atomic():
        CostTransfer.objects.filter(pk=transfer.pk).update(
            state=CostTransfer.State.APPLIED, decided_by=world.lab_admin
        )


def test_transfer_rows_are_a_category_of_their_own(world, spent):
    account, pod, second, _ = spent
    _move(world.finance, account, world.allocation, second, "2")
    rows = DailySpend.objects.filter(account=account, category=Category.TRANSFER)
    assert sorted(rows.values_list("allocation_id", "amount_usd", "day")) == sorted(
        [(world.allocation.pk, Decimal(-2), NOV), (second.pk, Decimal(2), NOV)]
    )
