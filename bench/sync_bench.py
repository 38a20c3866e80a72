"""Sync benchmark: a generated Runpod account (500 pods, 200 network volumes, 90 days of hourly
billing, about a million records) synced from the simulator into PostgreSQL, against a plain
psycopg COPY of the same rows into a scratch table.

    .venv/bin/python bench/sync_bench.py [--pods 500] [--volumes 200] [--days 90]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). It creates and drops the
database `labgov_bench` (or --database NAME). The sync runs with production's settings (DEBUG
off; `--debug` for the development ones). The simulator runs in its own process, as Runpod
would, so its work does not count against the sync's time or memory. Reports records/s, the
peak resident memory of the syncing process, the CPU seconds of the syncing process and of
its PostgreSQL backends (a loaded machine inflates the wall clock, not these), and the ratio of
the sync's rate to COPY's (target: at least 0.5). On PostgreSQL billing is partitioned by month
(labgov/runpod/partitions.py): the sync writes into the partitions; COPY is timed into a plain
table (the floor) and into one partitioned by month the same way.

Where the sync's time goes: the CPU seconds of the syncing process (all its threads) and of
the simulator over the sync, and per step of the billing phase (fetching a slice, writing its
records, the ledger's usage, the rollups, and the whole slice's transaction) the calls, wall
seconds, this process's CPU in that thread and the CPU of the PostgreSQL backend serving it
(read from /proc: PostgreSQL runs on this machine). Figures of steps that run side by side
(LABGOV_SYNC_WRITERS) add up past the phase's wall time.
"""

import argparse
import base64
import datetime as dt
import functools
import json
import os
import resource
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procs  # noqa: E402 - CPU from /proc, shared by the benchmarks

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


BROKER = "redis://127.0.0.1:6379/13"  # a database of its own, emptied after the run


def _bench_broker() -> str | None:
    """The bench's broker when Redis answers on this machine (emptied first), else None."""
    import redis

    try:
        client = redis.Redis.from_url(BROKER, socket_timeout=2)
        client.flushdb()
    except redis.RedisError:
        return None
    return BROKER


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
    parser.add_argument("--debug", action="store_true", help="the development settings (DEBUG on)")
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="resources the account had before, gone and never attributed, added before the "
        "routine resync (an account keeps every resource it ever had; default %(default)s)",
    )
    parser.add_argument(
        "--rules",
        action="store_true",
        help="an account-wide attribution rule from before the first record, so that every "
        "record is attributed to a grant as in production (default: none, all unattributed)",
    )
    args = parser.parse_args()

    # Production's settings (DEBUG off), as the deploy units run the sync: with DEBUG on,
    # Django's debug cursor formats and keeps every query, and the sync of 1.39M records took
    # 14.7-17.2 s against 12.3-12.5 s in paired runs. The simulator on this machine is the
    # Runpod it may reach; the keys are the bench's own.
    os.environ.update(
        DEBUG="1" if args.debug else "0",
        SECRET_KEY="sync-bench-" + secrets.token_urlsafe(32),
        LABGOV_ENCRYPTION_KEYS=base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        ALLOWED_HOSTS="127.0.0.1",
        LABGOV_RUNPOD_HOSTS="127.0.0.1",
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{args.database}",
        LABGOV_SYNC_FIRST_DAYS=str(args.days + 1),
        LABGOV_SYNC_SLICE_HOURS=str(args.slice_hours),
        LOG_LEVEL="WARNING",
    )
    # The tasks a sync queues (alert and retention evaluation, after it commits) go to a
    # broker, as in production, where a worker runs them: without one Celery runs them inside
    # the sync (CELERY_TASK_ALWAYS_EAGER), ~1 s of evaluation counted as the sync's. The bench
    # runs them itself after the sync and reports their seconds apart (`after_sync_tasks`).
    broker = _bench_broker()
    if broker:
        os.environ["CELERY_BROKER_URL"] = broker
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
        result = _run(port, sim.pid, rules=args.rules, days=args.days, history=args.history)
    finally:
        sim.terminate()
        sim.wait(10)
        if broker:  # what the later syncs and the rule queued: no worker runs it here
            import redis

            redis.Redis.from_url(broker).flushdb()
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"sync-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(json.dumps(result, indent=2))


class StepClock:
    """Wraps functions the sync calls by name and adds up, per step: calls, wall seconds, CPU
    seconds of the calling thread, and CPU seconds of that thread's PostgreSQL backend."""

    def __init__(self):
        self.figures = defaultdict(lambda: defaultdict(float))
        self.lock = threading.Lock()

    @staticmethod
    def _backend() -> int | None:
        from django.db import connection

        raw = connection.connection
        return None if raw is None or raw.closed else raw.info.backend_pid

    def wrap(self, module, name: str, step: str | None = None) -> None:
        function = getattr(module, name, None)
        if function is None:
            return
        step = step or name

        @functools.wraps(function)
        def timed(*args, **kwargs):
            backend = self._backend()
            backend_before = procs.process_cpu(backend)
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                now_backend = self._backend()
                if now_backend != backend:  # opened inside: its whole life is this step's
                    backend_before = 0.0
                backend_cpu = procs.process_cpu(now_backend) - backend_before
                with self.lock:
                    figures = self.figures[step]
                    figures["calls"] += 1
                    figures["wall_s"] += wall
                    figures["cpu_s"] += cpu
                    figures["pg_backend_cpu_s"] += backend_cpu

        setattr(module, name, timed)

    def report(self) -> dict:
        return {
            step: {name: round(value, 2) for name, value in figures.items()}
            for step, figures in self.figures.items()
        }


def _run(port: int, simulator_pid: int, *, rules: bool, days: int, history: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labgov.settings")
    django.setup()
    from django.conf import settings
    from django.db import connection

    from labgov.accounts.services import institution_create
    from labgov.runpod import billing_store, sync
    from labgov.runpod.models import BillingRecord
    from labgov.runpod.services import account_connect
    from labgov.runpod.sync import account_sync

    steps = StepClock()
    steps.wrap(billing_store, "fetch_slice", "fetch slice (HTTP)")
    steps.wrap(billing_store, "write_slice", "records (write_slice)")
    # Whatever the slice's transaction calls after its records, by the names sync.py uses.
    for name in ("span_written",):
        steps.wrap(sync, name)
    # And what span_written does (labgov/runpod/providers.py), step by step.
    from labgov.runpod import providers
    from labgov.usage import services as usage

    for name in ("span_sums", "unattributed_move", "usage_reconcile", "rollups_rebuild"):
        steps.wrap(providers, name, f"span_written: {name}")
    for name in ("split_deltas", "lab_days_rebuild", "months_rebuild", "spend_changed"):
        steps.wrap(usage, name, f"span_written: {name}")
    steps.wrap(sync, "_slice_write", "whole slice (its transaction)")
    # Where a slice, its records written, waits for the slice before it to commit.
    steps.wrap(sync, "account_lock_serial", "waiting for the serial lock")

    institution = institution_create(actor=None, name="Bench University")
    account = account_connect(
        actor=None,
        institution=institution,
        name="Bench",
        api_key="sim-key",
        base_url=f"http://127.0.0.1:{port}",
    )
    if rules:
        _rule_for_everything(institution, account, days=days + 2)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    backends = _BackendCpu()  # every PostgreSQL backend the sync's connections use
    backends.watch(connection)
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    simulator_before = procs.process_cpu(simulator_pid)
    load_before = os.getloadavg()
    machine_before = procs.machine_cpu()
    started = time.perf_counter()
    run = account_sync(account_id=account.pk)
    sync_seconds = time.perf_counter() - started
    machine_busy, machine_idle = (
        after - before for after, before in zip(procs.machine_cpu(), machine_before, strict=True)
    )
    cpu_postgres = backends.stop()
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    sync_cpu = (usage_after.ru_utime - usage_before.ru_utime) + (
        usage_after.ru_stime - usage_before.ru_stime
    )
    simulator_cpu = procs.process_cpu(simulator_pid) - simulator_before
    load_after_sync = os.getloadavg()
    billing_steps = steps.report()  # the first sync's, before the routine one below
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if run.status != "succeeded":
        sys.exit(f"sync failed: {run.error}")
    records = run.counts["records"]
    after_sync_tasks = _after_sync_tasks(institution.pk)

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
    copy_seconds, _ = _copy(raw, rows, partitioned=False)
    # The same into a scratch table partitioned by month as billing is (on PostgreSQL).
    copy_partitioned_seconds, copy_cpu = _copy(raw, rows, partitioned=True)
    # And into one with billing's own primary key and check constraint too, which the sync
    # maintains as it writes: the same partitioned table, empty.
    copy_same_table_seconds, copy_same_table_cpu = _copy(
        raw, rows, partitioned=True, same_table=True
    )

    # A second sync over the default window (the overlap): what a routine 15-minute run costs.
    if history:
        _history_add(account, history)
    rss_before_resync = procs.rss_mb()
    procs.peak_reset()
    started = time.perf_counter()
    again = account_sync(account_id=account.pk)
    resync_seconds = time.perf_counter() - started
    resync_rss_growth = procs.peak_mb() - rss_before_resync
    # Without --rules: then an institution admin's account-wide rule reaching back over every
    # record (rule_create in one transaction: every record re-attributed, the ledger's usage
    # and the rollups of every day following), what the rule page's request waits for.
    backdated_rule_seconds = None
    if not rules:
        started = time.perf_counter()
        _rule_for_everything(institution, account, days=days + 2)
        backdated_rule_seconds = round(time.perf_counter() - started, 2)
    sync_rate = records / sync_seconds
    copy_rate = len(rows) / copy_seconds
    return {
        "records": records,
        "stored_rows": len(rows),
        "sync_seconds": round(sync_seconds, 2),
        "sync_records_per_s": round(sync_rate),
        # CPU, not wall time: on a shared machine the wall clock measures the neighbours.
        "sync_cpu_python_s": round(sync_cpu, 2),
        "sync_cpu_postgres_s": round(cpu_postgres, 2),
        "sync_records_per_cpu_s": round(records / (sync_cpu + cpu_postgres)),
        "copy_seconds": round(copy_seconds, 2),
        "copy_records_per_s": round(copy_rate),
        "sync_to_copy_ratio": round(sync_rate / copy_rate, 2),
        "copy_partitioned_seconds": round(copy_partitioned_seconds, 2),
        "sync_to_partitioned_copy_ratio": round(
            sync_rate / (len(rows) / copy_partitioned_seconds), 2
        ),
        "copy_same_table_seconds": round(copy_same_table_seconds, 2),
        "sync_to_same_table_copy_ratio": round(
            sync_rate / (len(rows) / copy_same_table_seconds), 2
        ),
        "copy_partitioned_cpu_s": copy_cpu,
        "copy_same_table_cpu_s": copy_same_table_cpu,
        "billing_partitions": _partition_count(connection),
        "peak_rss_mb": round(rss_peak),
        "rss_before_sync_mb": round(rss_before),
        # What a worker runs after the sync (the sync queues it): seconds per task; or, with
        # no broker, "inline": they ran inside the sync and its seconds count them.
        "after_sync_tasks": after_sync_tasks,
        "routine_resync_seconds": round(resync_seconds, 2),
        "routine_resync_records": again.counts.get("records"),
        "history_resources": history,
        "routine_resync_peak_growth_mb": round(resync_rss_growth),
        "backdated_rule_seconds": backdated_rule_seconds,
        "ledger_entries": run.counts.get("ledger_entries"),
        "attributed_records": BillingRecord.objects.filter(allocation__isnull=False).count(),
        "sync_phase_seconds": run.counts.get("seconds"),
        "writers": settings.LABGOV_SYNC_WRITERS,
        "sync_process_cpu_s": round(sync_cpu, 2),
        # The whole machine over the sync: its cores' busy and idle seconds.
        "sync_machine_busy_core_s": round(machine_busy, 2),
        "sync_machine_idle_core_s": round(machine_idle, 2),
        "simulator_cpu_s": round(simulator_cpu, 2),
        "billing_steps": billing_steps,
        "load_average_before_sync": [round(x, 2) for x in load_before],
        "load_average_after_sync": [round(x, 2) for x in load_after_sync],
        "load_average": os.getloadavg(),
    }


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
            self.started[pid] = procs.process_cpu(pid)

    def _closing(self, wrapper) -> None:
        if wrapper.connection is None or wrapper.connection.closed:
            return
        pid = wrapper.connection.info.backend_pid
        with self.lock:
            if pid in self.started:
                self.spent += procs.process_cpu(pid) - self.started.pop(pid)

    def stop(self) -> float:
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.backends.signals import connection_created

        connection_created.disconnect(self._opened)
        BaseDatabaseWrapper.close = self._close
        with self.lock:
            for pid, started in self.started.items():
                self.spent += procs.process_cpu(pid) - started
            self.started.clear()
            return self.spent


def _history_add(account, count: int) -> None:
    """`count` pods the account had before this window: gone a month ago, billing nothing
    now (copies of one pod of the account under new ids, in one INSERT), and assigned by the
    account's rule when it has one, as that rule did when they were created."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)"
            " FROM information_schema.columns"
            " WHERE table_name = 'runpod_resource' AND column_name NOT IN ('id', 'runpod_id',"
            " 'gone_at', 'status', 'tag_refusal', 'current_allocation_id')"
        )
        (columns,) = cursor.fetchone()
        copied = ", ".join(f"r.{c}" for c in columns.split(", "))
        cursor.execute(
            f"INSERT INTO runpod_resource ({columns}, runpod_id, gone_at, status, tag_refusal)"
            f" SELECT {copied}, 'gone-' || g, now() - interval '30 days', 'TERMINATED', ''"
            " FROM runpod_resource r, generate_series(1, %s) g"
            " WHERE r.id = (SELECT min(id) FROM runpod_resource"
            "               WHERE account_id = %s AND kind = 'pod')",
            [count, account.pk],
        )
        cursor.execute(
            "INSERT INTO runpod_assignment"
            " (starts_at, source, created_at, note, resource_id, allocation_id, rule_id)"
            " SELECT now() - interval '60 days', 'rule', now(), '', r.id, rule.allocation_id,"
            "        rule.id"
            " FROM runpod_resource r"
            " JOIN runpod_attributionrule rule"
            "   ON rule.account_id = r.account_id AND rule.is_active"
            " WHERE r.account_id = %s AND r.runpod_id LIKE 'gone-%%'",
            [account.pk],
        )
        cursor.execute(
            "UPDATE runpod_resource r SET current_allocation_id = a.allocation_id"
            " FROM runpod_assignment a"
            " WHERE a.resource_id = r.id AND r.account_id = %s AND r.runpod_id LIKE 'gone-%%'",
            [account.pk],
        )
        cursor.execute("ANALYZE runpod_resource")
        cursor.execute("ANALYZE runpod_assignment")


def _rule_for_everything(institution, account, *, days: int) -> None:
    """An institution admin's lab, grant and allocation, and an account-wide rule starting
    `days` ago: the sync's inventory assigns every resource it finds, and its billing
    attributes every record, as a production account's first sync with rules does."""
    from django.utils import timezone

    from labgov.accounts.models import Role, User
    from labgov.accounts.services import lab_create, membership_grant
    from labgov.funding.services import allocation_create, funding_source_create
    from labgov.runpod.models import AttributionRule
    from labgov.runpod.services import rule_create

    admin = User.objects.create_user(username="bench-admin", email="admin@bench.example")
    membership_grant(actor=None, user=admin, role=Role.INSTITUTION_ADMIN, institution=institution)
    lab = lab_create(actor=admin, institution=institution, name="Bench Lab")
    today = timezone.now().date()
    grant = funding_source_create(
        actor=admin,
        lab=lab,
        name="Bench grant",
        start_date=today - dt.timedelta(days=days),
        end_date=today + dt.timedelta(days=365),
        amount_usd=Decimal("10000000"),
    )
    allocation = allocation_create(
        actor=admin,
        funding_source=grant,
        cap_usd=Decimal("10000000"),
        start_date=grant.start_date,
        end_date=grant.end_date,
        project_name="Bench project",
    )
    rule_create(
        actor=admin,
        account=account,
        kind=AttributionRule.Kind.ACCOUNT,
        pattern="",
        allocation=allocation,
        starts_at=timezone.now() - dt.timedelta(days=days),
    )


COPY_COLUMNS = (
    "resource_id, bucket_start, kind, bucket_end, total_usd, gpu_usd, cpu_usd, disk_usd,"
    " storage_standard_usd, storage_high_performance_usd, fee_usd, networking_usd,"
    " allocation_id, synced_at"
)


def _copy(raw, rows: list, *, partitioned: bool, same_table: bool = False) -> tuple:
    """Seconds to COPY `rows` into a scratch table without indexes: plain, or partitioned by
    month like billing (its partitions made beforehand, outside the timing), or that with
    billing's primary key and constraints (`same_table`); and the CPU seconds of this process
    and of its PostgreSQL backend over the COPY."""
    with raw.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_scratch")
        if partitioned:
            including = "INCLUDING ALL" if same_table else "INCLUDING DEFAULTS"
            cursor.execute(
                f"CREATE TABLE bench_scratch (LIKE runpod_billingrecord {including})"
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
        backend = raw.info.backend_pid
        cpu_before, backend_before = time.process_time(), procs.process_cpu(backend)
        started = time.perf_counter()
        with cursor.copy(f"COPY bench_scratch ({COPY_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.commit()
        seconds = time.perf_counter() - started
        cpu = {
            "process": round(time.process_time() - cpu_before, 2),
            "pg_backend": round(procs.process_cpu(backend) - backend_before, 2),
        }
        cursor.execute("DROP TABLE bench_scratch")
        raw.commit()
    return seconds, cpu


def _after_sync_tasks(institution_id: int) -> dict | str:
    """Run what the sync queued for a worker (alert and retention evaluation), timed, and
    empty the bench's broker; "inline" when Celery ran them inside the sync."""
    from django.conf import settings

    if settings.CELERY_TASK_ALWAYS_EAGER:
        return "inline"
    import redis

    from labgov.alerts.tasks import evaluate_institution as alerts_evaluate
    from labgov.retention.tasks import evaluate_institution as retention_evaluate

    seconds = {}
    for name, task in (("alerts", alerts_evaluate), ("retention", retention_evaluate)):
        started = time.perf_counter()
        task(institution_id)
        seconds[name] = round(time.perf_counter() - started, 2)
    redis.Redis.from_url(BROKER).flushdb()
    return seconds


def _partition_count(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'runpod_billingrecord'::regclass"
        )
        return cursor.fetchone()[0]


if __name__ == "__main__":
    main()
