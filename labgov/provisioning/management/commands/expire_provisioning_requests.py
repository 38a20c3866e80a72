from django.core.management.base import BaseCommand

from labgov.provisioning.services import requests_expire


class Command(BaseCommand):
    help = "Expire provisioning requests left waiting (the hourly job, run by hand)."

    def handle(self, *args, **options):
        expired = requests_expire()
        self.stdout.write(f"Expired {expired} request(s).")
