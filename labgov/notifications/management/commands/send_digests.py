from django.core.management.base import BaseCommand

from labgov.notifications.services import digest_recipient_ids, digest_send


class Command(BaseCommand):
    help = "Send the daily digest email now to everyone with notifications waiting for it."

    def handle(self, *args, **options):
        people = emailed = 0
        for recipient_id in digest_recipient_ids():
            sent = digest_send(recipient_id=recipient_id)
            people += bool(sent)
            emailed += sent
        self.stdout.write(f"Sent {people} digest(s) listing {emailed} notification(s).")
