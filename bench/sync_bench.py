"""Sync benchmark: a generated Runpod account (500 pods, 200 network volumes, 90 days of hourly
billing, about a million records) synced from the simulator into PostgreSQL, against a plain
psycopg COPY of the same rows into a scratch table.

    .venv/bin/python bench/sync_bench.py [--pods 500] [--volumes 200] [--days 90]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). It creates and drops the
database `labgov_bench` (or --database NAME). The simulator runs in its own process, as Runpod
would, so its work does not count against the sync's time or memory. Reports records/s, the
peak resident memory of the syncing process, the CPU seconds of the syncing process and of
its PostgreSQL backends (a loaded machine inflates the wall clock, not these), and the ratio of
the sync's rate to COPY's (target: at least 0.5). On PostgreSQL billing is partitioned by month
(labgov/runpod/partitions.py): the sync writes into the partitions; COPY is timed into a plain
table (the floor) and into one partitioned by month the same way.
"""

import argparse
import datetime as dt
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB = "labgov_bench"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit("the simulator exited before answering")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit("the simulator did not answer")


def _recreate_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--volumes", type=int, default=200)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--slice-hours", type=int, default=24)
    parser.add_argument("--database", default=DB, help="created and dropped (default %(default)s)")
    args = parser.parse_args()

    os.environ.update(
        DEBUG="1",
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{args.database}",
        LABGOV_SYNC_FIRST_DAYS=str(args.days + 1),
        LABGOV_SYNC_SLICE_HOURS=str(args.slice_hours),
        LOG_LEVEL="WARNING",
    )
    _recreate_database(args.database)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, check=True
    )
    port = _free_port()
    scenario = f"generated:pods={args.pods},volumes={args.volumes},days={args.days},seed=1"
    sim = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "runpod_simulator",
            "--port",
            str(port),
            "--scenario",
            scenario,
            "--now",
            "wall",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(port, sim)
        result = _run(port)
    finally:
        sim.terminate()
        sim.wait(10)
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"sync-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(json.dumps(result, indent=2))


def _run(port: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labgov.settings")
    django.setup()
    from django.conf import settings
    from django.db import connection

    from labgov.accounts.services import institution_create
    from labgov.runpod.models import BillingRecord
    from labgov.runpod.services import account_connect
    from labgov.runpod.sync import account_sync

    institution = institution_create(actor=None, name="Bench University")
    account = account_connect(
        actor=None,
        institution=institution,
        name="Bench",
        api_key="sim-key",
        base_url=f"http://127.0.0.1:{port}",
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    backends = _BackendCpu()
    backends.watch(connection)
    cpu_before = _cpu_self()
    started = time.perf_counter()
    run = account_sync(account_id=account.pk)
    sync_seconds = time.perf_counter() - started
    cpu_python = _cpu_self() - cpu_before
    cpu_postgres = backends.stop()
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if run.status != "succeeded":
        sys.exit(f"sync failed: {run.error}")
    records = run.counts["records"]

    # The same rows, copied plainly into a scratch table: the floor a bulk load can reach.
    rows = list(
        BillingRecord.objects.values_list(
            "resource_id",
            "bucket_start",
            "kind",
            "bucket_end",
            "total_usd",
            "gpu_usd",
            "cpu_usd",
            "disk_usd",
            "storage_standard_usd",
            "storage_high_performance_usd",
            "fee_usd",
            "networking_usd",
            "allocation_id",
            "synced_at",
        ).iterator(chunk_size=20000)
    )
    raw = connection.connection  # the psycopg connection under Django's
    copy_seconds = _copy(raw, rows, partitioned=False)
    # The same into a scratch table partitioned by month as billing is (on PostgreSQL).
    copy_partitioned_seconds = _copy(raw, rows, partitioned=True)

    # A second sync over the default window (the overlap): what a routine 15-minute run costs.
    started = time.perf_counter()
    again = account_sync(account_id=account.pk)
    resync_seconds = time.perf_counter() - started
    sync_rate = records / sync_seconds
    copy_rate = len(rows) / copy_seconds
    return {
        "records": records,
        "stored_rows": len(rows),
        "sync_seconds": round(sync_seconds, 2),
        "sync_records_per_s": round(sync_rate),
        # CPU, not wall time: on a shared machine the wall clock measures the neighbours.
        "sync_cpu_python_s": round(cpu_python, 2),
        "sync_cpu_postgres_s": round(cpu_postgres, 2),
        "sync_records_per_cpu_s": round(records / (cpu_python + cpu_postgres)),
        "copy_seconds": round(copy_seconds, 2),
        "copy_records_per_s": round(copy_rate),
        "sync_to_copy_ratio": round(sync_rate / copy_rate, 2),
        "copy_partitioned_seconds": round(copy_partitioned_seconds, 2),
        "sync_to_partitioned_copy_ratio": round(
            sync_rate / (len(rows) / copy_partitioned_seconds), 2
        ),
        "billing_partitions": _partition_count(connection),
        "peak_rss_mb": round(rss_peak),
        "rss_before_sync_mb": round(rss_before),
        "routine_resync_seconds": round(resync_seconds, 2),
        "routine_resync_records": again.counts.get("records"),
        "ledger_entries": run.counts.get("ledger_entries"),
        "sync_phase_seconds": run.counts.get("seconds"),
        "writers": settings.LABGOV_SYNC_WRITERS,
        "load_average": os.getloadavg(),
    }


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _cpu_backend(pid: int) -> float:
    """A PostgreSQL backend's CPU seconds (it runs on this machine: 127.0.0.1)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _BackendCpu:
    """The CPU seconds the PostgreSQL backends of this process's connections spend from now to
    stop(): the sync's writer threads open a connection per slice and close it after, so each
    backend's CPU is read when its connection opens and just before it closes."""

    def __init__(self):
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.backends.signals import connection_created

        self.lock = threading.Lock()
        self.started: dict[int, float] = {}
        self.spent = 0.0
        connection_created.connect(self._opened, weak=False)
        self._close = BaseDatabaseWrapper.close
        tracker = self

        def close(wrapper):
            tracker._closing(wrapper)
            return tracker._close(wrapper)

        BaseDatabaseWrapper.close = close

    def watch(self, wrapper) -> None:
        wrapper.ensure_connection()
        self._opened(None, wrapper)

    def _opened(self, sender, connection, **kwargs) -> None:
        pid = connection.connection.info.backend_pid
        with self.lock:
            self.started[pid] = _cpu_backend(pid)

    def _closing(self, wrapper) -> None:
        if wrapper.connection is None or wrapper.connection.closed:
            return
        pid = wrapper.connection.info.backend_pid
        with self.lock:
            if pid in self.started:
                self.spent += _cpu_backend(pid) - self.started.pop(pid)

    def stop(self) -> float:
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.backends.signals import connection_created

        connection_created.disconnect(self._opened)
        BaseDatabaseWrapper.close = self._close
        with self.lock:
            for pid, started in self.started.items():
                self.spent += _cpu_backend(pid) - started
            self.started.clear()
            return self.spent


COPY_COLUMNS = (
    "resource_id, bucket_start, kind, bucket_end, total_usd, gpu_usd, cpu_usd, disk_usd,"
    " storage_standard_usd, storage_high_performance_usd, fee_usd, networking_usd,"
    " allocation_id, synced_at"
)


def _copy(raw, rows: list, *, partitioned: bool) -> float:
    """Seconds to COPY `rows` into a scratch table without indexes: plain, or partitioned by
    month like billing (its partitions made beforehand, outside the timing)."""
    with raw.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_scratch")
        if partitioned:
            cursor.execute(
                "CREATE TABLE bench_scratch (LIKE runpod_billingrecord INCLUDING DEFAULTS)"
                " PARTITION BY RANGE (bucket_start)"
            )
            months = sorted({row[1].astimezone(dt.UTC).date().replace(day=1) for row in rows})
            for month in months:
                following = (month + dt.timedelta(days=32)).replace(day=1)
                cursor.execute(
                    f"CREATE TABLE bench_scratch_p{month:%Y_%m} PARTITION OF bench_scratch"
                    f" FOR VALUES FROM ('{month} 00:00+00') TO ('{following} 00:00+00')"
                )
        else:
            cursor.execute(
                "CREATE TABLE bench_scratch (LIKE runpod_billingrecord INCLUDING DEFAULTS)"
            )
        raw.commit()
        started = time.perf_counter()
        with cursor.copy(f"COPY bench_scratch ({COPY_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.commit()
        seconds = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_scratch")
        raw.commit()
    return seconds


def _partition_count(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'runpod_billingrecord'::regclass"
        )
        return cursor.fetchone()[0]


if __name__ == "__main__":
    main()
