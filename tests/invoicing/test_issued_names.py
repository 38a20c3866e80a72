"""An issued invoice is a frozen document: renaming the lab, the funding source, the
institution or the person after it was issued changes none of its formats."""

import csv
import datetime as dt
import io

import openpyxl
import pypdf
import pytest
import time_machine
from django.urls import reverse

from labgov.invoicing.services import invoice_issue, invoices_generate
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


def _rename(world):
    world.lab.name = "Renamed Lab"
    world.lab.save()
    world.funding_source.name = "Renamed Grant"
    world.funding_source.save()
    world.institution.name = "Renamed University"
    world.institution.save()
    world.member.first_name, world.member.last_name = "Renamed", "Person"
    world.member.save()


def _formats(client, pk) -> dict[str, str]:
    text = {}
    response = client.get(reverse("exports:invoice_csv", args=[pk]))
    body = b"".join(response.streaming_content).decode()
    text["csv"] = " ".join(" ".join(row) for row in csv.reader(io.StringIO(body)))
    book = openpyxl.load_workbook(
        io.BytesIO(client.get(reverse("exports:invoice_xlsx", args=[pk])).content)
    )
    text["xlsx"] = " ".join(
        str(cell)
        for sheet in book.worksheets
        for row in sheet.iter_rows(values_only=True)
        for cell in row
        if cell is not None
    )
    pdf = pypdf.PdfReader(io.BytesIO(client.get(reverse("exports:invoice_pdf", args=[pk])).content))
    text["pdf"] = " ".join(page.extract_text() for page in pdf.pages)
    text["page"] = client.get(reverse("invoicing:invoice", args=[pk])).content.decode()
    return {name: " ".join(t.split()) for name, t in text.items()}  # the PDF wraps lines


def test_an_issued_invoice_shows_the_names_it_was_issued_under_in_every_format(
    world, account, pod, client_for
):
    bill(pod, at(2026, 10, 3, 1), allocation=world.allocation, gpu="3.333")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    old = {
        "lab": world.lab.name,
        "grant": world.funding_source.name,
        "institution": world.institution.name,
        "person": f"{world.member.first_name} {world.member.last_name}",
    }
    issued = invoice_issue(actor=world.finance, invoice=draft)
    _rename(world)
    client = client_for(world.finance)
    for name, text in _formats(client, issued.pk).items():
        shown = ("lab", "grant") if name == "xlsx" else ("lab", "grant", "institution")
        for what in shown:  # the XLSX names no institution
            assert old[what] in text, (name, what)
        assert "Renamed Lab" not in text and "Renamed Grant" not in text, name
        assert "Renamed University" not in text, name
    for name, text in _formats(client, issued.pk).items():
        if name != "csv":  # the per-line CSV carries no person column
            assert old["person"] in text and "Renamed Person" not in text, name


def test_a_draft_shows_todays_names(world, account, pod, client_for):
    bill(pod, at(2026, 10, 3, 1), allocation=world.allocation, gpu="3.333")
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    _rename(world)
    text = _formats(client_for(world.finance), draft.pk)
    assert all("Renamed Lab" in t and "Renamed Grant" in t for t in text.values())
    assert "Renamed Person" in text["pdf"] and "Renamed Person" in text["xlsx"]
