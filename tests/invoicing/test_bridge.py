"""The bridge adds up in cents, on the period page, in the journal CSV and in the XLSX summary,
where the naive sum of rounded invoice lines and unattributed spend misses Runpod's total."""

import csv
import datetime as dt
import io
from decimal import Decimal as D

import openpyxl
import pytest
import time_machine
from django.db import transaction
from django.urls import reverse

from labgov.core.money import to_cents
from labgov.exports.services import export_job_request, export_job_run, job_path
from labgov.invoicing.bridge import period_bridge
from labgov.invoicing.services import invoice_line_add, invoices_generate
from tests.factories import ResourceFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)
NOW = at(2026, 11, 5, 12)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def october(world, account, volume, grant):
    """Three pods at $1.005 each: each line rounds (half to even) to $1.00, so the lines charge
    $3.00 of $3.015. With $0.50 unattributed, Runpod's $3.515 is $3.52, and the naive sum of
    lines and unattributed, $3.50, is 2 ¢ short. A $1.00 credit; F&A at 10 % of what is charged."""
    for n in range(3):
        pod = ResourceFactory(account=account, kind="pod", name=f"train-{n}", runpod_id=f"p{n}")
        bill(pod, at(2026, 10, 3 + n, 4), allocation=world.allocation, gpu="1.005")
    bill(volume, at(2026, 10, 16, 5), standard="0.5")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    invoice_line_add(
        actor=world.inst_admin, invoice=draft, kind="credit", amount_usd=D("1.00"), reason="Pilot"
    )
    draft.refresh_from_db()
    return draft


def _amounts(parts) -> dict[str, D]:
    return {p.key: p.amount_usd for p in parts}


def test_the_bridge_adds_up_where_the_naive_sum_does_not(world, october):
    bridge = period_bridge(world.institution, OCT)
    assert bridge.runpod.amount_usd == D("3.52") and bridge.runpod.exact_usd == D("3.515")
    parts = _amounts(bridge.runpod_parts)
    assert parts == {"direct_usage": D("3.00"), "rounding": D("0.02"), "unattributed": D("0.50")}
    assert parts["direct_usage"] + parts["unattributed"] != bridge.runpod.amount_usd  # naive
    assert sum(parts.values()) == bridge.runpod.amount_usd and bridge.adds_up
    # The invoices: direct usage as on Runpod's bill, the credit, F&A on top of the bill.
    assert _amounts(bridge.invoice_parts) == {
        "direct_usage": D("3.00"),
        "credits": D("-1.00"),
        "indirect": D("0.20"),
    }
    assert bridge.invoices.amount_usd == october.total_usd == D("2.20")


def test_attributed_spend_on_no_invoice_and_spend_labgov_lacks_are_named(world, account, october):
    late = ResourceFactory(account=account, kind="pod", name="late", runpod_id="late")
    bill(late, at(2026, 10, 20, 1), allocation=world.allocation, gpu="0.333")  # after the draft
    bill(late, at(2026, 10, 21, 1), gpu="0.25", runpod=False)  # Runpod did not bill it
    from tests.invoicing.conftest import runpod_bill

    runpod_bill(account, at(2026, 10, 22, 1), "pod", {"gpu_usd": D("0.1111")})  # labgov lacks it
    bridge = period_bridge(world.institution, OCT)
    parts = _amounts(bridge.runpod_parts)
    assert parts["not_invoiced"] == D("0.33") and parts["not_held"] == D("-0.14")
    assert sum(parts.values()) == bridge.runpod.amount_usd == to_cents(D("3.515") + D("0.4441"))
    assert sum(p.exact_usd for p in bridge.runpod_parts) == bridge.runpod.exact_usd


def test_the_period_page_journal_and_workbook_show_the_same_bridge(world, october, client_for):
    client = client_for(world.finance)
    args = [world.institution.pk, 2026, 10]
    page = client.get(reverse("invoicing:period", args=args)).content.decode()
    for key, shown in [
        ("direct_usage", "$3.00"),
        ("rounding", "$0.02"),
        ("unattributed", "$0.50"),
        ("runpod_total", "$3.52"),
        ("credits", "−$1.00"),
        ("indirect", "$0.20"),
        ("invoices_total", "$2.20"),
    ]:
        row = page[page.index(f'data-bridge="{key}"') :].split("</tr>")[0]
        assert shown in row, (key, row)
    # The exact figure is on hover.
    assert 'title="$3.515"' in page

    response = client.get(reverse("exports:period_journal_csv", args=args))
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    posted = [r for r in rows if not r["status"].startswith("not posted")]
    bridge = {
        r["status"].removeprefix("not posted (bridge ").removesuffix(")"): r
        for r in rows
        if r["status"].startswith("not posted")
    }
    assert sum(D(r["debit_usd"]) - D(r["credit_usd"]) for r in posted) == D("2.20")

    def signed(key):
        return D(bridge[key]["debit_usd"]) - D(bridge[key]["credit_usd"])

    runpod = ["runpod/direct_usage", "runpod/rounding", "runpod/unattributed"]
    assert sum(signed(key) for key in runpod) == D("3.52") == signed("runpod/runpod_total")
    assert bridge["runpod/runpod_total"]["invoices"] == "exact 3.5150000000"
    invoices = ["invoices/direct_usage", "invoices/credits", "invoices/indirect"]
    assert [signed(key) for key in invoices] == [D("3.00"), D("-1.00"), D("0.20")]
    assert sum(signed(key) for key in invoices) == signed("invoices/invoices_total") == D("2.20")
    assert [r["line"] for r in bridge.values()] == [f"B{n}" for n in range(1, 9)]
    assert all(r["cost_center"] == "" and r["gl_account"] == "" for r in bridge.values())

    with transaction.atomic():
        job = export_job_request(
            actor=world.finance, institution=world.institution, month=OCT, kind="period_xlsx"
        )
    export_job_run(job.pk)
    job.refresh_from_db()
    sheet = openpyxl.load_workbook(job_path(job))["Summary"]
    cells = {
        row[0]: row[8] for row in sheet.iter_rows(values_only=True) if row[0] and row[8] != "USD"
    }
    # xlsx holds doubles: cents are exact in them once rounded to two places.
    assert round(D(str(cells["+ Rounding to cents"])), 2) == D("0.02")
    runpod = [
        round(D(str(v)), 2)
        for k, v in cells.items()
        if k.startswith("+ ") and k != "+ Direct usage" and v is not None
    ][:3]
    assert sum(runpod) == D("3.52") == round(D(str(cells["= Runpod's total for the month"])), 2)
    assert round(D(str(cells["= The month's invoices"])), 2) == D("2.20")


def test_a_lab_admins_workbook_has_no_institution_wide_bridge(world, october):
    with transaction.atomic():
        job = export_job_request(
            actor=world.lab_admin, institution=world.institution, month=OCT, kind="period_xlsx"
        )
    export_job_run(job.pk)
    job.refresh_from_db()
    sheet = openpyxl.load_workbook(job_path(job))["Summary"]
    assert not any(row[0] and "Bridge" in str(row[0]) for row in sheet.iter_rows(values_only=True))
