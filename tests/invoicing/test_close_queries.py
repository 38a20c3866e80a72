"""Generation writes its drafts together, and closing a month issues them together: numbers
gap-free in the close's order (cost center, funding source), each invoice audited and its
names kept, in a number of queries that does not grow with the drafts; and one draft that may
not be issued keeps them all drafts."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.invoicing.models import Invoice, InvoiceCounter, InvoiceLine
from labgov.invoicing.services import (
    _issue,
    invoice_issue,
    invoice_line_add,
    invoices_generate,
    period_close_checked,
)
from tests.factories import AllocationFactory, FundingSourceFactory, ResourceFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


def _sources(world, account, n: int, offset: int = 0) -> None:
    for i in range(offset, offset + n):
        fs = FundingSourceFactory(lab=world.lab, cost_center=f"C{(7 * i) % 10}", name=f"G{i}")
        allocation = AllocationFactory(funding_source=fs, user=world.member)
        pod = ResourceFactory(account=account, name=f"pod-{i}", runpod_id=f"p{i}")
        bill(pod, at(2026, 10, 3 + i % 20, 1), allocation=allocation, gpu="1.25")


def _drafts(world) -> list[Invoice]:
    return list(
        Invoice.objects.filter(institution=world.institution, month=OCT).order_by(
            "cost_center", "funding_source__name", "pk"
        )
    )


def _issue_queries(world, drafts) -> int:
    with CaptureQueriesContext(connection) as queries:
        _issue(actor=world.finance, invoices=drafts, now=at(2026, 11, 5, 12))
    return len(queries)


def test_issuing_many_drafts_takes_as_many_queries_as_issuing_two(world, account):
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _sources(world, account, 2)
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    few = _issue_queries(world, _drafts(world))
    _sources(world, account, 2, 10)
    # A new month's worth of drafts: void nothing, generate the two new sources' drafts.
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    _sources(world, account, 10, 20)
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    drafts = [d for d in _drafts(world) if d.status == Invoice.Status.DRAFT]
    assert len(drafts) == 12
    assert _issue_queries(world, drafts) == few


def test_a_close_numbers_its_drafts_in_order_without_gaps(world, account):
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _sources(world, account, 6)
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    first = invoice_issue(actor=world.finance, invoice=_drafts(world)[3])
    period_close_checked(
        actor=world.finance, institution=world.institution, month=OCT, acceptance_reason="Test"
    )
    invoices = _drafts(world)
    assert [i.status for i in invoices] == ["issued"] * 6
    rest = [i for i in invoices if i.pk != first.pk]
    assert first.number == "2026-00001"
    assert [i.number for i in rest] == [f"2026-{n:05d}" for n in range(2, 7)]
    assert InvoiceCounter.objects.get(institution=world.institution, year=2026).last_seq == 6
    assert all(i.funding_source_name == i.funding_source.name for i in invoices)
    assert all(i.lines.exclude(person=None).filter(person_name="").count() == 0 for i in invoices)
    issued = AuditEvent.objects.filter(action="invoice.issue").order_by("id")
    assert [e.after["number"] for e in issued] == [i.number for i in [first, *rest]]
    assert {e.target_id for e in issued} == {str(i.pk) for i in invoices}


def test_one_draft_that_may_not_be_issued_keeps_the_close_from_numbering_any(world, account):
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _sources(world, account, 3)
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    last = _drafts(world)[-1]
    invoice_line_add(
        actor=world.finance, invoice=last, kind="credit", amount_usd=D(1), reason="Outage"
    )
    with pytest.raises(DomainError, match="another person issues it"):
        period_close_checked(
            actor=world.finance, institution=world.institution, month=OCT, acceptance_reason="T"
        )
    assert {i.status for i in _drafts(world)} == {"draft"}
    assert not InvoiceCounter.objects.filter(last_seq__gt=0).exists()


def _generate_queries(world) -> int:
    with CaptureQueriesContext(connection) as queries:
        invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    return len(queries)


def _from_scratch(world) -> tuple[int, int]:
    """The queries of a first generation and of a regeneration."""
    InvoiceLine.objects.filter(invoice__institution=world.institution).delete()
    Invoice.objects.filter(institution=world.institution).delete()
    return _generate_queries(world), _generate_queries(world)


def test_generating_many_drafts_takes_as_many_queries_as_generating_two(world, account):
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _sources(world, account, 2)
    _from_scratch(world)  # warm: what is read once per process
    few = _from_scratch(world)
    _sources(world, account, 10, 2)
    assert _from_scratch(world) == few
    drafts = _drafts(world)
    assert len(drafts) == 12 and all(d.total_usd == D("1.25") for d in drafts)
    assert AuditEvent.objects.filter(action="invoice.generate").count() == 2 * (2 + 2 + 12)
