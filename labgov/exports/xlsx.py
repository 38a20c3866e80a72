"""The XLSX workbook: a summary sheet, then one sheet per invoice.

Written with xlsxwriter in constant-memory mode: each row goes to a temporary file as soon as
the next one starts, so a sheet of a million rows costs no more memory than one of ten. The
price is that rows must be written in order, sheet by sheet, which is how they come.
Numbers are numbers (currency formats), never text, so the spreadsheet adds them up.
"""

import re
from collections.abc import Callable, Iterable

import xlsxwriter

from labgov.exports.rows import InvoiceExport

MAX_ROWS = 1_048_576  # per sheet, Excel's limit
_BAD_SHEET_CHARS = re.compile(r"[\[\]:*?/\\]")

SUMMARY_COLUMNS = [
    ("Invoice", 16),
    ("Status", 9),
    ("Lab", 20),
    ("Funding source", 28),
    ("Award number", 16),
    ("Cost center", 14),
    ("Period", 9),
    ("Lines", 7),
    ("Total (USD)", 14),
    ("Exact sum (USD)", 18),
    ("Rounding difference (USD)", 14),
    ("Reconciliation", 13),
]
LINE_COLUMNS = [
    ("Category", 28),
    ("Description", 40),
    ("Person", 18),
    ("Quantity", 12),
    ("Unit", 10),
    ("Rate (USD)", 14),
    ("Amount (USD)", 14),
    ("Exact amount (USD)", 18),
    ("Reconciled", 10),
]


class _Formats:
    def __init__(self, book):
        self.head = book.add_format({"bold": True, "bottom": 1})
        self.money = book.add_format({"num_format": '"$"#,##0.00;[Red]-"$"#,##0.00'})
        self.exact = book.add_format({"num_format": '"$"#,##0.0000000000'})
        self.rate = book.add_format({"num_format": '"$"#,##0.000000'})
        self.quantity = book.add_format({"num_format": "#,##0.0000"})
        self.total = book.add_format(
            {"bold": True, "top": 1, "num_format": '"$"#,##0.00;[Red]-"$"#,##0.00'}
        )
        self.bold = book.add_format({"bold": True})


def _sheet(book, name: str, columns, formats: _Formats):
    sheet = book.add_worksheet(name)
    for col, (title, width) in enumerate(columns):
        sheet.set_column(col, col, width)
        sheet.write_string(0, col, title, formats.head)
    sheet.freeze_panes(1, 0)
    return sheet


def sheet_name(label: str, taken: set[str]) -> str:
    base = _BAD_SHEET_CHARS.sub("-", label).strip("'")[:28] or "Invoice"
    name, n = base, 2
    while name.lower() in taken or name.lower() == "summary":
        name = f"{base[:25]} ({n})"
        n += 1
    taken.add(name.lower())
    return name


def _number(sheet, row, col, value, fmt) -> None:
    if value is None:
        sheet.write_blank(row, col, None)
    else:
        # xlsx stores numbers as doubles: exact for cents, the exact column keeps the digits
        # a double can hold (the Decimal stays exact in the CSV).
        sheet.write_number(row, col, float(value), fmt)


def write_workbook(
    target,
    invoices: list[InvoiceExport],
    *,
    title: str,
    progress: Callable[[int], None] | None = None,
    bridge=None,
) -> None:
    """Write the workbook to `target` (a path or a binary file). `invoices` are listed on the
    summary first, then each one's lines are read, once, into its own sheet; `progress` is
    told the number of lines written so far every thousand lines and at the end. `bridge`
    (labgov.invoicing.bridge), when given, follows the invoices on the summary."""
    book = xlsxwriter.Workbook(target, {"constant_memory": True, "strings_to_formulas": False})
    book.set_properties({"title": title, "creator": "labgov"})
    f = _Formats(book)
    summary = _sheet(book, "Summary", SUMMARY_COLUMNS, f)
    row = 0
    for row, invoice in enumerate(invoices, start=1):
        h = invoice.header
        for col, text in enumerate(
            [h.label, h.status, h.lab, h.funding_source, h.award_number, h.cost_center, h.period]
        ):
            summary.write_string(row, col, text)
        summary.write_number(row, 7, h.line_count)
        _number(summary, row, 8, h.total_usd, f.money)
        _number(summary, row, 9, h.exact_total_usd, f.exact)
        _number(summary, row, 10, h.rounding_difference_usd, f.exact)
        summary.write_string(row, 11, h.reconciliation)
    if invoices:
        summary.write_string(row + 1, 0, "Total", f.bold)
        summary.write_number(row + 1, 7, sum(i.header.line_count for i in invoices), f.bold)
        _number(summary, row + 1, 8, sum(i.header.total_usd for i in invoices), f.total)
        row += 1
    if bridge is not None:
        _bridge(summary, row + 2, bridge, f)

    written = 0
    taken: set[str] = set()
    for invoice in invoices:
        h = invoice.header
        sheet = _sheet(book, sheet_name(h.label, taken), LINE_COLUMNS, f)
        sheet.set_header(f"&L{_escape(h.label)} {h.period}&R{_escape(h.funding_source)}")
        row = 0
        for row, line in enumerate(invoice.lines, start=1):
            sheet.write_string(row, 0, line.category)
            sheet.write_string(row, 1, line.description)
            sheet.write_string(row, 2, line.person)
            _number(sheet, row, 3, line.quantity, f.quantity)
            sheet.write_string(row, 4, line.unit)
            _number(sheet, row, 5, line.unit_rate_usd, f.rate)
            _number(sheet, row, 6, line.amount_usd, f.money)
            _number(sheet, row, 7, line.exact_amount_usd, f.exact)
            sheet.write_string(row, 8, "yes" if line.reconciled else "no")
            written += 1
            if progress and written % 1000 == 0:
                progress(written)
        sheet.write_string(row + 1, 0, "Total", f.bold)
        _number(sheet, row + 1, 6, h.total_usd, f.total)
        sheet.write_string(row + 2, 0, "Rounding difference (total − exact sum)")
        _number(sheet, row + 2, 6, h.rounding_difference_usd, f.exact)
        sheet.write_string(row + 3, 0, "Reconciliation")
        sheet.write_string(row + 3, 6, h.reconciliation)
    book.close()
    if progress:
        progress(written)


def _bridge(sheet, row: int, bridge, f: _Formats) -> None:
    """The bridge under the summary's invoices: amounts in cents in the Total column (each
    side adds up to its total row), the exact figure beside them."""
    sheet.write_string(row, 0, "Bridge to Runpod's bill (adds up in cents)", f.bold)
    sheet.write_string(row, 8, "USD", f.bold)
    sheet.write_string(row, 9, "Exact (USD)", f.bold)
    side = None
    for which, line in bridge.lines:
        row += 1
        if which != side:
            side = which
            heading = "Runpod's bill" if which == "runpod" else "The month's invoices"
            sheet.write_string(row, 0, heading, f.bold)
            row += 1
        total = line.key in ("runpod_total", "invoices_total")
        label = ("= " if total else "+ ") + line.label
        sheet.write_string(row, 0, label, f.bold if total else None)
        _number(sheet, row, 8, line.amount_usd, f.total if total else f.money)
        _number(sheet, row, 9, line.exact_usd, f.exact)
        if line.note:
            sheet.write_string(row, 11, line.note)


def write_table_workbook(
    target,
    columns: list[tuple[str, int, str]],
    rows: Iterable[Iterable],
    *,
    title: str,
    progress: Callable[[int], None] | None = None,
) -> int:
    """One table (e.g. a period's billing records) over as many sheets as Excel's row limit
    needs. `columns` are (title, width, kind) with kind text, money, exact, quantity or
    datetime (given as ISO text). Returns the number of rows written."""
    book = xlsxwriter.Workbook(target, {"constant_memory": True, "strings_to_formulas": False})
    book.set_properties({"title": title, "creator": "labgov"})
    f = _Formats(book)
    kinds = [kind for _, _, kind in columns]
    formats = {"money": f.money, "exact": f.exact, "quantity": f.quantity}
    heading = [(t, w) for t, w, _ in columns]
    sheets = 1
    sheet = _sheet(book, title[:31], heading, f)
    row = 0
    written = 0
    for values in rows:
        row += 1
        if row == MAX_ROWS:
            sheets += 1
            sheet = _sheet(book, f"{title[:25]} ({sheets})", heading, f)
            row = 1
        for col, (kind, value) in enumerate(zip(kinds, values, strict=True)):
            if kind == "text":
                sheet.write_string(row, col, "" if value is None else str(value))
            else:
                _number(sheet, row, col, value, formats[kind])
        written += 1
        if progress and written % 10_000 == 0:
            progress(written)
    book.close()
    if progress:
        progress(written)
    return written


def _escape(text: str) -> str:
    """Header/footer text: `&` starts a control code there."""
    return text.replace("&", "&&")
