"""The same invoice as CSV, XLSX (read back with openpyxl) and PDF (text extracted with pypdf)
carries the same lines and totals; no cell can run as a formula."""

import csv
import io
from decimal import Decimal

import openpyxl
import pypdf
from django.urls import reverse

from tests.exports.conftest import EVIL

VISION_TOTAL = Decimal("22.34")  # 19.84 + 0.00 + 5.00 − 2.50, each line rounded half-even
VISION_EXACT = Decimal("22.3501369999")


def _csv(response) -> list[dict]:
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_xlsx_and_pdf_of_an_invoice_carry_the_same_totals(invoices, world, client_for):
    client = client_for(world.finance)
    pk = invoices.vision.pk

    rows = _csv(client.get(reverse("exports:invoice_csv", args=[pk])))
    assert [r["amount_usd"] for r in rows] == ["19.84", "0.00", "5.00", "-2.50"]
    assert sum(Decimal(r["amount_usd"]) for r in rows) == VISION_TOTAL
    assert {r["invoice"] for r in rows} == {"2026-0001"}
    assert rows[0]["award_number"] == world.funding_source.award_number
    assert rows[0]["cost_center"] == world.funding_source.cost_center
    assert rows[0]["period"] == "2026-10" and rows[0]["reconciled"] == "yes"
    assert rows[0]["quantity"] == "10.5000" and rows[0]["rate_usd"] == "1.8900000000"
    assert rows[1]["description"] == "'" + EVIL  # the guard: text, never a formula

    response = client.get(reverse("exports:invoice_xlsx", args=[pk]))
    assert response["Content-Type"].endswith("spreadsheetml.sheet")
    book = openpyxl.load_workbook(io.BytesIO(response.content))
    summary, sheet = book["Summary"], book["2026-0001"]
    assert summary.freeze_panes == "A2" and sheet.freeze_panes == "A2"
    assert summary["I2"].value == float(VISION_TOTAL)
    assert summary["I2"].number_format.startswith('"$"#,##0.00')
    amounts = [sheet.cell(row=r, column=7).value for r in range(2, 6)]
    assert amounts == [19.84, 0.0, 5.0, -2.5]
    assert all(isinstance(a, int | float) for a in amounts)  # numbers, not text
    assert sheet["G6"].value == float(VISION_TOTAL)  # the total row
    assert sheet["B3"].value == EVIL and sheet["B3"].data_type == "s"  # a string, not a formula
    assert sheet["G7"].value == float(VISION_TOTAL - VISION_EXACT)

    response = client.get(reverse("exports:invoice_pdf", args=[pk]))
    assert response["Content-Type"] == "application/pdf"
    text = " ".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(response.content)).pages)
    for expected in (
        "Invoice 2026-0001",
        "Northfield",
        "October 2026",
        world.funding_source.name,
        world.funding_source.award_number,
        world.funding_source.cost_center,
        "USD 22.34",
        str(VISION_EXACT),
        str(VISION_TOTAL - VISION_EXACT),
        "Reconciliation: reconciled",
        "19.84",
        "-2.50",
    ):
        assert expected in text, expected
    words = " ".join(text.split())  # quantities and rates as people write them
    assert "10.5 GPU- hour 1.89" in words and "10.5000" not in text and "1.8900000000" not in text


def test_period_csv_and_journal_add_up_to_the_invoices(invoices, world, client_for):
    client = client_for(world.finance)
    args = [world.institution.pk, 2026, 10]
    rows = _csv(client.get(reverse("exports:period_lines_csv", args=args)))
    assert len(rows) == 5
    total = invoices.vision.total_usd + invoices.nlp.total_usd
    assert sum(Decimal(r["amount_usd"]) for r in rows) == total

    journal = _csv(client.get(reverse("exports:period_journal_csv", args=args)))
    # After the postings, the bridge (tests/invoicing/test_bridge.py): rows that post nothing.
    bridge = [r for r in journal if r["status"].startswith("not posted")]
    assert bridge and all(r["cost_center"] == r["gl_account"] == "" for r in bridge)
    journal = journal[: -len(bridge)]
    assert [r["cost_center"] for r in journal] == sorted(
        [world.funding_source.cost_center, world.other_funding_source.cost_center]
    )
    assert sum(Decimal(r["debit_usd"]) - Decimal(r["credit_usd"]) for r in journal) == total
    by_center = {r["cost_center"]: r for r in journal}
    nlp = by_center[world.other_funding_source.cost_center]
    assert nlp["status"] == "draft, provisional" and nlp["posting_date"] == "2026-10-31"
    assert by_center[world.funding_source.cost_center]["status"] == "issued, reconciled"
    assert journal[0]["line"] == "1" and journal[0]["journal_id"].endswith("-202610")


def test_the_csv_stream_guards_every_cell_in_every_batch():
    from labgov.core.csv_export import csv_stream

    pieces = list(csv_stream(([f"=cmd{i}", "-1.5"] for i in range(2500)), header=["a", "b"]))
    assert len(pieces) == 3  # batches of a thousand rows: memory holds one at a time
    rows = list(csv.reader(io.StringIO("".join(pieces))))
    assert rows[0] == ["a", "b"] and len(rows) == 2501
    assert all(r[0].startswith("'=") and r[1] == "-1.5" for r in rows[1:])
