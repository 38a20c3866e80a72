"""The two-person rule on invoices covers every change to their lines (adding, removing,
voiding and replacing), and a closed month's invoices never change: the attacks of issue 22
performed, through the services and the pages, and the legitimate paths."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.urls import reverse

from labgov.accounts.models import Role
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.invoicing.services import (
    invoice_issue,
    invoice_line_add,
    invoice_line_remove,
    invoice_void,
    invoices_generate,
    period_close_checked,
)
from tests.factories import MembershipFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)
NOV = dt.date(2026, 11, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


@pytest.fixture
def draft(world, account, pod):
    """October's draft of the standing grant: $3.33 of GPU, every day held and matching."""
    bill(pod, at(2026, 10, 3, 1), allocation=world.allocation, gpu="3.333")
    bill(pod, at(2026, 11, 2, 1), allocation=world.allocation, gpu="1.25")
    synced(account, at(2026, 9, 30), at(2026, 11, 3))
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    return draft


def _direct(invoice) -> D:
    invoice.refresh_from_db()
    return sum(
        (line.amount_usd for line in invoice.lines.exclude(kind=InvoiceLine.Kind.INDIRECT)), D(0)
    )


def test_removing_someone_elses_credit_is_a_change_another_person_issues(world, draft):
    credit = invoice_line_add(
        actor=world.inst_admin, invoice=draft, kind="credit", amount_usd=D("20.00"), reason="SLA"
    )
    assert _direct(draft) == D("-16.67")
    # The attack: finance removes the admin's $20 credit and issues alone.
    invoice_line_remove(actor=world.finance, line=credit)
    assert _direct(draft) == D("3.33")
    with pytest.raises(DomainError, match="another person issues it"):
        invoice_issue(actor=world.finance, invoice=draft)
    # The admin entered the credit (a change too): a second finance person issues.
    with pytest.raises(DomainError, match="another person issues it"):
        invoice_issue(actor=world.inst_admin, invoice=draft)
    second = MembershipFactory(role=Role.FINANCE, lab=None, institution=world.institution).user
    issued = invoice_issue(actor=second, invoice=draft)
    assert issued.status == "issued" and issued.total_usd == D("3.33")
    assert AuditEvent.objects.filter(action="invoice.line_remove", actor=world.finance).exists()


def test_voiding_and_cutting_ones_own_credit_needs_another_issuer(world, draft):
    invoice_line_add(
        actor=world.finance, invoice=draft, kind="credit", amount_usd=D("1.00"), reason="Outage"
    )
    issued = invoice_issue(actor=world.inst_admin, invoice=draft)
    assert issued.total_usd == D("2.33")
    # The attack: she voids it, takes her credit off the replacement and issues alone.
    replacement = invoice_void(actor=world.finance, invoice=issued, reason="Redo")
    (credit,) = replacement.lines.filter(kind="credit")
    invoice_line_remove(actor=world.finance, line=credit)
    with pytest.raises(DomainError, match="another person issues it"):
        invoice_issue(actor=world.finance, invoice=replacement)
    # Voided alone, untouched after: still the voider's change.
    assert set(replacement.changed_by.all()) == {world.finance}
    again = invoice_issue(actor=world.inst_admin, invoice=replacement)
    assert again.total_usd == D("3.33") and again.number == "2026-00002"


def test_voiding_is_a_change_of_the_voider_even_without_edits(world, draft):
    issued = invoice_issue(actor=world.finance, invoice=draft)
    replacement = invoice_void(actor=world.inst_admin, invoice=issued, reason="Wrong grant")
    with pytest.raises(DomainError, match="another person issues it"):
        invoice_issue(actor=world.inst_admin, invoice=replacement)
    assert invoice_issue(actor=world.finance, invoice=replacement).status == "issued"


def test_after_close_nothing_of_the_month_changes(world, draft):
    period_close_checked(actor=world.inst_admin, institution=world.institution, month=OCT)
    draft.refresh_from_db()
    assert draft.status == "issued"
    # The attack: void the closed month's invoice, put a manual line on its replacement,
    # issue it. Refused at the first step: the closed month keeps its invoice.
    with pytest.raises(DomainError, match="October 2026 is closed"):
        invoice_void(actor=world.finance, invoice=draft, reason="Rebill")
    draft.refresh_from_db()
    assert draft.status == "issued" and not Invoice.objects.filter(replaces=draft).exists()
    # A draft lingering inside a closed month (made before this rule) takes no line and is
    # never issued.
    stale = Invoice.objects.create(
        institution=world.institution,
        funding_source=world.other_funding_source,
        lab=world.other_funding_source.lab,
        month=OCT,
        period_start=draft.period_start,
        period_end=draft.period_end,
    )
    with pytest.raises(DomainError, match="closed"):
        invoice_line_add(
            actor=world.finance, invoice=stale, kind="manual", amount_usd=D("-1500"), reason="x"
        )
    with pytest.raises(DomainError, match="closed"):
        invoice_issue(actor=world.inst_admin, invoice=stale)
    # The correction goes to the first open month.
    (november,) = invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    line = invoice_line_add(
        actor=world.finance,
        invoice=november,
        kind="credit",
        amount_usd=D("1.50"),
        reason="October's outage",
    )
    assert line.invoice == november and _direct(november) == D("-0.25")


def test_the_attacks_through_the_pages(world, draft, client_for):
    client_for(world.inst_admin).post(
        reverse("invoicing:line_add", args=[draft.pk]),
        {"kind": "credit", "amount_usd": "20.00", "reason": "SLA"},
    )
    credit = draft.lines.get(kind="credit")
    finance = client_for(world.finance)
    finance.post(reverse("invoicing:line_remove", args=[draft.pk, credit.pk]))
    assert not draft.lines.filter(kind="credit").exists()
    page = finance.post(reverse("invoicing:issue", args=[draft.pk]), follow=True)
    assert "another person issues it" in page.content.decode()
    draft.refresh_from_db()
    assert draft.status == "draft"
    period_close_checked(
        actor=MembershipFactory(role=Role.FINANCE, lab=None, institution=world.institution).user,
        institution=world.institution,
        month=OCT,
    )
    draft.refresh_from_db()
    page = client_for(world.finance).post(
        reverse("invoicing:void", args=[draft.pk]), {"reason": "Rebill"}, follow=True
    )
    assert "October 2026 is closed" in page.content.decode()
    draft.refresh_from_db()
    assert draft.status == "issued"


def test_a_closed_months_invoice_offers_no_void_or_lines(world, draft, client_for):
    url = reverse("invoicing:invoice", args=[draft.pk])
    finance = client_for(world.finance)
    page = finance.get(url).content.decode()
    assert 'id="month-closed"' not in page and reverse("invoicing:issue", args=[draft.pk]) in page
    period_close_checked(
        actor=MembershipFactory(role=Role.FINANCE, lab=None, institution=world.institution).user,
        institution=world.institution,
        month=OCT,
    )
    page = finance.get(url).content.decode()
    assert "October 2026 is closed: this invoice is frozen" in page
    for action in ("invoicing:void", "invoicing:issue", "invoicing:line_add"):
        assert reverse(action, args=[draft.pk]) not in page
