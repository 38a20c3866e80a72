"""Run the Runpod API v2 simulator until interrupted.

    python manage.py runpod_simulator --port 8765 --scenario default --now wall

Point a connected Runpod account's base URL at the printed address and use the printed key.
`--now` is an RFC 3339 time (the clock then moves only through POST /_sim/clock), "wall" for
the real clock (the scenario is shifted by whole hours so its history ends now), or absent for
the scenario's own fixed `now`.
"""

import datetime as dt
import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from labgov.simulator import SimulatorServer, load_scenario


class Command(BaseCommand):
    help = "Run the Runpod REST API v2 simulator (for the demo, tests and benchmarks)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument(
            "--scenario",
            default="default",
            help='a built-in scenario name, a JSON file, or "generated[:pods=500,volumes=200,...]"',
        )
        parser.add_argument("--api-key", default="sim-key")
        parser.add_argument("--now", default=None, help='RFC 3339 time, or "wall"')
        parser.add_argument("--verbose-requests", action="store_true", help="log each request")

    def handle(self, *args, **options):
        try:
            scenario = load_scenario(options["scenario"])
        except (OSError, ValueError, KeyError) as error:
            raise CommandError(f"cannot load scenario {options['scenario']!r}: {error}") from None
        now = options["now"]
        if now not in (None, "wall"):
            try:
                now = dt.datetime.fromisoformat(now)
            except ValueError:
                raise CommandError(
                    f"--now must be an RFC 3339 time or 'wall', not {now!r}"
                ) from None
            if now.tzinfo is None:
                raise CommandError("--now needs a time zone offset, e.g. 2026-11-20T14:30:00Z")
        log = self.stderr.write if options["verbose_requests"] else None
        server = SimulatorServer(
            scenario=scenario,
            api_key=options["api_key"],
            now=now,
            host=options["host"],
            port=options["port"],
            log=log,
        )
        try:
            server.start()
        except OSError as error:
            where = f"{options['host']}:{options['port']}"
            raise CommandError(f"cannot listen on {where}: {error}") from None
        clock = "wall clock" if server.state.wall_clock else "fixed clock"
        self.stdout.write(
            f"Runpod simulator listening on {server.base_url} "
            f"(scenario {scenario.name}, API key {server.api_key}, "
            f"now {server.state.now.isoformat()}, {clock})"
        )
        self.stdout.flush()
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        try:
            while not stopped.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
            self.stdout.write("Runpod simulator stopped.")
