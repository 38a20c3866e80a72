"""Withhold credentials in environments stored before labgov redacted them by value.

    python manage.py runpod_redact_env

Run once after upgrading; safe to run again (it changes only what still holds a secret).
"""

from django.core.management.base import BaseCommand

from labgov.runpod.redaction import stored_env_redact


class Command(BaseCommand):
    help = "Redact credentials in the stored environments of Runpod resources."

    def handle(self, *args, **options):
        changed = stored_env_redact()
        self.stdout.write(f"Redacted the environment of {changed} resource(s).")
