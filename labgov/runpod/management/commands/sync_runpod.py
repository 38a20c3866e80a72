import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from labgov.runpod.models import BillingSource, RunpodAccount, SyncRun
from labgov.runpod.sync import account_sync


def _moment(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"{text!r} is not an ISO date or time (e.g. 2026-11-01T00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment


class Command(BaseCommand):
    help = "Sync Runpod accounts now (all active ones, or --account NAME)."

    def add_arguments(self, parser):
        parser.add_argument("--account", help="the account's name")
        parser.add_argument("--start", type=_moment, help="billing window start (ISO, UTC)")
        parser.add_argument("--end", type=_moment, help="billing window end, exclusive (ISO, UTC)")

    def handle(self, *args, account=None, start=None, end=None, **options):
        accounts = RunpodAccount.objects.filter(
            is_active=True, billing_source=BillingSource.RUNPOD_API
        )
        if account:
            accounts = RunpodAccount.objects.filter(name=account)
            if not accounts.exists():
                raise CommandError(f"No Runpod account named {account!r}.")
        if start and end and end <= start:
            raise CommandError("--end must be after --start.")
        failed = 0
        for acc in accounts:
            run = account_sync(
                account_id=acc.pk, trigger=SyncRun.Trigger.COMMAND, start=start, end=end
            )
            line = f"{acc.name}: {run.get_status_display()}"
            if run.status == SyncRun.Status.SUCCEEDED:
                line += f" ({run.counts.get('records', 0)} billing records)"
                self.stdout.write(self.style.SUCCESS(line))
            else:
                failed += run.status == SyncRun.Status.FAILED
                self.stdout.write(self.style.WARNING(f"{line}: {run.error}"))
        if failed:
            raise CommandError(f"{failed} account(s) failed to sync.")
