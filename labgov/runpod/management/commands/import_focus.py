from django.core.management.base import BaseCommand, CommandError

from labgov.core.errors import DomainError
from labgov.runpod.focus import focus_import
from labgov.runpod.models import BillingSource, RunpodAccount


class Command(BaseCommand):
    help = (
        "Import a month's FOCUS 1.0–1.2 cost-and-usage CSV into a FOCUS billing source. "
        "The same file again changes nothing; a corrected file replaces the month."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the FOCUS CSV file")
        parser.add_argument("--source", required=True, help="the FOCUS billing source's name")
        parser.add_argument("--institution", help="the institution's slug (when names repeat)")
        parser.add_argument(
            "--late",
            action="store_true",
            help="a correction of a closed month: its differences become late usage",
        )

    def handle(self, *args, file, source, institution=None, late=False, **options):
        sources = RunpodAccount.objects.filter(name=source, billing_source=BillingSource.FOCUS)
        if institution:
            sources = sources.filter(institution__slug=institution)
        found = list(sources.select_related("institution")[:2])
        if not found:
            raise CommandError(f"No FOCUS billing source named {source!r}.")
        if len(found) > 1:
            raise CommandError(f"Several institutions have a source named {source!r}: name one.")
        try:
            with open(file, "rb") as stream:
                result = focus_import(
                    actor=None,
                    account=found[0],
                    stream=stream,
                    file_name=file.rsplit("/", 1)[-1],
                    late=late,
                    check_access=False,
                )
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}.") from None
        except DomainError as exc:
            raise CommandError(exc.message) from None
        f = result.file
        if result.unchanged:
            self.stdout.write(
                f"{source}: unchanged (the same file was imported on "
                f"{f.imported_at:%Y-%m-%d %H:%M} UTC)"
            )
            return
        self.stdout.write(
            self.style.SUCCESS(
                f"{source}: {f.period_start:%Y-%m}: {f.rows} rows, {f.records} billing records, "
                f"{f.billed_total} {f.currency} (USD {f.total_usd})"
                + (" — late usage of a closed month" if f.late else "")
            )
        )
