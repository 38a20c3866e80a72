import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.db import DatabaseError, transaction

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.invoicing.reconciliation import period_reconciliation
from labgov.invoicing.selectors import invoice_lines, period_invoices
from labgov.invoicing.services import (
    invoice_issue,
    invoice_line_add,
    invoice_void,
    invoices_generate,
    period_close_checked,
)
from labgov.usage.models import ClosedPeriod
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)
NOV = dt.date(2026, 11, 1)
NOW = at(2026, 11, 5, 12)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def october(world, account, pod, volume, grant):
    """October billed on two resources of the standing allocation, every day synced."""
    alloc = world.allocation
    bill(pod, at(2026, 10, 1, 0), allocation=alloc, gpu="0.69", cpu="0.0003", disk="0.0137")
    bill(pod, at(2026, 10, 1, 1), allocation=alloc, gpu="0.69", disk="0.0137")
    bill(pod, at(2026, 10, 31, 23), allocation=alloc, gpu="0.69", disk="0.0137")
    bill(volume, at(2026, 10, 15, 5), allocation=alloc, standard="0.00959")
    # Spend nobody owns: on Runpod's bill and in the reconciliation, on no invoice.
    bill(volume, at(2026, 10, 16, 5), standard="0.5")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    return alloc


def _lines(invoice):
    return list(invoice_lines(invoice))


def test_drafts_have_a_line_per_resource_and_category_summed_exactly_and_rounded_once(
    world, october
):
    (invoice,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    lines = _lines(invoice)
    by = {(line.description, line.category): line for line in lines}
    gpu = by[("Pod train-1", "gpu_compute")]
    assert gpu.exact_amount_usd == D("2.07") and gpu.amount_usd == D("2.07")
    assert gpu.quantity == 3 and gpu.unit == "hour" and gpu.unit_rate_usd == D("0.69")
    assert gpu.person == world.member and gpu.allocation == october and gpu.reconciled
    disk = by[("Pod train-1", "pod_disk")]
    assert disk.exact_amount_usd == D("0.0411") and disk.amount_usd == D("0.04")
    cpu = by[("Pod train-1", "cpu_compute")]
    assert cpu.amount_usd == D("0.00") and cpu.quantity == 1
    storage = by[("Network volume data", "network_standard")]
    assert storage.exact_amount_usd == D("0.00959") and storage.amount_usd == D("0.01")
    # F&A: 10 % of what the direct lines charge (2.07 + 0.04 + 0.00 + 0.01), rounded once.
    fa = lines[-1]
    assert fa.kind == "indirect" and fa.exact_amount_usd == D("0.212")
    assert fa.amount_usd == D("0.21")
    assert invoice.total_usd == D("2.33") == sum(line.amount_usd for line in lines)
    assert invoice.exact_total_usd == D("2.33299")
    assert invoice.rounding_difference_usd == invoice.total_usd - invoice.exact_total_usd
    assert [line.position for line in lines] == list(range(1, len(lines) + 1))
    assert invoice.cost_center == world.funding_source.cost_center
    assert AuditEvent.objects.filter(action="invoice.generate", target_id=str(invoice.pk)).exists()
    assert list(period_invoices(world.institution, OCT)) == [invoice]


def test_reconciliation_adds_attributed_and_unattributed_up_to_runpods_total(world, october):
    (a,) = period_reconciliation(world.institution, OCT)
    assert a.unattributed_usd == D("0.5")
    assert a.records_usd == a.runpod_usd and a.reconciled
    assert a.days_missing == [] and not a.days_differing
    assert {c.category: c.difference_usd for c in a.categories} == {
        "gpu_compute": 0,
        "cpu_compute": 0,
        "pod_disk": 0,
        "network_standard": 0,
    }


def test_reconciliation_catches_a_missing_record_and_a_missing_day(world, account, pod, october):
    # Runpod billed an hour on 20 October that labgov never received.
    bill(pod, at(2026, 10, 20, 3), allocation=october, gpu="1.25", runpod=False)
    from labgov.runpod.models import BillingRecord

    BillingRecord.objects.filter(bucket_start=at(2026, 10, 20, 3)).delete()
    from tests.invoicing.conftest import runpod_bill

    runpod_bill(account, at(2026, 10, 20, 3), "pod", {"gpu_usd": D("1.25")})
    (a,) = period_reconciliation(world.institution, OCT)
    assert a.difference_usd == D("-1.25") and not a.matches_to_the_cent
    assert [d.day for d in a.days_differing] == [dt.date(2026, 10, 20)]
    gpu = next(c for c in a.categories if c.category == "gpu_compute")
    assert gpu.difference_usd == D("-1.25")
    # The sync windows leave out 12 October: it is listed, and lines over it are provisional.
    from labgov.runpod.models import SyncRun

    SyncRun.objects.all().delete()
    synced(account, at(2026, 9, 30), at(2026, 10, 12, 6))
    synced(account, at(2026, 10, 13), at(2026, 11, 2))
    (a,) = period_reconciliation(world.institution, OCT)
    assert a.days_missing == [dt.date(2026, 10, 12)] and not a.reconciled
    (invoice,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    lines = _lines(invoice)
    gpu_line = next(line for line in lines if line.category == "gpu_compute")
    storage_line = next(line for line in lines if line.category == "network_standard")
    assert not gpu_line.reconciled  # its days (1–31) include 12 and 20 October
    assert storage_line.reconciled  # only 15 October, held and matching
    assert not invoice.is_reconciled

    with pytest.raises(DomainError, match="does not reconcile") as refused:
        period_close_checked(actor=world.finance, institution=world.institution, month=OCT)
    assert "12" in str(refused.value) and "-1.25" in str(refused.value)
    assert not ClosedPeriod.objects.exists()
    period = period_close_checked(
        actor=world.finance,
        institution=world.institution,
        month=OCT,
        acceptance_reason="Runpod support confirmed the missing hour; charged next month.",
    )
    assert period.accepted_difference_usd == D("-1.25")
    accept = AuditEvent.objects.get(action="period.accept")
    assert accept.actor == world.finance and "Runpod support" in accept.note
    assert AuditEvent.objects.filter(action="period.close").count() == 1


def test_records_either_side_of_midnight_fall_in_the_month_of_the_institutions_calendar(
    world, account, pod
):
    alloc = world.allocation
    bill(pod, at(2026, 9, 30, 23), allocation=alloc, gpu="1")
    bill(pod, at(2026, 10, 1, 0), allocation=alloc, gpu="2")
    bill(pod, at(2026, 10, 1, 4), allocation=alloc, gpu="4")
    bill(pod, at(2026, 10, 31, 23), allocation=alloc, gpu="8")
    bill(pod, at(2026, 11, 1, 4), allocation=alloc, gpu="16")

    def total(month):
        (invoice,) = invoices_generate(
            actor=world.finance, institution=world.institution, month=month
        )
        return invoice.total_usd

    assert total(OCT) == D("14")  # UTC: 1 October 00:00 to 1 November 00:00
    # New York: October runs from 04:00 UTC on the 1st (EDT) to 04:00 UTC on 1 November.
    world.institution.time_zone = "America/New_York"
    world.institution.save()
    assert total(OCT) == D("12")
    assert total(dt.date(2026, 9, 1)) == D("3")


def test_credits_and_adjustments_need_a_reason_and_a_second_person_to_issue(world, october):
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    with pytest.raises(DomainError, match="reason"):
        invoice_line_add(
            actor=world.finance, invoice=draft, kind="credit", amount_usd=D("1"), reason=" "
        )
    with pytest.raises(DomainError, match="whole cents"):
        invoice_line_add(
            actor=world.finance, invoice=draft, kind="manual", amount_usd=D("0.001"), reason="x"
        )
    credit = invoice_line_add(
        actor=world.finance, invoice=draft, kind="credit", amount_usd=D("1.00"), reason="Outage"
    )
    assert credit.amount_usd == D("-1.00") and credit.entered_by == world.finance
    # A second line by the same person at the same instant is its own line.
    extra = invoice_line_add(
        actor=world.finance, invoice=draft, kind="manual", amount_usd=D("0.50"), reason="Fee"
    )
    assert extra.pk != credit.pk and extra.amount_usd == D("0.50")
    draft.refresh_from_db()
    assert draft.total_usd == D("1.78")  # 2.12 - 1.00 + 0.50, F&A 0.16
    from labgov.invoicing.services import invoice_line_remove

    invoice_line_remove(actor=world.finance, line=extra)
    draft.refresh_from_db()
    # F&A follows what the direct lines charge: 10 % of (2.12 - 1.00).
    assert _lines(draft)[-1].amount_usd == D("0.11")
    assert draft.total_usd == D("1.23")
    # Regenerating keeps what a person entered.
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    assert any(line.kind == "credit" for line in _lines(draft)) and draft.total_usd == D("1.23")
    with pytest.raises(DomainError, match="another person"):
        invoice_issue(actor=world.finance, invoice=draft)
    issued = invoice_issue(actor=world.inst_admin, invoice=draft)
    assert issued.number == "2026-00001" and issued.status == "issued"
    assert AuditEvent.objects.filter(action="invoice.credit", note="Outage").exists()
    assert AuditEvent.objects.filter(action="invoice.issue", actor=world.inst_admin).exists()


def test_issued_invoices_never_change_and_a_replacement_gets_a_new_number(world, october):
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    issued = invoice_issue(actor=world.finance, invoice=draft)
    with pytest.raises(DomainError, match="Only a draft"):
        invoice_line_add(
            actor=world.inst_admin, invoice=issued, kind="manual", amount_usd=D("5"), reason="x"
        )
    with pytest.raises(DomainError, match="not a draft"):
        invoice_issue(actor=world.finance, invoice=issued)
    # Regenerating the open period leaves the issued invoice alone.
    assert invoices_generate(actor=world.finance, institution=world.institution, month=OCT) == []
    with pytest.raises(DomainError, match="reason"):
        invoice_void(actor=world.finance, invoice=issued, reason="")
    replacement = invoice_void(actor=world.finance, invoice=issued, reason="Wrong cost center")
    issued.refresh_from_db()
    assert issued.status == "void" and issued.number == "2026-00001"
    assert replacement.replaces == issued and replacement.total_usd == issued.total_usd
    # The voider made the replacement: another person issues it.
    with pytest.raises(DomainError, match="another person"):
        invoice_issue(actor=world.finance, invoice=replacement)
    again = invoice_issue(actor=world.inst_admin, invoice=replacement)
    assert again.number == "2026-00002"
    assert AuditEvent.objects.get(action="invoice.void").note == "Wrong cost center"


def test_the_database_refuses_to_change_an_issued_invoice(postgres, world, october):
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    issued = invoice_issue(actor=world.finance, invoice=draft)
    attacks = [
        lambda: Invoice.objects.filter(pk=issued.pk).update(total_usd=0),
        lambda: Invoice.objects.filter(pk=issued.pk).update(status="draft", void_reason=""),
        lambda: InvoiceLine.objects.filter(invoice=issued).update(amount_usd=0),
        lambda: InvoiceLine.objects.filter(invoice=issued).delete(),
        lambda: InvoiceLine.objects.create(
            invoice=issued,
            position=99,
            kind="usage",
            category="gpu_compute",
            exact_amount_usd=1,
            amount_usd=1,
        ),
    ]
    for attack in attacks:
        with pytest.raises(DatabaseError), transaction.atomic():
            attack()
    issued.refresh_from_db()
    assert issued.status == "issued" and issued.total_usd == D("2.33")


def test_a_closed_period_never_changes_and_late_usage_becomes_next_months_adjustment(
    world, account, pod, october
):
    period_close_checked(actor=world.finance, institution=world.institution, month=OCT)
    (oct_invoice,) = period_invoices(world.institution, OCT)
    assert oct_invoice.status == "issued" and oct_invoice.number == "2026-00001"
    frozen = [(line.category, line.exact_amount_usd) for line in _lines(oct_invoice)]
    with pytest.raises(DomainError, match="closed"):
        invoices_generate(actor=world.finance, institution=world.institution, month=OCT)

    # A re-sync within the overlap: Runpod corrects an October hour and sends a late one.
    bill(pod, at(2026, 10, 31, 23), allocation=october, gpu="0.50", disk="0.0137")
    bill(pod, at(2026, 10, 30, 10), allocation=october, gpu="1.00")
    bill(pod, at(2026, 11, 2, 0), allocation=october, gpu="0.69")
    oct_invoice.refresh_from_db()
    assert oct_invoice.total_usd == D("2.33")
    assert [(line.category, line.exact_amount_usd) for line in _lines(oct_invoice)] == frozen

    (nov,) = invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    late = [line for line in _lines(nov) if line.kind == "late_usage"]
    assert len(late) == 1
    assert late[0].exact_amount_usd == D("0.81")  # -0.19 corrected + 1.00 late
    assert late[0].corrects_month == OCT and late[0].corrects_invoice == oct_invoice
    assert "October 2026" in late[0].description
    usage = [line for line in _lines(nov) if line.kind == "usage"]
    assert sum(line.amount_usd for line in usage) == D("0.69")
    # Regenerating November charges the correction once, not twice.
    (nov,) = invoices_generate(actor=world.finance, institution=world.institution, month=NOV)
    assert sum(line.kind == "late_usage" for line in _lines(nov)) == 1


def test_generation_and_closing_are_for_finance_and_institution_admins(world, october):
    for person in (world.lab_admin, world.member, world.outsider):
        with pytest.raises(DomainError, match="finance"):
            invoices_generate(actor=person, institution=world.institution, month=OCT)
        with pytest.raises(DomainError, match="finance"):
            period_close_checked(actor=person, institution=world.institution, month=OCT)
    assert not Invoice.objects.exists()
    invoices_generate(actor=world.inst_admin, institution=world.institution, month=OCT)


def test_a_draft_left_without_usage_is_discarded_and_audited(world, october):
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    from labgov.runpod.models import BillingRecord

    BillingRecord.objects.filter(allocation=october).update(allocation=None)
    assert invoices_generate(actor=world.finance, institution=world.institution, month=OCT) == []
    assert not Invoice.objects.exists()
    assert AuditEvent.objects.filter(action="invoice.discard", target_id=str(draft.pk)).exists()
