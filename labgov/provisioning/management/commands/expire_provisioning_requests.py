from django.core.management.base import BaseCommand

from labgov.provisioning.services import provisioning_resume, requests_expire


class Command(BaseCommand):
    help = (
        "Expire provisioning requests left waiting, and enqueue again those left provisioning "
        "by a worker that died (the periodic jobs, run by hand)."
    )

    def handle(self, *args, **options):
        expired = requests_expire()
        resumed = provisioning_resume()
        self.stdout.write(f"Expired {expired} request(s); resumed {resumed}.")
