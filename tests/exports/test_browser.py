"""Journey 6 in Chromium: finance generates October's invoices, sees the month reconciled with
Runpod, downloads CSV, XLSX and PDF (one of them through a background job), and closes the
month. The files are read back: they carry the invoices' totals."""

import csv
import datetime as dt
import io
import re
from decimal import Decimal

import openpyxl
import pypdf
import pytest
import time_machine

from labgov.invoicing.models import Invoice
from labgov.usage.models import ClosedPeriod
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory
from tests.fixtures_browser import login
from tests.invoicing.conftest import at, bill, synced

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _download(page, click) -> bytes:
    with page.expect_download() as info:
        click()
    return open(info.value.path(), "rb").read()


def test_finance_exports_and_closes_the_month(browser, live_server, world):
    account = RunpodAccountFactory(institution=world.institution, name="Main")
    pod = ResourceFactory(account=account, name="train-1")
    other_pod = ResourceFactory(account=account, name="nlp-1")
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    for hour in range(3):
        bill(pod, at(2026, 10, 3, hour), allocation=world.allocation, gpu="1.111", disk="0.0137")
    bill(other_pod, at(2026, 10, 31, 23), allocation=other, gpu="1.5")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))

    with time_machine.travel(at(2026, 11, 5, 12), tick=True):
        page = login(browser, live_server, world.finance)
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{live_server.url}/invoices/{world.institution.pk}/2026/10/")
        page.click("button:text('Generate drafts')")
        page.wait_for_selector("#invoices >> text=" + world.funding_source.name)
        assert "Reconciled" in page.inner_text("#reconciliation-status")
        mine = Invoice.objects.get(funding_source=world.funding_source)
        total = mine.total_usd + Invoice.objects.get(funding_source=other.funding_source).total_usd

        page.click("#period-exports")
        page.wait_for_selector("h1:text('Exports')")
        lines = _download(page, lambda: page.click("text=Invoice lines (CSV)")).decode()
        rows = list(csv.DictReader(io.StringIO(lines)))
        assert sum(Decimal(r["amount_usd"]) for r in rows) == total
        journal = _download(page, lambda: page.click("text=Chargeback journal (CSV)")).decode()
        assert world.funding_source.cost_center in journal

        row = page.locator("tr", has_text=world.funding_source.name)
        book = openpyxl.load_workbook(
            io.BytesIO(_download(page, lambda: row.locator("text=XLSX").click()))
        )
        assert book["Summary"]["I2"].value == float(mine.total_usd)

        # The whole period as PDF, through a background job and its progress page.
        page.click("button:text('Invoices of the period (PDF)')")
        page.wait_for_selector("#export-download")
        pdf = _download(page, lambda: page.click("#export-download"))
        text = " ".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages)
        assert f"USD {mine.total_usd}" in text and world.funding_source.award_number in text
        assert "Reconciliation: reconciled" in text

        page.click("text=Back to the period's exports")
        page.goto(f"{live_server.url}/invoices/{world.institution.pk}/2026/10/")
        page.click("button:text('Close October 2026')")
        page.wait_for_selector("text=Closed")
        assert ClosedPeriod.objects.filter(
            institution=world.institution, month=dt.date(2026, 10, 1)
        ).exists()
        mine.refresh_from_db()
        assert mine.status == "issued" and re.fullmatch(r"2026-\d+", mine.number)
        page.close()
