"""Invoices pick up split shares and cost transfers: both sources' invoices show the move, and
what all invoices charge stays what the records hold."""

import datetime as dt
from decimal import Decimal

import pytest

from labgov.core.money import ZERO, split_by_shares
from labgov.invoicing.models import InvoiceLine
from labgov.invoicing.services import invoice_issue, invoices_generate
from labgov.runpod.models import BillingRecord
from labgov.transfers.services import Refused, cost_transfer_create
from labgov.transfers.splits import resource_split_set
from tests.transfers.conftest import NOV

OCT = dt.date(2026, 10, 1)


def _lines(invoice) -> list[tuple[str, Decimal, int]]:
    return sorted(
        (line.kind, line.exact_amount_usd, line.allocation_id)
        for line in invoice.lines.exclude(kind=InvoiceLine.Kind.INDIRECT)
    )


def test_invoices_of_both_sources_show_splits_and_transfers(world, spent):
    account, pod, second, other = spent
    resource_split_set(
        actor=world.inst_admin,
        resource=pod,
        shares=[(world.allocation, Decimal(60)), (other, Decimal(40))],
        starts_at=dt.datetime(2026, 11, 3, tzinfo=dt.UTC),
    )
    cost_transfer_create(
        actor=world.finance,
        account=account,
        from_allocation=world.allocation,
        to_allocation=other,
        month=NOV,
        amount_usd=Decimal(5),
        justification="Eval runs belong to NLP",
    )
    invoices = {
        i.funding_source_id: i
        for i in invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    }
    mine, theirs = invoices[world.funding_source.pk], invoices[world.other_funding_source.pk]
    day = Decimal("24.0000000024")  # a day of the pod
    sixty, forty = split_by_shares(day, [Decimal(60), Decimal(40)])
    assert _lines(mine) == sorted(
        [
            ("usage", day + sixty, world.allocation.pk),
            ("transfer", Decimal(-5), world.allocation.pk),
        ]
    )
    assert _lines(theirs) == sorted(
        [("usage", forty, other.pk), ("transfer", Decimal(5), other.pk)]
    )
    transfer_line = theirs.lines.get(kind=InvoiceLine.Kind.TRANSFER)
    assert "Eval runs belong to NLP" in transfer_line.description
    november = BillingRecord.objects.filter(
        resource=pod, bucket_start__gte=dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    )
    total = sum(november.values_list("total_usd", flat=True), ZERO)
    assert mine.exact_total_usd + theirs.exact_total_usd == total


def test_no_spend_moves_in_a_month_whose_invoice_is_issued(world, spent):
    account, pod, second, other = spent
    (october,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    invoice_issue(actor=world.finance, invoice=october)
    with pytest.raises(Refused, match="is issued"):
        cost_transfer_create(
            actor=world.finance,
            account=account,
            from_allocation=world.allocation,
            to_allocation=other,
            month=OCT,
            amount_usd=Decimal(1),
            justification="Too late",
        )
