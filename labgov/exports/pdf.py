"""PDF invoices, rendered from an HTML template by WeasyPrint.

Every text on an invoice (names, descriptions, reasons) is escaped by the template, and
WeasyPrint may fetch nothing: its URL fetcher refuses every URL, so no template text or
stylesheet can make the server read a local file or reach the network. The stylesheet sits
beside this module (it is not a page's, so the site's CSP does not apply).
"""

from collections.abc import Callable, Iterable
from pathlib import Path

from django.template.loader import render_to_string

from labgov.exports.rows import InvoiceExport

STYLESHEET = Path(__file__).resolve().parent / "invoice_pdf.css"


def _refuse(url: str, *args, **kwargs):
    raise ValueError(f"invoice PDFs load nothing ({url[:60]})")


def write_pdf(
    target,
    invoices: Iterable[InvoiceExport],
    *,
    progress: Callable[[int], None] | None = None,
) -> None:
    """One PDF holding each invoice on its own pages. Lines are materialised per invoice:
    WeasyPrint lays out a whole document in memory, which is why whole periods are written
    by a background job (labgov.exports.services)."""
    from weasyprint import CSS, HTML

    documents = []
    written = 0
    for invoice in invoices:
        lines = list(invoice.lines)
        written += len(lines)
        documents.append({"h": invoice.header, "lines": lines})
        if progress:
            progress(written)
    html = render_to_string("exports/invoice_pdf.html", {"invoices": documents})
    css = CSS(string=STYLESHEET.read_text(), url_fetcher=_refuse)
    HTML(string=html, url_fetcher=_refuse).write_pdf(target, stylesheets=[css])
