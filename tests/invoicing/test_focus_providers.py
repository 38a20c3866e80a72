"""A FOCUS billing source beside Runpod: one invoice per funding source carries lines from
both providers, each provider reconciles against its own totals, a provider's credits and
adjustments are lines of their own, and a corrected file of a closed month becomes late usage
on the first open month's invoice, the closed one unchanged."""

import csv
import datetime as dt
import io
from decimal import Decimal as D
from pathlib import Path

import openpyxl
import pypdf
import pytest
import time_machine
from django.urls import reverse

from labgov.invoicing.reconciliation import period_reconciliation
from labgov.invoicing.selectors import invoice_lines, period_invoices
from labgov.invoicing.services import invoices_generate, period_close_checked
from labgov.runpod.focus import FocusRefused, focus_import, source_create
from labgov.runpod.models import AttributionRule
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
FILES = Path(__file__).parents[1] / "runpod" / "focus_files"
OCT, NOV = dt.date(2026, 10, 1), dt.date(2026, 11, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


@pytest.fixture
def aws(world):
    source = source_create(
        actor=world.inst_admin, institution=world.institution, name="AWS research", provider="AWS"
    )
    AttributionRule.objects.create(
        lab=world.lab,
        account=source,
        kind=AttributionRule.Kind.TAG,
        pattern="costcenter=CC-1042",
        allocation=world.allocation,
        starts_at=at(2026, 9, 1),
    )
    return source


def _import(world, source, name, **kwargs):
    with open(FILES / name, "rb") as stream:
        return focus_import(actor=world.inst_admin, account=source, stream=stream, **kwargs)


def test_one_invoice_carries_both_providers_and_each_reconciles_on_its_own(
    world, account, pod, aws
):
    bill(pod, at(2026, 10, 1, 0), allocation=world.allocation, gpu="0.69")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _import(world, aws, "aws_2026_10.csv")
    (invoice,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    lines = list(invoice_lines(invoice))
    by_kind = {}
    for line in lines:
        if line.kind == "usage":
            by_kind.setdefault(line.resource.kind, []).append(line)
    assert {line.category for line in by_kind["pod"]} == {"gpu_compute"}
    assert {line.category for line in by_kind["cloud"]} == {
        "cloud_compute",
        "cloud_storage",
        "cloud_credit",  # the S3 credit: its own line, not netted into storage
    }
    assert sum(line.exact_amount_usd for line in by_kind["cloud"]) == D("26.3913578025")
    focus, runpod = sorted(
        period_reconciliation(world.institution, OCT), key=lambda a: a.account.is_focus
    )[::-1]
    assert focus.account == aws and focus.runpod_usd == D("27.3813578025")
    assert focus.reconciled and focus.unattributed_usd == D("0.99")  # the tax: no rule
    categories = {row.category: (row.records_usd, row.runpod_usd) for row in focus.categories}
    assert categories["cloud_storage"] == (D("3.20"), D("3.20"))
    assert categories["cloud_credit"] == (D("-1.50"), D("-1.50"))
    assert runpod.account == account and runpod.reconciled


def test_a_corrected_file_of_a_closed_month_becomes_late_usage(world, aws):
    _import(world, aws, "aws_2026_10.csv")
    period_close_checked(actor=world.finance, institution=world.institution, month=OCT)
    (october,) = period_invoices(world.institution, OCT)
    frozen = [(line.category, line.exact_amount_usd) for line in invoice_lines(october)]
    with pytest.raises(
        FocusRefused,
        match="Row 2, column BillingPeriodStart: the file is of October 2026, which finance",
    ):
        _import(world, aws, "aws_2026_10_corrected.csv")
    result = _import(world, aws, "aws_2026_10_corrected.csv", late=True)
    assert result.file.late
    assert [(line.category, line.exact_amount_usd) for line in invoice_lines(october)] == frozen
    (november,) = invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    late = [line for line in invoice_lines(november) if line.kind == "late_usage"]
    # The EC2 hour of 2 October fell from 12.3456789012 to 10.00; the S3 credit is gone.
    assert {(line.category, line.exact_amount_usd) for line in late} == {
        ("cloud_compute", D("-2.3456789012")),
        ("cloud_credit", D("1.50")),
    }
    assert all(line.corrects_month == OCT and line.corrects_invoice == october for line in late)


def test_a_providers_credit_and_adjustment_are_lines_of_their_own_on_invoice_and_exports(
    world, aws, client_for
):
    """credits_2026_10.csv: EC2 usage of 10.00 with a credit of 2.50 in the same hour and one
    of 4.00 alone; S3 usage of 3.20 and an adjustment of 1.20. A finance user reads the usage
    at its full price and the credit as a negative line named as one, in every format."""
    _import(world, aws, "credits_2026_10.csv")
    (invoice,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    lines = {(line.category, line.description): line.amount_usd for line in invoice_lines(invoice)}
    assert lines == {
        ("cloud_compute", "Cloud resource (FOCUS) train-vision-1"): D("10.00"),
        ("cloud_credit", "Credit from AWS: Cloud resource (FOCUS) train-vision-1"): D("-6.50"),
        ("cloud_storage", "Cloud resource (FOCUS) vision-datasets"): D("3.20"),
        ("cloud_adjustment", "Adjustment from AWS: Cloud resource (FOCUS) vision-datasets"): D(
            "1.20"
        ),
    }
    assert invoice.total_usd == sum(lines.values()) == D("7.90") == invoice.exact_total_usd
    (focus,) = period_reconciliation(world.institution, OCT)
    assert focus.reconciled and focus.runpod_usd == focus.attributed_usd == D("7.90")
    categories = {row.category: (row.records_usd, row.runpod_usd) for row in focus.categories}
    assert categories == {
        "cloud_compute": (D("10.00"), D("10.00")),
        "cloud_credit": (D("-6.50"), D("-6.50")),
        "cloud_storage": (D("3.20"), D("3.20")),
        "cloud_adjustment": (D("1.20"), D("1.20")),
    }

    client = client_for(world.finance)
    response = client.get(reverse("exports:invoice_csv", args=[invoice.pk]))
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    credit = next(r for r in rows if r["description"].startswith("Credit from AWS"))
    assert credit["amount_usd"] == "-6.50"
    assert sum(D(r["amount_usd"]) for r in rows) == invoice.total_usd
    response = client.get(reverse("exports:invoice_xlsx", args=[invoice.pk]))
    sheet = openpyxl.load_workbook(io.BytesIO(response.content)).worksheets[1]
    cells = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert any(
        "Credit from AWS: Cloud resource (FOCUS) train-vision-1" in row and -6.5 in row
        for row in cells
    )
    response = client.get(reverse("exports:invoice_pdf", args=[invoice.pk]))
    text = " ".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(response.content)).pages)
    words = " ".join(text.split())
    assert "Credit from AWS: Cloud resource (FOCUS) train-vision-1" in words and "-6.50" in words
    assert "Cloud credits (FOCUS)" in words
