"""Billing partitions (PostgreSQL): list the months, detach a closed one for archiving, attach
one back, or create the coming months (what the daily schedule runs). README, "Billing
partitions", has the whole archive and restore procedure."""

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.utils import timezone

from labgov.core.errors import DomainError
from labgov.runpod import archive, partitions


def _month(text: str) -> dt.date:
    try:
        return dt.datetime.strptime(text, "%Y-%m").date()  # noqa: DTZ007 - a month, not a time
    except ValueError:
        raise CommandError(f"{text!r} is not a month written YYYY-MM (e.g. 2026-01).") from None


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Command(BaseCommand):
    help = "Billing records' monthly partitions: list, detach YYYY-MM, attach YYYY-MM, ahead."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="every month: records, size, attached, closed")
        detach = sub.add_parser("detach", help="detach a closed month, for pg_dump -t")
        detach.add_argument("month", type=_month)
        attach = sub.add_parser("attach", help="attach a month's table back")
        attach.add_argument("month", type=_month)
        sub.add_parser("ahead", help="create this month's and the coming months' partitions")

    def handle(self, *args, action: str, month: dt.date | None = None, **options):
        if connection.vendor != "postgresql":
            raise CommandError(archive.POSTGRESQL_ONLY)
        if not partitions.is_partitioned():
            raise CommandError(
                "Billing records are not partitioned on this database yet: apply the "
                "migrations first (manage.py migrate; runpod 0009 partitions them)."
            )
        try:
            if action == "list":
                self._list()
            elif action == "detach":
                part = archive.billing_month_detach(actor=None, month=month)
                self.stdout.write(
                    self.style.SUCCESS(
                        f"{month:%Y-%m} detached: {part.rows} records in table {part.table}. "
                        f"Archive it with pg_dump -t {part.table}, then DROP TABLE {part.table}."
                    )
                )
            elif action == "attach":
                part = archive.billing_month_attach(actor=None, month=month)
                self.stdout.write(
                    self.style.SUCCESS(f"{month:%Y-%m} attached: {part.rows} records are back.")
                )
            else:
                months = partitions.ensure_ahead(timezone.now())
                self.stdout.write(f"Partitions ready: {', '.join(f'{m:%Y-%m}' for m in months)}.")
        except DomainError as exc:
            raise CommandError(exc.message) from None

    def _list(self) -> None:
        current = partitions.month_start(timezone.now())
        self.stdout.write(f"{'month':8} {'records':>10} {'size':>9}  {'state':9} closed")
        for part in archive.billing_months():
            if part.month > current:
                closed = "no (future month)"
            elif part.month == current:
                closed = "no (current month)"
            elif not part.institutions:
                closed = "no records"
            elif part.closed:
                closed = "yes, for every institution with records in it"
            else:
                still_open = sum(not share.closed for share in part.institutions)
                closed = f"no: open for {still_open} of {len(part.institutions)} institution(s)"
            self.stdout.write(
                f"{part.month:%Y-%m}  {part.rows:>10} {_size(part.size_bytes):>9}  "
                f"{'attached' if part.attached else 'detached':9} {closed}"
            )
