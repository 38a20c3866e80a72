"""manage.py export_focus --institution <slug or id> --month YYYY-MM [--output FILE]"""

import datetime as dt
import os
import re
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from labgov.accounts.models import Institution
from labgov.core.errors import DomainError

MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")


class Command(BaseCommand):
    help = (
        "Write one institution's month as a FOCUS 1.2 cost-and-usage dataset (CSV): to a file "
        "(written whole under a temporary name, then renamed) or to standard output."
    )

    def add_arguments(self, parser):
        parser.add_argument("--institution", required=True, help="The institution's slug or id.")
        parser.add_argument("--month", required=True, help="The billing period, YYYY-MM.")
        parser.add_argument("--output", help="The file to write (default: standard output).")

    def handle(self, *args, institution, month, output=None, **options):
        from labgov.exports import focus

        found = Institution.objects.filter(slug=institution).first()
        if found is None and institution.isdigit():
            found = Institution.objects.filter(pk=int(institution)).first()
        if found is None:
            raise CommandError(f"No institution has the slug or id {institution!r}.")
        match = MONTH.fullmatch(month)
        if not match or not (1 <= int(match[2]) <= 12) or not (2000 <= int(match[1]) <= 2100):
            raise CommandError(f"--month must be a month as YYYY-MM (2026-10), not {month!r}.")
        first = dt.date(int(match[1]), int(match[2]), 1)
        try:
            pieces = focus.dataset(found, first)
            if output is None:
                self._to_stdout(pieces)
                return
            path = Path(output)
            partial = path.with_name(f".{path.name}.partial")
            size = 0
            try:
                with partial.open("wb") as file:
                    for piece in pieces:
                        file.write(piece)
                        size += len(piece)
                os.replace(partial, path)
            finally:
                partial.unlink(missing_ok=True)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(
            f"FOCUS {focus.FOCUS_VERSION} dataset of {found.name}, {first:%B %Y}: "
            f"{size} bytes written to {path}"
        )

    def _to_stdout(self, pieces):
        stdout = self.stdout._out if hasattr(self.stdout, "_out") else sys.stdout
        binary = getattr(stdout, "buffer", None)
        for piece in pieces:
            if binary is not None:
                binary.write(piece)
            else:
                stdout.write(piece.decode())
        stdout.flush()
