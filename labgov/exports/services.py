"""Export jobs: asked for by a person, written by a Celery task with its progress recorded,
kept for LABGOV_EXPORT_KEEP_DAYS, then removed by the scheduled expiry.

A job is claimed with a conditional UPDATE (queued → running), so a task delivered twice
writes the file once. The file is written under a temporary name and renamed when complete,
so a download never sees half a file. What the job holds is computed from its requester's
scope when it runs, and the download checks that scope again (labgov.exports.views).
"""

import datetime as dt
import logging
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from labgov.accounts import access
from labgov.audit.services import audit_record
from labgov.core import dataversion
from labgov.core.csv_export import csv_stream
from labgov.core.errors import DomainError
from labgov.core.queue import task_enqueue_on_commit
from labgov.exports import source
from labgov.exports.models import ExportJob
from labgov.exports.rows import LINE_COLUMNS, line_csv_rows
from labgov.invoicing.bridge import period_bridge

log = logging.getLogger(__name__)
Kind = ExportJob.Kind
EXTENSIONS = {
    Kind.PERIOD_CSV: "csv",
    Kind.RECORDS_CSV: "csv",
    Kind.PERIOD_XLSX: "xlsx",
    Kind.RECORDS_XLSX: "xlsx",
    Kind.INVOICE_XLSX: "xlsx",
    Kind.PERIOD_PDF: "pdf",
    Kind.INVOICE_PDF: "pdf",
}


def export_dir() -> Path:
    path = Path(settings.LABGOV_EXPORT_DIR)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def download_name(kind: str, *, slug: str, month: dt.date, label: str = "") -> str:
    what = {
        Kind.PERIOD_CSV: "invoice-lines",
        Kind.PERIOD_XLSX: "invoices",
        Kind.PERIOD_PDF: "invoices",
        Kind.RECORDS_CSV: "billing-records",
        Kind.RECORDS_XLSX: "billing-records",
        Kind.INVOICE_XLSX: "invoice",
        Kind.INVOICE_PDF: "invoice",
    }[kind]
    safe_label = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)
    parts = [f"labgov-{slug}-{month:%Y-%m}-{what}", safe_label]
    return "-".join(p for p in parts if p) + f".{EXTENSIONS[kind]}"


@transaction.atomic
def export_job_request(*, actor, institution, month: dt.date, kind: str, invoice=None):
    """Queue an export; the caller has checked that `actor` may export it."""
    if kind not in Kind.values:
        raise DomainError("Unknown export.")
    if (kind in (Kind.INVOICE_XLSX, Kind.INVOICE_PDF)) != (invoice is not None):
        raise DomainError("Exports of one invoice name that invoice, and only those.")
    job = ExportJob.objects.create(
        institution=institution,
        requested_by=actor,
        kind=kind,
        month=month,
        invoice=invoice,
        download_name=download_name(
            kind,
            slug=institution.slug,
            month=month,
            label=(invoice.number or f"draft-{invoice.pk}") if invoice else "",
        ),
    )
    # Money leaving the system: who took which file is on the record.
    audit_record(actor=actor, action="export.request", target=job, institution_id=institution.pk)
    task_enqueue_on_commit("labgov.exports.tasks.run_export_job", job.pk)
    return job


def _progress(job_id: int):
    def report(done: int) -> None:
        ExportJob.objects.filter(pk=job_id).update(progress_done=done)

    return report


def _write(job: ExportJob, path: Path) -> None:
    from labgov.exports.pdf import write_pdf
    from labgov.exports.xlsx import write_table_workbook, write_workbook

    user, kind, month = job.requested_by, job.kind, job.month
    report = _progress(job.pk)
    if kind in (Kind.RECORDS_CSV, Kind.RECORDS_XLSX):
        records = source.period_records(user, institution=job.institution, month=month)
        total = records.count()
        ExportJob.objects.filter(pk=job.pk).update(progress_total=total)
        if kind == Kind.RECORDS_XLSX:
            write_table_workbook(
                str(path),
                source.RECORD_COLUMNS,
                source.record_rows(records),
                title="Billing records",
                progress=report,
            )
            return
        # On PostgreSQL the CSV comes through COPY, which holds the job's connection for as
        # long as it runs: progress goes through a connection of its own meanwhile.
        copying = connections[records.db].vendor == "postgresql"
        side = connections.create_connection(records.db) if copying else None
        try:
            during = _every(_progress_on(side, job.pk) if side else report, PROGRESS_STEP, total)
            with path.open("wb") as out:
                for piece in source.records_csv(records, progress=during):
                    out.write(piece)
        finally:
            if side is not None:
                side.close()
        report(total)
        return
    if job.invoice_id is not None:
        exports = [source.export_of(source.invoice_for(user, job.invoice_id))]
    else:
        exports = source.period_exports(user, institution_id=job.institution_id, month=month)
    ExportJob.objects.filter(pk=job.pk).update(progress_total=source.line_total(exports))
    if kind == Kind.PERIOD_CSV:
        rows = csv_stream(line_csv_rows(exports), header=LINE_COLUMNS)
        _write_csv(path, rows, report, source.line_total(exports))
    elif kind in (Kind.PERIOD_XLSX, Kind.INVOICE_XLSX):
        title = f"{job.institution.name} invoices {month:%Y-%m}"
        bridge = None
        if kind == Kind.PERIOD_XLSX and access.can_manage_invoices(user, job.institution_id):
            # Institution-wide figures: for those who see the period's reconciliation.
            bridge = period_bridge(job.institution, month)
        write_workbook(str(path), exports, title=title, progress=report, bridge=bridge)
    else:
        write_pdf(str(path), exports, progress=report)


PROGRESS_STEP = 10_000


def _progress_on(side, job_id: int):
    table = side.ops.quote_name(ExportJob._meta.db_table)

    def report(done: int) -> None:
        with side.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET progress_done = %s WHERE id = %s", [done, job_id])  # noqa: S608

    return report


def _every(report, step: int, total: int):
    """`report`, called only when the count has moved on by `step` (and never past total)."""
    last = [0]

    def maybe(done: int) -> None:
        if done - last[0] >= step:
            last[0] = done
            report(min(done, total))

    return maybe


def _write_csv(path: Path, pieces, report, total: int) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        for n, piece in enumerate(pieces, start=1):
            out.write(piece)
            if n % 10 == 0:
                # csv_stream's pieces are a thousand rows each (the header rides in the first).
                report(min(total, n * 1000))
    report(total)


@dataversion.scoped(
    lambda job_id: ExportJob.objects.filter(pk=job_id).values_list("institution_id", flat=True)
)
def export_job_run(job_id: int) -> None:
    """Write the job's file. Runs once per job, whatever the number of deliveries."""
    now = timezone.now()
    claimed = ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.QUEUED).update(
        status=ExportJob.Status.RUNNING, started_at=now
    )
    if not claimed:
        return
    job = ExportJob.objects.select_related("institution", "requested_by").get(pk=job_id)
    name = f"{secrets.token_hex(16)}.{EXTENSIONS[job.kind]}"
    final = export_dir() / name
    partial = final.with_suffix(".part")
    try:
        _write(job, partial)
        os.replace(partial, final)
    except Exception as error:
        partial.unlink(missing_ok=True)
        log.exception("export job %s failed", job_id)
        message = str(error) if isinstance(error, DomainError) else type(error).__name__
        ExportJob.objects.filter(pk=job_id).update(
            status=ExportJob.Status.FAILED, error=message[:500], finished_at=timezone.now()
        )
        return
    finished = timezone.now()
    ExportJob.objects.filter(pk=job_id).update(
        status=ExportJob.Status.DONE,
        file_name=name,
        size_bytes=final.stat().st_size,
        finished_at=finished,
        expires_at=finished + dt.timedelta(days=settings.LABGOV_EXPORT_KEEP_DAYS),
    )


def job_path(job: ExportJob) -> Path | None:
    if job.status != ExportJob.Status.DONE or not job.file_name:
        return None
    path = export_dir() / job.file_name
    return path if path.is_file() else None


def export_jobs_expire(*, now: dt.datetime | None = None) -> int:
    """Remove the files of jobs past their expiry, and of jobs that failed or never ran for
    as long; the job rows stay (who exported what, and when). Returns the number expired.
    The files are copies of what invoices hold, so removing them needs no approval."""
    now = now or timezone.now()
    keep = dt.timedelta(days=settings.LABGOV_EXPORT_KEEP_DAYS)
    expired = 0
    due = ExportJob.objects.filter(status=ExportJob.Status.DONE, expires_at__lte=now)
    for job in due.only("pk", "file_name"):
        if ExportJob.objects.filter(pk=job.pk, status=ExportJob.Status.DONE).update(
            status=ExportJob.Status.EXPIRED, file_name=""
        ):
            (export_dir() / job.file_name).unlink(missing_ok=True)
            expired += 1
    stale = ExportJob.objects.filter(
        status__in=[ExportJob.Status.QUEUED, ExportJob.Status.RUNNING, ExportJob.Status.FAILED],
        created_at__lte=now - keep,
    )
    expired += stale.update(status=ExportJob.Status.EXPIRED)
    # Half-written files of a worker that died mid-job.
    for part in export_dir().glob("*.part"):
        if part.stat().st_mtime < (now - keep).timestamp():
            part.unlink(missing_ok=True)
    return expired
