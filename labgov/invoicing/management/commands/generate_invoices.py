import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from labgov.accounts.models import Institution
from labgov.core.errors import DomainError
from labgov.invoicing.services import drafts_generate_due, invoices_generate


class Command(BaseCommand):
    help = (
        "Generate draft invoices. Without --month: what the monthly schedule does now (the "
        "previous month's drafts on each institution's first day of the month). With "
        "--month YYYY-MM: (re)generate that open month's drafts, for --institution SLUG or all."
    )

    def add_arguments(self, parser):
        parser.add_argument("--month", help="YYYY-MM")
        parser.add_argument("--institution", help="the institution's slug")

    def handle(self, *args, month=None, institution=None, **options):
        if month is None:
            done = drafts_generate_due()
            self.stdout.write(f"Generated the drafts of {len(done)} institution(s).")
            return
        try:
            year, number = (int(part) for part in month.split("-"))
            first = dt.date(year, number, 1)
        except ValueError as exc:
            raise CommandError("Give --month as YYYY-MM.") from exc
        institutions = Institution.objects.order_by("pk")
        if institution:
            institutions = institutions.filter(slug=institution)
            if not institutions.exists():
                raise CommandError(f"No institution {institution!r}.")
        for inst in institutions:
            try:
                invoices = invoices_generate(actor=None, institution=inst, month=first)
            except DomainError as exc:
                self.stderr.write(f"{inst.slug}: {exc.message}")
                continue
            self.stdout.write(f"{inst.slug}: {len(invoices)} draft(s) for {first:%Y-%m}.")
