from django.core.management.base import BaseCommand

from labgov.exports.services import export_jobs_expire


class Command(BaseCommand):
    help = "Remove export files past LABGOV_EXPORT_KEEP_DAYS (what the hourly schedule runs)."

    def handle(self, *args, **options):
        self.stdout.write(f"{export_jobs_expire()} export(s) expired")
