"""Run settings.CELERY_BEAT_SCHEDULE in this process, for the embedded mode (no broker):

    python manage.py run_schedule [--poll-seconds 5] [--once]

`scripts/run-demo` (`make run`) starts it beside runserver. With a broker, run celery beat
and a worker instead: this command refuses, so nothing runs twice.
"""

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from django.utils import timezone

from labgov.core.scheduler import EmbeddedScheduler


class Command(BaseCommand):
    help = "Run the Celery beat schedule in this process (embedded mode, no broker)."

    def add_arguments(self, parser):
        parser.add_argument("--poll-seconds", type=float, default=5.0)
        parser.add_argument("--once", action="store_true", help="Run what is due now and exit.")

    def handle(self, *args, poll_seconds: float, once: bool, **options):
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            raise CommandError(
                "A broker is configured (CELERY_BROKER_URL): run celery beat and a worker"
                " instead of this command."
            )
        scheduler = EmbeddedScheduler(settings.CELERY_BEAT_SCHEDULE, start=timezone.now())
        stop = threading.Event()
        if not once:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stop.set())
            names = ", ".join(e.name for e in scheduler.entries)
            self.stdout.write(f"Running the schedule in-process: {names}.")
        while not stop.is_set():
            close_old_connections()  # a long-lived process, as between a server's requests
            for name in scheduler.tick(timezone.now()):
                self.stdout.write(f"{timezone.now():%Y-%m-%d %H:%M:%S} ran {name}")
            if once:
                break
            stop.wait(poll_seconds)
