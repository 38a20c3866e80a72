from django.core.management.base import BaseCommand, CommandError

from labgov.funding import totals


class Command(BaseCommand):
    help = (
        "Check the ledger's running totals (committed and spent per funding source and "
        "allocation) against the sums of the entries, or rebuild them from the entries."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--rebuild",
            action="store_true",
            help="set every total to the sums of the entries (after restoring an old backup)",
        )

    def handle(self, *args, rebuild=False, **options):
        if rebuild:
            written = totals.rebuild()
            self.stdout.write(f"Rebuilt {written} ledger totals from the entries.")
            return
        found = totals.differences()
        if not found:
            self.stdout.write("Every ledger total equals the sum of its entries.")
            return
        for owner_kind, owner_id, committed, spent in found[:50]:
            self.stdout.write(
                f"{owner_kind} {owner_id}: committed off by {committed}, spent off by {spent}"
            )
        raise CommandError(
            f"{len(found)} ledger totals differ from their entries; "
            "`manage.py ledger_totals --rebuild` sets them from the entries."
        )
