"""Export jobs: a period's invoices written to a file in the background, downloadable by the
person who asked for it (while still in scope) until it expires."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class ExportJob(models.Model):
    class Kind(models.TextChoices):
        PERIOD_CSV = "period_csv", "Invoice lines of the period (CSV)"
        PERIOD_XLSX = "period_xlsx", "Invoices of the period (XLSX)"
        PERIOD_PDF = "period_pdf", "Invoices of the period (PDF)"
        RECORDS_CSV = "records_csv", "Billing records of the period (CSV)"
        RECORDS_XLSX = "records_xlsx", "Billing records of the period (XLSX)"
        INVOICE_XLSX = "invoice_xlsx", "One invoice (XLSX)"
        INVOICE_PDF = "invoice_pdf", "One invoice (PDF)"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Ready"
        FAILED = "failed", "Failed"
        EXPIRED = "expired", "Expired"

    institution = models.ForeignKey("accounts.Institution", on_delete=models.PROTECT)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # Meta leads an index with it
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    month = models.DateField(help_text="The first day of the billing period.")
    invoice = models.ForeignKey(
        "invoicing.Invoice", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    # A random name under LABGOV_EXPORT_DIR, never derived from anything a person typed.
    file_name = models.CharField(max_length=80, blank=True)
    download_name = models.CharField(max_length=200)
    size_bytes = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["requested_by", "-created_at"]),
            models.Index(fields=["status", "expires_at"]),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(month__day=1), name="export_job_month_start"),
            models.CheckConstraint(
                condition=~Q(kind__in=["invoice_xlsx", "invoice_pdf"]) | Q(invoice__isnull=False),
                name="export_job_invoice_kinds_name_one",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.month:%Y-%m} ({self.status})"

    @property
    def percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        if not self.progress_total:
            return 0
        return min(99, self.progress_done * 100 // self.progress_total)

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED, self.Status.EXPIRED)
