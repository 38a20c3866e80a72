"""A month that agrees reconciles: its days are held by sync windows taken together, it closes
without an accepted difference, and an issued invoice's lines become reconciled when their
days do (or the invoice says in words why not)."""

import datetime as dt

import pytest
import time_machine
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.invoicing.models import Invoice
from labgov.invoicing.reconciliation import invoice_reconciliation, period_reconciliation
from labgov.invoicing.selectors import invoice_lines
from labgov.invoicing.services import invoice_issue, invoices_generate, period_close_checked
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)
NOW = at(2026, 11, 5, 12)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def october(world, account, pod, volume, grant):
    """October billed on 1, 12 and 31 October; no sync window yet."""
    alloc = world.allocation
    bill(pod, at(2026, 10, 1, 0), allocation=alloc, gpu="0.69", disk="0.0137")
    bill(pod, at(2026, 10, 12, 9), allocation=alloc, gpu="0.69", disk="0.0137")
    bill(pod, at(2026, 10, 31, 23), allocation=alloc, gpu="0.69")
    bill(volume, at(2026, 10, 15, 5), allocation=alloc, standard="0.00959")
    bill(volume, at(2026, 10, 16, 5), standard="0.5")  # unattributed
    return alloc


def test_two_adjacent_windows_hold_the_day_they_share(world, account, october):
    # Neither window holds 12 October alone; together they cover every hour of it.
    synced(account, at(2026, 9, 30), at(2026, 10, 12, 6))
    synced(account, at(2026, 10, 12, 6), at(2026, 11, 2))
    (a,) = period_reconciliation(world.institution, OCT)
    day = next(d for d in a.days if d.day == dt.date(2026, 10, 12))
    assert day.held and day.matched
    assert a.days_missing == [] and a.reconciled


def test_a_month_that_agrees_closes_without_a_reason_and_its_invoices_are_reconciled(
    world, account, october
):
    synced(account, at(2026, 9, 30, 14), at(2026, 10, 20, 3))  # a first sync begun mid-day...
    synced(account, at(2026, 10, 18), at(2026, 11, 2))  # ...and one overlapping it
    synced(account, at(2026, 9, 30), at(2026, 10, 1))  # what a whole-day first sync adds
    period = period_close_checked(actor=world.finance, institution=world.institution, month=OCT)
    assert period.acceptance_reason == "" and period.accepted_difference_usd == 0
    assert not AuditEvent.objects.filter(action="period.accept").exists()
    (invoice,) = Invoice.objects.filter(month=OCT)
    assert invoice.status == Invoice.Status.ISSUED
    assert invoice.is_reconciled  # every line, F&A included
    assert invoice_reconciliation(invoice, invoice_lines(invoice)).reconciled


def test_an_issued_invoices_lines_become_reconciled_when_their_days_do(
    world, account, october, client_for
):
    synced(account, at(2026, 9, 30), at(2026, 10, 12, 6))
    synced(account, at(2026, 10, 13), at(2026, 11, 2))
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    invoice = invoice_issue(actor=world.finance, invoice=draft)
    assert not invoice.is_reconciled  # as generated: 12 October was not held
    status = invoice_reconciliation(invoice, invoice_lines(invoice))
    assert not status.reconciled
    assert status.why_not == ["Main: 12 Oct not synced whole yet"]
    storage = invoice.lines.get(category="network_standard")
    assert storage.pk in status.line_ids  # only 15 October: held and matching
    url = reverse("invoicing:invoice", args=[invoice.pk])
    page = client_for(world.finance).get(url).content.decode()
    assert "Provisional: Main: 12 Oct not synced whole yet." in page

    synced(account, at(2026, 10, 12), at(2026, 10, 13))  # a later sync fetches the day
    status = invoice_reconciliation(invoice, invoice_lines(invoice))
    assert status.reconciled and status.line_ids == set(invoice.lines.values_list("pk", flat=True))
    page = client_for(world.finance).get(url).content.decode()
    assert "Reconciled: every line" in page and "Provisional" not in page


def _exports(client, invoice) -> tuple[str, list[str], str, str]:
    """What the invoice's PDF, CSV (its lines' column), XLSX and the month's journal say."""
    import csv
    import io

    import openpyxl
    import pypdf

    pdf = client.get(reverse("exports:invoice_pdf", args=[invoice.pk])).content
    text = " ".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages)
    text = " ".join(text.split())
    lines = b"".join(client.get(reverse("exports:invoice_csv", args=[invoice.pk]))).decode()
    flags = [row["reconciled"] for row in csv.DictReader(io.StringIO(lines))]
    xlsx = client.get(reverse("exports:invoice_xlsx", args=[invoice.pk])).content
    summary = openpyxl.load_workbook(io.BytesIO(xlsx))["Summary"]
    args = [invoice.institution_id, 2026, 10]
    journal = b"".join(client.get(reverse("exports:period_journal_csv", args=args))).decode()
    (posting,) = [
        r for r in csv.DictReader(io.StringIO(journal)) if not r["status"].startswith("not")
    ]
    return text, flags, summary["L2"].value, posting["status"]


def test_an_issued_invoices_exports_say_what_its_page_says(world, account, october, client_for):
    """Its PDF, CSV and XLSX and the journal read reconciled once the days are matched, and
    until then the PDF says in words which day is missing."""
    synced(account, at(2026, 9, 30), at(2026, 10, 12, 6))
    synced(account, at(2026, 10, 13), at(2026, 11, 2))
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    invoice = invoice_issue(actor=world.finance, invoice=draft)
    client = client_for(world.finance)
    text, flags, summary, posting = _exports(client, invoice)
    assert "Reconciliation: provisional" in text and "Main: 12 Oct not synced whole yet" in text
    assert "no" in flags and "yes" in flags  # 15 October's storage line is matched already
    assert summary == "provisional" and posting == "issued, provisional"

    synced(account, at(2026, 10, 12), at(2026, 10, 13))  # a later sync fetches the day
    text, flags, summary, posting = _exports(client, invoice)
    assert "Reconciliation: reconciled" in text and "not synced whole" not in text
    assert set(flags) == {"yes"}
    assert summary == "reconciled" and posting == "issued, reconciled"


def test_a_day_that_differs_is_named(world, account, pod, october):
    from labgov.runpod.models import BillingRecord

    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    BillingRecord.objects.filter(bucket_start=at(2026, 10, 12, 9)).update(gpu_usd=0, total_usd=0)
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    status = invoice_reconciliation(draft, invoice_lines(draft))
    assert status.why_not == ["Main: 12 Oct differs from Runpod"]
