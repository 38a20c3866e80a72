"""A FOCUS billing source beside Runpod: one invoice per funding source carries lines from
both providers, each provider reconciles against its own totals, and a corrected file of a
closed month becomes late usage on the first open month's invoice, the closed one unchanged."""

import datetime as dt
from decimal import Decimal as D
from pathlib import Path

import pytest
import time_machine

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
    assert {line.category for line in by_kind["cloud"]} == {"cloud_compute", "cloud_storage"}
    assert sum(line.exact_amount_usd for line in by_kind["cloud"]) == D("26.3913578025")
    focus, runpod = sorted(
        period_reconciliation(world.institution, OCT), key=lambda a: a.account.is_focus
    )[::-1]
    assert focus.account == aws and focus.runpod_usd == D("27.3813578025")
    assert focus.reconciled and focus.unattributed_usd == D("0.99")  # the tax: no rule
    categories = {row.category: (row.records_usd, row.runpod_usd) for row in focus.categories}
    assert categories["cloud_storage"] == (D("1.70"), D("1.70"))
    assert runpod.account == account and runpod.reconciled


def test_a_corrected_file_of_a_closed_month_becomes_late_usage(world, aws):
    _import(world, aws, "aws_2026_10.csv")
    period_close_checked(actor=world.finance, institution=world.institution, month=OCT)
    (october,) = period_invoices(world.institution, OCT)
    frozen = [(line.category, line.exact_amount_usd) for line in invoice_lines(october)]
    with pytest.raises(FocusRefused, match="October 2026, which finance has closed"):
        _import(world, aws, "aws_2026_10_corrected.csv")
    result = _import(world, aws, "aws_2026_10_corrected.csv", late=True)
    assert result.file.late
    assert [(line.category, line.exact_amount_usd) for line in invoice_lines(october)] == frozen
    (november,) = invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    late = [line for line in invoice_lines(november) if line.kind == "late_usage"]
    # The EC2 hour of 2 October fell from 12.3456789012 to 10.00; the S3 credit is gone.
    assert {(line.category, line.exact_amount_usd) for line in late} == {
        ("cloud_compute", D("-2.3456789012")),
        ("cloud_storage", D("1.50")),
    }
    assert all(line.corrects_month == OCT and line.corrects_invoice == october for line in late)
