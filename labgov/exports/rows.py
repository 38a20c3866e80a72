"""What the writers are given: an invoice's header and its lines as plain rows.

The writers (CSV, XLSX, PDF) know nothing of the ORM; `labgov.exports.source` turns invoices
into these rows, streaming the lines, so any source of invoices plugs in here.
"""

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from labgov.core.money import ZERO


@dataclass(frozen=True)
class InvoiceHeader:
    pk: int
    label: str  # the number once issued, else "draft #<pk>"
    status: str
    institution: str
    lab: str
    funding_source: str
    award_number: str
    cost_center: str
    month: dt.date
    period_start: dt.datetime
    period_end: dt.datetime
    time_zone: str
    total_usd: Decimal  # the sum of the rounded lines
    exact_total_usd: Decimal  # the exact sum of the lines
    line_count: int
    reconciled: bool  # every line reconciled
    why_not: tuple[str, ...] = ()  # in words, when not

    @property
    def period(self) -> str:
        return f"{self.month:%Y-%m}"

    @property
    def rounding_difference_usd(self) -> Decimal:
        return self.total_usd - self.exact_total_usd

    @property
    def reconciliation(self) -> str:
        return "reconciled" if self.reconciled else "provisional"


@dataclass(frozen=True)
class LineRow:
    category: str
    description: str
    person: str
    quantity: Decimal | None
    unit: str
    unit_rate_usd: Decimal | None
    amount_usd: Decimal  # rounded to cents
    exact_amount_usd: Decimal
    reconciled: bool


@dataclass
class InvoiceExport:
    """One invoice to write: its header, and its lines as an iterable read once."""

    header: InvoiceHeader
    lines: Iterable[LineRow]


# The per-line CSV (per invoice and per period): one row per line.
LINE_COLUMNS = [
    "institution",
    "lab",
    "funding_source",
    "award_number",
    "cost_center",
    "period",
    "invoice",
    "invoice_status",
    "category",
    "description",
    "quantity",
    "unit",
    "rate_usd",
    "amount_usd",
    "reconciled",
]


def line_csv_rows(invoices: Iterable[InvoiceExport]) -> Iterator[list]:
    for invoice in invoices:
        h = invoice.header
        prefix = [h.institution, h.lab, h.funding_source, h.award_number, h.cost_center]
        for line in invoice.lines:
            yield [
                *prefix,
                h.period,
                h.label,
                h.status,
                line.category,
                line.description,
                "" if line.quantity is None else line.quantity,
                line.unit,
                "" if line.unit_rate_usd is None else line.unit_rate_usd,
                line.amount_usd,
                "yes" if line.reconciled else "no",
            ]


# The chargeback journal: one row per cost center and period, for a general-ledger upload
# (README, "Exports"). Debits are charges to the cost center; a net credit goes in credit_usd.
JOURNAL_COLUMNS = [
    "journal_id",
    "line",
    "posting_date",
    "period",
    "cost_center",
    "gl_account",
    "debit_usd",
    "credit_usd",
    "description",
    "invoices",
    "status",
]


@dataclass
class JournalLine:
    cost_center: str
    total_usd: Decimal = ZERO
    labels: list[str] | None = None
    all_issued: bool = True
    all_reconciled: bool = True


def month_last_day(month: dt.date) -> dt.date:
    return (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)


def journal_rows(
    headers: Iterable[InvoiceHeader], *, journal_id: str, gl_account: str, description: str
) -> Iterator[list]:
    by_center: dict[str, JournalLine] = {}
    last_day = None
    period = ""
    for h in headers:
        entry = by_center.setdefault(h.cost_center, JournalLine(h.cost_center, labels=[]))
        entry.total_usd += h.total_usd
        entry.labels.append(h.label)
        entry.all_issued &= h.status == "issued"
        entry.all_reconciled &= h.reconciled
        last_day = month_last_day(h.month)
        period = h.period
    for number, center in enumerate(sorted(by_center), start=1):
        entry = by_center[center]
        status = "issued" if entry.all_issued else "draft"
        status += ", reconciled" if entry.all_reconciled else ", provisional"
        yield [
            journal_id,
            number,
            last_day.isoformat(),
            period,
            center,
            gl_account,
            entry.total_usd if entry.total_usd >= 0 else Decimal("0.00"),
            -entry.total_usd if entry.total_usd < 0 else Decimal("0.00"),
            description,
            " ".join(entry.labels),
            status,
        ]


def bridge_journal_rows(bridge, *, journal_id: str) -> Iterator[list]:
    """The bridge (labgov.invoicing.bridge) after the journal's postings, as rows that post
    nothing: no cost center nor GL account, `status` "not posted (bridge runpod/unattributed)"
    (the side, then the line's key), the line numbered
    B1, B2, …, the amount in debit (or credit, when negative) in cents, and its exact figure in
    `invoices`. Runpod's side adds up to its total row, the invoices' side to theirs."""
    last_day = month_last_day(bridge.month).isoformat()
    for number, (side, line) in enumerate(bridge.lines, start=1):
        label = "Runpod's bill" if side == "runpod" else "The invoices"
        note = f" ({line.note})" if line.note else ""
        yield [
            journal_id,
            f"B{number}",
            last_day,
            f"{bridge.month:%Y-%m}",
            "",
            "",
            line.amount_usd if line.amount_usd >= 0 else Decimal("0.00"),
            -line.amount_usd if line.amount_usd < 0 else Decimal("0.00"),
            f"Bridge, {label}: {line.label}{note}",
            f"exact {line.exact_usd}",
            f"not posted (bridge {side}/{line.key})",
        ]
