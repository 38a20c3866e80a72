"""Export pages and downloads. Out of scope is a 404 (members: the period's invoices are not
theirs to see); a lab admin asking for the institution-wide journal gets a 403."""

import datetime as dt
import io
import itertools

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from labgov.accounts import access
from labgov.accounts.models import Institution
from labgov.core.csv_export import csv_pieces_download, csv_streaming_download
from labgov.core.errors import DomainError
from labgov.exports import services, source
from labgov.exports.models import ExportJob
from labgov.exports.rows import (
    JOURNAL_COLUMNS,
    LINE_COLUMNS,
    bridge_journal_rows,
    journal_rows,
    line_csv_rows,
)
from labgov.invoicing.bridge import period_bridge

Kind = ExportJob.Kind
PERIOD_JOB_KINDS = (
    Kind.PERIOD_CSV,
    Kind.PERIOD_XLSX,
    Kind.PERIOD_PDF,
    Kind.RECORDS_CSV,
    Kind.RECORDS_XLSX,
)
INVOICE_JOB_KINDS = (Kind.INVOICE_XLSX, Kind.INVOICE_PDF)


def _institution(user, pk: int, *, journal: bool = False, what: str = "the journal") -> Institution:
    """The institution whose period the person may export (404 when not theirs at all)."""
    institution = access.get_or_404(Institution.objects.all(), pk=pk)
    scope = access.scope_for(user)
    allowed = (
        pk in scope.money_institutions
        if journal
        else access.can_export_period(user, institution.pk)
    )
    if not allowed:
        # A lab admin sees the period's invoices (theirs) but not its journal; to anyone else
        # the period's invoices are out of scope, as on the invoicing pages.
        if pk in scope.lab_admin_institutions:
            raise PermissionDenied(f"Only finance and institution admins export {what}.")
        raise Http404
    return institution


def _month(year: int, month: int) -> dt.date:
    if not (2000 <= year <= 2100 and 1 <= month <= 12):
        raise Http404
    return dt.date(year, month, 1)


def _name(institution, month: dt.date, what: str, ext: str) -> str:
    return f"labgov-{institution.slug}-{month:%Y-%m}-{what}.{ext}"


@login_required
@require_GET
def period(request, pk: int, year: int, month: int):
    institution, first = _institution(request.user, pk), _month(year, month)
    exports = source.period_exports(request.user, institution_id=pk, month=first)
    jobs = ExportJob.objects.filter(
        access.export_jobs_q(request.user), institution=institution, month=first
    )[:20]
    context = {
        "institution": institution,
        "month": first,
        "invoices": [e.header for e in exports],
        "total_usd": sum((e.header.total_usd for e in exports), start=0),
        "jobs": jobs,
        "can_journal": pk in access.scope_for(request.user).money_institutions,
        "job_kinds": [(k, Kind(k).label) for k in PERIOD_JOB_KINDS],
        "sync_max_rows": settings.LABGOV_EXPORT_SYNC_MAX_ROWS,
    }
    return render(request, "exports/period.html", context)


@login_required
@require_GET
def period_lines_csv(request, pk: int, year: int, month: int):
    institution, first = _institution(request.user, pk), _month(year, month)
    exports = source.period_exports(request.user, institution_id=pk, month=first)
    return csv_streaming_download(
        _name(institution, first, "invoice-lines", "csv"),
        line_csv_rows(exports),
        header=LINE_COLUMNS,
    )


@login_required
@require_GET
def period_journal_csv(request, pk: int, year: int, month: int):
    institution = _institution(request.user, pk, journal=True)
    first = _month(year, month)
    invoices = source.period_invoices(request.user, institution_id=pk, month=first)
    journal_id = f"LABGOV-{institution.slug.upper()}-{first:%Y%m}"
    postings = journal_rows(
        source.live_headers(invoices),
        journal_id=journal_id,
        gl_account=settings.LABGOV_JOURNAL_GL_ACCOUNT,
        description=f"Runpod cloud GPU chargeback {first:%b %Y}",
    )
    bridge = bridge_journal_rows(period_bridge(institution, first), journal_id=journal_id)
    rows = itertools.chain(postings, bridge)
    return csv_streaming_download(
        _name(institution, first, "chargeback-journal", "csv"), rows, header=JOURNAL_COLUMNS
    )


@login_required
@require_GET
def period_records_csv(request, pk: int, year: int, month: int):
    institution, first = _institution(request.user, pk), _month(year, month)
    try:
        records = source.period_records(request.user, institution=institution, month=first)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("exports:period", pk=pk, year=year, month=month)
    # Beyond the threshold a request would hold a web worker for minutes: use a job.
    if records[: settings.LABGOV_EXPORT_SYNC_MAX_ROWS + 1].count() > (
        settings.LABGOV_EXPORT_SYNC_MAX_ROWS
    ):
        messages.info(request, "That is a large export: start it below as a background job.")
        return redirect("exports:period", pk=pk, year=year, month=month)
    return csv_pieces_download(
        _name(institution, first, "billing-records", "csv"), source.records_csv(records)
    )


@login_required
@require_GET
def period_focus_csv(request, pk: int, year: int, month: int):
    """The month as a FOCUS 1.2 dataset: the institution's whole billing, so for finance and
    institution admins only (as the journal)."""
    from labgov.exports import focus

    what = "the institution's FOCUS dataset"
    institution = _institution(request.user, pk, journal=True, what=what)
    first = _month(year, month)
    try:
        focus.period_of(institution, first)  # refused before the download starts
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("exports:period", pk=pk, year=year, month=month)
    name = _name(institution, first, f"focus-{focus.FOCUS_VERSION}", "csv")
    return csv_pieces_download(name, focus.dataset(institution, first))


@login_required
@require_POST
def job_create(request, pk: int, year: int, month: int):
    institution, first = _institution(request.user, pk), _month(year, month)
    kind = request.POST.get("kind", "")
    invoice = None
    if kind in INVOICE_JOB_KINDS:
        invoice = source.invoice_for(request.user, _int(request.POST.get("invoice")))
        if invoice.institution_id != institution.pk or invoice.month != first:
            raise Http404
    elif kind not in PERIOD_JOB_KINDS:
        messages.error(request, "Choose an export.")
        return redirect("exports:period", pk=pk, year=year, month=month)
    try:
        job = services.export_job_request(
            actor=request.user, institution=institution, month=first, kind=kind, invoice=invoice
        )
    except DomainError as error:
        messages.error(request, str(error))
        return redirect("exports:period", pk=pk, year=year, month=month)
    return redirect("exports:job", pk=job.pk)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Http404 from None


def _job_for(user, pk: int) -> ExportJob:
    """The person's own job, while they may still export what it holds."""
    job = access.get_or_404(
        ExportJob.objects.filter(access.export_jobs_q(user)).select_related("institution"), pk=pk
    )
    if not access.can_export_period(user, job.institution_id):
        raise Http404
    if job.invoice_id is not None:
        source.invoice_for(user, job.invoice_id)  # 404 once out of their scope
    return job


@login_required
@require_GET
def job(request, pk: int):
    context = {"job": _job_for(request.user, pk)}
    if request.htmx:
        return render(request, "exports/job.html#progress", context)
    return render(request, "exports/job.html", context)


@login_required
@require_GET
def job_download(request, pk: int):
    job = _job_for(request.user, pk)
    path = services.job_path(job)
    if path is None:
        raise Http404
    return FileResponse(path.open("rb"), as_attachment=True, filename=job.download_name)


def _invoice_or_job(request, pk: int):
    invoice = source.invoice_for(request.user, pk)
    if invoice.line_count > settings.LABGOV_EXPORT_SYNC_MAX_ROWS:
        messages.info(request, f"Invoice {invoice} is large: export it as a background job.")
        url = reverse(
            "exports:period",
            kwargs={
                "pk": invoice.institution_id,
                "year": invoice.month.year,
                "month": invoice.month.month,
            },
        )
        return None, redirect(url)
    return invoice, None


@login_required
@require_GET
def invoice_csv(request, pk: int):
    invoice = source.invoice_for(request.user, pk)
    name = services.download_name(
        Kind.PERIOD_CSV,
        slug=invoice.institution.slug,
        month=invoice.month,
        label=invoice.number or f"draft-{invoice.pk}",
    )
    return csv_streaming_download(
        name, line_csv_rows([source.export_of(invoice)]), header=LINE_COLUMNS
    )


@login_required
@require_GET
def invoice_xlsx(request, pk: int):
    from labgov.exports.xlsx import write_workbook

    invoice, refused = _invoice_or_job(request, pk)
    if refused:
        return refused
    out = io.BytesIO()
    write_workbook(out, [source.export_of(invoice)], title=str(invoice))
    return _attachment(out.getvalue(), invoice, Kind.INVOICE_XLSX, XLSX_TYPE)


@login_required
@require_GET
def invoice_pdf(request, pk: int):
    from labgov.exports.pdf import write_pdf

    invoice, refused = _invoice_or_job(request, pk)
    if refused:
        return refused
    out = io.BytesIO()
    write_pdf(out, [source.export_of(invoice)])
    return _attachment(out.getvalue(), invoice, Kind.INVOICE_PDF, "application/pdf")


XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _attachment(content: bytes, invoice, kind: str, content_type: str) -> HttpResponse:
    name = services.download_name(
        kind,
        slug=invoice.institution.slug,
        month=invoice.month,
        label=invoice.number or f"draft-{invoice.pk}",
    )
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
@require_GET
def my_share_csv(request):
    """Anyone's own share (members' view of invoices); empty for someone charged nothing."""
    return csv_streaming_download(
        "labgov-my-share-of-invoices.csv", source.my_share_rows(request.user), header=LINE_COLUMNS
    )
