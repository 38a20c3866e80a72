"""Invoices and billing records as the writers' rows, read in chunks (a server-side cursor on
PostgreSQL), scoped to the person before anything else touches them."""

import datetime as dt
from collections.abc import Iterator

from django.db import connections
from django.db.models import Count, Exists, F, Func, OuterRef, TextField, Value
from django.db.models.functions import Cast, Coalesce, NullIf

from labgov.accounts import access
from labgov.core.csv_export import copy_csv_stream, csv_stream
from labgov.core.errors import DomainError
from labgov.exports.rows import InvoiceExport, InvoiceHeader, LineRow
from labgov.invoicing.models import Invoice, InvoiceLine, LineCategory, person_name
from labgov.invoicing.reconciliation import InvoiceReconciliation, invoices_reconciliation
from labgov.runpod.models import BillingRecord
from labgov.runpod.partitions import detached_within
from labgov.usage.periods import billing_period

CHUNK = 2000
_CATEGORY = dict(LineCategory.choices)


def period_invoices(user, *, institution_id: int, month: dt.date):
    """The period's live (not void) invoices the person may see, with what headers need."""
    unreconciled = InvoiceLine.objects.filter(invoice=OuterRef("pk"), reconciled=False)
    return (
        Invoice.objects.visible_to(user)
        .filter(institution_id=institution_id, month=month)
        .exclude(status=Invoice.Status.VOID)
        .select_related("institution", "lab", "funding_source")
        .annotate(line_count=Count("lines"), has_unreconciled=Exists(unreconciled))
        .order_by("cost_center", "lab__name", "funding_source__name", "pk")
    )


def invoice_for(user, pk: int):
    """One invoice the person may see (void ones too: they keep their number), or 404."""
    unreconciled = InvoiceLine.objects.filter(invoice=OuterRef("pk"), reconciled=False)
    return access.get_or_404(
        Invoice.objects.visible_to(user)
        .select_related("institution", "lab", "funding_source")
        .annotate(line_count=Count("lines"), has_unreconciled=Exists(unreconciled)),
        pk=pk,
    )


# Which lines are reconciled now, as the invoice's page says: a line generated while a day was
# missing is reconciled once its days are matched (its stored flag is frozen with the
# invoice). Worked out for the invoices generated provisional, all of a period's at once.


def header(invoice, status: InvoiceReconciliation | None = None) -> InvoiceHeader:
    return InvoiceHeader(
        pk=invoice.pk,
        label=invoice.number or f"draft #{invoice.pk}",
        status=invoice.status,
        institution=invoice.shown_institution_name,
        lab=invoice.shown_lab_name,
        funding_source=invoice.shown_funding_source_name,
        award_number=invoice.award_number,
        cost_center=invoice.cost_center,
        month=invoice.month,
        period_start=invoice.period_start,
        period_end=invoice.period_end,
        time_zone=invoice.institution.time_zone,
        total_usd=invoice.total_usd,
        exact_total_usd=invoice.exact_total_usd,
        line_count=invoice.line_count,
        reconciled=status.reconciled if status is not None else not invoice.has_unreconciled,
        why_not=tuple(status.why_not) if status is not None else (),
    )


def lines(invoice_id: int, reconciled_now: set[int] | None = None) -> Iterator[LineRow]:
    """`reconciled_now`: the lines reconciled now (live_reconciliation), when it was asked."""
    # An issued invoice prints the name it was issued under; a draft, today's.
    person = Coalesce(NullIf("person_name", Value("")), person_name("person__"))
    rows = (
        InvoiceLine.objects.filter(invoice_id=invoice_id)
        .order_by("position")
        .annotate(shown_person=person)
        .values_list(
            "category",
            "description",
            "shown_person",
            "quantity",
            "unit",
            "unit_rate_usd",
            "amount_usd",
            "exact_amount_usd",
            "reconciled",
            "pk",
        )
    )
    for category, description, name, *rest, reconciled, pk in rows.iterator(chunk_size=CHUNK):
        if reconciled_now is not None:
            reconciled = pk in reconciled_now
        yield LineRow(_CATEGORY.get(category, category), description, name or "", *rest, reconciled)


def live_headers(invoices) -> list[InvoiceHeader]:
    """Headers reconciled as of now, in a fixed number of queries."""
    invoices = list(invoices)
    status = invoices_reconciliation(invoices)
    return [header(invoice, status.get(invoice.pk)) for invoice in invoices]


_ASK = object()


def export_of(invoice, status: InvoiceReconciliation | None | object = _ASK) -> InvoiceExport:
    """`status`: what invoices_reconciliation said of it (None: generated reconciled)."""
    if status is _ASK:
        status = invoices_reconciliation([invoice]).get(invoice.pk)
    return InvoiceExport(
        header(invoice, status), lines(invoice.pk, status.line_ids if status else None)
    )


def period_exports(user, *, institution_id: int, month: dt.date) -> list[InvoiceExport]:
    """Headers now (a few hundred invoices at most); each one's lines when they are read.
    Which lines are reconciled now is worked out for all of them at once."""
    invoices = list(period_invoices(user, institution_id=institution_id, month=month))
    status = invoices_reconciliation(invoices)
    return [export_of(invoice, status.get(invoice.pk)) for invoice in invoices]


def line_total(exports: list[InvoiceExport]) -> int:
    return sum(e.header.line_count for e in exports)


# The billing records behind a period: one row per record (an hour of one resource), with
# the attribution each record carries. Columns: (title, xlsx width, xlsx kind).
RECORD_COLUMNS = [
    ("institution", 18, "text"),
    ("lab", 16, "text"),
    ("funding_source", 22, "text"),
    ("award_number", 14, "text"),
    ("cost_center", 12, "text"),
    ("period", 8, "text"),
    ("account", 12, "text"),
    ("resource_id", 16, "text"),
    ("resource_name", 22, "text"),
    ("kind", 10, "text"),
    ("bucket_start_utc", 20, "text"),
    ("bucket_end_utc", 20, "text"),
    ("gpu_usd", 14, "exact"),
    ("cpu_usd", 14, "exact"),
    ("disk_usd", 14, "exact"),
    ("storage_standard_usd", 14, "exact"),
    ("storage_high_performance_usd", 14, "exact"),
    ("fee_usd", 14, "exact"),
    ("networking_usd", 14, "exact"),
    ("total_usd", 14, "exact"),
]
RECORD_FIELDS = [
    "resource__account__institution__name",
    "allocation__funding_source__lab__name",
    "allocation__funding_source__name",
    "allocation__funding_source__award_number",
    "allocation__funding_source__cost_center",
    "period",
    "resource__account__name",
    "resource__runpod_id",
    "resource__name",
    "kind",
    "bucket_start",
    "bucket_end",
    "gpu_usd",
    "cpu_usd",
    "disk_usd",
    "storage_standard_usd",
    "storage_high_performance_usd",
    "fee_usd",
    "networking_usd",
    "total_usd",
]


def period_records(user, *, institution, month: dt.date):
    """The values_list queryset of the period's records the person may export; its SQL is
    what the benchmark also hands to COPY.

    On PostgreSQL times and amounts come as text (`to_char` in UTC, `numeric::text`, which
    keeps every stored digit): a million rows then cost no datetime or Decimal objects."""
    start, end = billing_period(month.year, month.month, institution.time_zone)
    if archived := detached_within(start, end):
        # A file missing a month's records would look whole: refuse, in words.
        raise DomainError(
            f"The billing records of {archived[0]:%B %Y} are archived (detached after the "
            "period was closed), so they cannot be exported until an operator attaches the "
            f"month again (manage.py billing_partitions attach {archived[0]:%Y-%m}). The "
            "period's invoices and spend figures are unchanged."
        )
    queryset = (
        BillingRecord.objects.filter(
            access.billing_records_export_q(user),
            resource__account__institution_id=institution.pk,
            bucket_start__gte=start,
            bucket_start__lt=end,
        )
        .annotate(period=Value(f"{month:%Y-%m}"))
        .order_by("resource_id", "bucket_start")
    )
    if connections[queryset.db].vendor != "postgresql":
        return queryset.values_list(*RECORD_FIELDS)
    as_text = {
        f"{name}_text": Func(F(name), Value(UTC_MINUTE), function="to_char", output_field=TEXT)
        for name in ("bucket_start", "bucket_end")
    } | {f"{name}_text": Cast(name, TEXT) for name in RECORD_FIELDS[12:]}
    fields = RECORD_FIELDS[:10] + list(as_text)
    return queryset.annotate(**as_text).values_list(*fields)


TEXT = TextField()
# timestamptz in the session's time zone, which Django sets to UTC.
UTC_MINUTE = "YYYY-MM-DD HH24:MI"


def records_csv(queryset, *, progress=None) -> Iterator[bytes]:
    """The records' CSV in pieces of bytes: written by PostgreSQL itself (COPY, with the
    formula guard in SQL), elsewhere row by row."""
    header = [title for title, _, _ in RECORD_COLUMNS]
    if connections[queryset.db].vendor == "postgresql":
        yield from copy_csv_stream(queryset, header=header, progress=progress)
        return
    for n, piece in enumerate(csv_stream(record_rows(queryset), header=header), start=1):
        if progress is not None:
            progress(n * 1000)
        yield piece.encode()


def record_rows(queryset) -> Iterator[tuple]:
    """The records as rows; times as text in UTC (a bucket is a UTC hour)."""
    rows = queryset.iterator(chunk_size=CHUNK)
    if connections[queryset.db].vendor == "postgresql":
        yield from rows  # already text (period_records)
        return
    for row in rows:
        yield (
            *row[:10],
            row[10].astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M"),
            row[11].astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M"),
            *row[12:],
        )


def my_share_rows(user) -> Iterator[list]:
    """A member's share: the lines of issued invoices charged to their own allocations
    (labgov.invoicing.selectors.my_lines), as the per-line CSV's rows."""
    from labgov.invoicing.selectors import my_lines

    lines = my_lines(user).select_related("invoice__institution", "invoice__lab")
    for line in lines.iterator(chunk_size=CHUNK):
        invoice = line.invoice
        yield [
            invoice.shown_institution_name,
            invoice.shown_lab_name,
            invoice.shown_funding_source_name,
            invoice.award_number,
            invoice.cost_center,
            f"{invoice.month:%Y-%m}",
            invoice.number,
            invoice.status,
            _CATEGORY.get(line.category, line.category),
            line.description,
            "" if line.quantity is None else line.quantity,
            line.unit,
            "" if line.unit_rate_usd is None else line.unit_rate_usd,
            line.amount_usd,
            "yes" if line.reconciled else "no",
        ]
