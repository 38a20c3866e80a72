"""Dashboard benchmark: the lab admin's, the student's and finance's pages over 1 million
billing records (and over 10 thousand, for the ratio), in PostgreSQL.

    .venv/bin/python bench/dashboard_bench.py [--records 1000000] [--small 10000] [--requests 50]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops the
databases `labgov_dashbench` and `labgov_dashbench_small` (`--keep` leaves them). For each
size it builds one institution with 20 labs, 200 funding sources, 1,000 people with an
allocation each, 1,000 resources (800 pods, 200 network volumes) on two Runpod accounts, and
hourly billing records for every resource (records ÷ 1,000 hours, ending at the last full
hour): generated in the database
with generate_series, not by the sync. The rollups and the ledger's usage are then built by
the sync's own functions (`rollups_rebuild`, `usage_reconcile`), and a sample of rollups is
checked against the raw records.

`--keep` leaves both databases behind and `--reuse` starts from them (their rollups are
checked again, in seconds even at 10M), so page work can be measured again without a rebuild.

Both sizes are built side by side (the 10k one in `labgov_dashbench_small`), and each page is
requested in-process with Django's test Client, DEBUG off: 3 warm-up requests, then
`--requests` timed ones per size, alternating between the sizes so that the machine's load
weighs on both alike; the query count comes from one more. Prints a table and writes
JSON to bench/results/. Target: median under 50 ms, ratio (1M ÷ 10k median) under 1.5.
"""

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB = "labgov_dashbench"  # and DB + "_small"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
RESOURCES = 1000
PODS = 800
LABS = 20
SOURCES = 200
PEOPLE = 1000


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def _database(name: str):
    """A fresh database and a connection to it, which _use() makes the default one: both
    sizes stay open side by side, so their requests can be interleaved."""
    from django.db import connections
    from django.db.utils import load_backend

    _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(f"CREATE DATABASE {name}")
    settings_dict = {**connections.settings["default"], "NAME": name}
    return load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, "default")


def _use(connection) -> None:
    from django.db import connections

    connections["default"] = connection


def _setup_django() -> None:
    os.environ.update(
        DEBUG="1",  # plain static files storage; DEBUG itself is switched off below
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{DB}",
        DATABASE_CONN_MAX_AGE="600",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="labgov.settings",
        # What a page costs to compute; the page cache's own figures are bench/load_bench.py's.
        LABGOV_PAGE_CACHE_SECONDS="0",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False  # no query log, as in production


def _build(records: int) -> dict:
    """The institution, its people and money, resources and billing; returns who to log in
    as and what to open."""
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from labgov.accounts.models import Institution, Lab, Membership, Role, User
    from labgov.core.crypto import encrypt
    from labgov.funding.models import Allocation, FundingSource
    from labgov.runpod.models import Resource, RunpodAccount
    from labgov.runpod.partitions import ensure_months

    call_command("migrate", verbosity=0, interactive=False)
    now = timezone.now()
    today = now.date()
    nobody = make_password(None)  # logged in with force_login only
    institution = Institution.objects.create(name="Bench University", slug="bench")
    labs = Lab.objects.bulk_create(
        Lab(institution=institution, name=f"Lab {i:02d}", slug=f"lab-{i:02d}") for i in range(LABS)
    )
    people = User.objects.bulk_create(
        User(username=f"person{i:04d}", first_name="Person", last_name=f"{i:04d}", password=nobody)
        for i in range(PEOPLE)
    )
    finance = User.objects.create(username="finance", password=nobody)
    started = today - dt.timedelta(days=400)
    memberships = [
        Membership(user=finance, institution=institution, role=Role.FINANCE, start_date=started)
    ]
    # The first person of each lab is its lab admin; everyone is a member of their lab.
    for i, person in enumerate(people):
        lab = labs[i % LABS]
        role = Role.LAB_ADMIN if i < LABS else Role.MEMBER
        memberships.append(
            Membership(user=person, institution=institution, lab=lab, role=role, start_date=started)
        )
    Membership.objects.bulk_create(memberships)
    sources = FundingSource.objects.bulk_create(
        FundingSource(
            institution=institution,
            lab=labs[i % LABS],
            name=f"Grant {i:03d}",
            award_number=f"AWD-{i:05d}",
            cost_center=f"CC-{i % 37:02d}",
            start_date=today - dt.timedelta(days=120),
            end_date=today + dt.timedelta(days=60 + (i * 7) % 400),
            amount_usd=50000 + 1000 * (i % 50),
        )
        for i in range(SOURCES)
    )
    # Person i holds an allocation on one of the ten funding sources of their lab.
    allocations = Allocation.objects.bulk_create(
        Allocation(
            funding_source=sources[(i % LABS) + LABS * ((i // LABS) % (SOURCES // LABS))],
            user=person,
            cap_usd=5000,
            start_date=today - dt.timedelta(days=120),
            end_date=today + dt.timedelta(days=60),
        )
        for i, person in enumerate(people)
    )
    key = encrypt("rp_bench_key_0000")
    accounts = RunpodAccount.objects.bulk_create(
        RunpodAccount(
            institution=institution, name=name, api_key_encrypted=key, api_key_last4="0000"
        )
        for name in ("Main", "Overflow")
    )
    resources = []
    for r in range(RESOURCES):
        pod = r < PODS
        # One resource in twenty is unattributed; the rest are paid by person r's allocation.
        allocation = None if r % 20 == 19 else allocations[r % PEOPLE]
        resources.append(
            Resource(
                account=accounts[1 if r % 10 == 0 else 0],
                kind="pod" if pod else "network_volume",
                runpod_id=f"{'pod' if pod else 'vol'}-{r:05d}",
                name=f"{'pod' if pod else 'volume'}-{r:05d}",
                status=("RUNNING" if r % 10 < 3 else "EXITED") if pod else "AVAILABLE",
                status_changed_at=now - dt.timedelta(hours=r % 200),
                cost_per_hr_usd="1.89" if pod else 0,
                gpu_count=1 if pod else 0,
                gpu_type_id="NVIDIA A100 80GB PCIe" if pod else "",
                container_disk_gb=20 if pod else 0,
                volume_disk_gb=50 if pod else 0,
                size_gb=0 if pod else 100 + r % 400,
                volume_type="" if pod else "STANDARD",
                # Running pods mount a network volume; the other volumes sit idle.
                network_volume_id=f"vol-{PODS + r % 200:05d}" if pod and r % 10 < 3 else "",
                current_allocation=allocation,
            )
        )
    Resource.objects.bulk_create(resources, batch_size=1000)

    hours = records // RESOURCES
    last = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    first = last - dt.timedelta(hours=hours - 1)
    # On PostgreSQL each month of billing is a partition that must exist before its rows.
    ensure_months(first, last, trust_cache=False)
    # Deterministic amounts from the resource id and the hour, exact to ten decimal places.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runpod_billingrecord (resource_id, kind, bucket_start, bucket_end,
                total_usd, gpu_usd, cpu_usd, disk_usd, storage_standard_usd,
                storage_high_performance_usd, fee_usd, networking_usd, allocation_id, synced_at)
            SELECT r.id, r.kind, h, h + interval '1 hour',
                   a.gpu + a.cpu + a.disk + a.storage, a.gpu, a.cpu, a.disk, a.storage,
                   0, 0, 0, r.current_allocation_id, now()
            FROM runpod_resource r
            CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz, interval '1 hour') h
            CROSS JOIN LATERAL (
                SELECT
                    CASE WHEN r.kind = 'pod' AND r.status = 'RUNNING'
                         THEN 1.49 + ((r.id * 7 + extract(epoch FROM h)::bigint / 3600) %% 40)
                                     / 100.0
                         ELSE 0 END::numeric(20, 10) AS gpu,
                    CASE WHEN r.kind = 'pod' AND r.status = 'RUNNING' THEN 0.0400000000
                         ELSE 0 END::numeric(20, 10) AS cpu,
                    CASE WHEN r.kind = 'pod' THEN 0.0136986301 ELSE 0 END::numeric(20, 10) AS disk,
                    CASE WHEN r.kind = 'network_volume' THEN r.size_gb * 0.0000958904
                         ELSE 0 END::numeric(20, 10) AS storage
            ) a
            """,
            [first, last],
        )
        cursor.execute("ANALYZE")
    return {
        "accounts": accounts,
        "days": sorted({(first + dt.timedelta(hours=h)).date() for h in range(hours)}),
        "lab_admin": people[0],
        "lab": labs[0],
        "funding_source": sources[0],
        "student": people[LABS],  # a member of lab 0 with an allocation on its first grant
        "finance": finance,
    }


def _world() -> dict:
    """What `_build` returned, read back from a database it built earlier (--reuse)."""
    from django.db import connection

    from labgov.accounts.models import Lab, User
    from labgov.funding.models import FundingSource
    from labgov.runpod.models import RunpodAccount

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT (bucket_start AT TIME ZONE 'UTC')::date FROM runpod_billingrecord"
            " ORDER BY 1"
        )
        days = [row[0] for row in cursor.fetchall()]
    people = User.objects.in_bulk([f"person{0:04d}", f"person{LABS:04d}"], field_name="username")
    return {
        "accounts": list(RunpodAccount.objects.order_by("pk")),
        "days": days,
        "lab_admin": people["person0000"],
        "lab": Lab.objects.get(slug="lab-00"),
        "funding_source": FundingSource.objects.get(name="Grant 000"),
        "student": people[f"person{LABS:04d}"],
        "finance": User.objects.get(username="finance"),
    }


def _reusable(name: str, records: int):
    """The connection to a database an earlier `--keep` run left with `records` records, or
    None."""
    import psycopg
    from django.db import connections
    from django.db.utils import load_backend

    try:
        with psycopg.connect(ADMIN_URL.rsplit("/", 1)[0] + f"/{name}") as conn:
            (count,) = conn.execute("SELECT count(*) FROM runpod_billingrecord").fetchone()
    except psycopg.Error:
        return None
    if count != records // RESOURCES * RESOURCES:
        return None
    settings_dict = {**connections.settings["default"], "NAME": name}
    return load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, "default")


def _rollups(world: dict) -> dict:
    from django.db import transaction

    from labgov.runpod.attribution import usage_reconcile
    from labgov.usage.services import rollups_rebuild

    started = time.perf_counter()
    for account in world["accounts"]:
        with transaction.atomic():
            rollups_rebuild(account=account, days=world["days"])
            usage_reconcile(account=account, days=world["days"])
    seconds = time.perf_counter() - started
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    started = time.perf_counter()
    checked = _verify_sample()
    return {
        "rollup_seconds": round(seconds, 1),
        **checked,
        "verify_seconds": round(time.perf_counter() - started, 1),
    }


def _verify_sample() -> dict:
    """The rollups of a sample of allocations and days equal the sums of the raw records, and
    the rollups by lab the sums of the daily ones."""
    from django.db import connection

    with connection.cursor() as cursor:
        # One pass over the records, grouped, then a hash join on (allocation, day) with a
        # plain equality (no IS NOT DISTINCT FROM, which forces a nested loop): seconds at 10M.
        cursor.execute(
            """
            WITH raw AS (
                SELECT coalesce(b.allocation_id, 0) AS allocation_id,
                       (b.bucket_start AT TIME ZONE 'UTC')::date AS day,
                       sum(b.total_usd) AS total
                FROM runpod_billingrecord b
                WHERE mod(b.allocation_id, 97) = 1 OR b.allocation_id IS NULL
                GROUP BY 1, 2
            ),
            rolled AS (
                SELECT coalesce(d.allocation_id, 0) AS allocation_id, d.day,
                       sum(d.amount_usd) AS total
                FROM usage_dailyspend d
                WHERE mod(d.allocation_id, 97) = 1 OR d.allocation_id IS NULL
                GROUP BY 1, 2
            )
            SELECT count(*), count(*) FILTER (WHERE raw.total IS DISTINCT FROM rolled.total)
            FROM raw FULL JOIN rolled
              ON raw.allocation_id = rolled.allocation_id AND raw.day = rolled.day
            """
        )
        checked, mismatched = cursor.fetchone()
        # The daily rollups by lab, all of them, against the sums of the daily ones.
        cursor.execute(
            """
            WITH summed AS (
                SELECT account_id, lab_id, day, category, sum(amount_usd) AS total
                FROM usage_dailyspend
                WHERE allocation_id IS NOT NULL AND lab_id IS NOT NULL
                GROUP BY 1, 2, 3, 4
                HAVING sum(amount_usd) <> 0
            )
            SELECT count(*), count(*) FILTER (WHERE s.total IS DISTINCT FROM l.amount_usd)
            FROM summed s FULL JOIN usage_labdailyspend l
              ON s.account_id = l.account_id AND s.lab_id = l.lab_id AND s.day = l.day
             AND s.category = l.category
            """
        )
        lab_checked, lab_mismatched = cursor.fetchone()
        # The monthly rollups by funding source, all of them, against the monthly ones' sums.
        cursor.execute(
            """
            WITH summed AS (
                SELECT account_id, funding_source_id, month, sum(amount_usd) AS total
                FROM usage_monthlyspend
                GROUP BY 1, 2, 3
            )
            SELECT count(*), count(*) FILTER (WHERE s.total IS DISTINCT FROM m.amount_usd)
            FROM summed s FULL JOIN usage_sourcemonthlyspend m
              ON s.account_id = m.account_id AND s.month = m.month
             AND s.funding_source_id IS NOT DISTINCT FROM m.funding_source_id
            """
        )
        source_checked, source_mismatched = cursor.fetchone()
        cursor.execute(
            "SELECT (SELECT count(*) FROM runpod_billingrecord),"
            " (SELECT count(*) FROM usage_dailyspend), (SELECT count(*) FROM usage_monthlyspend),"
            " (SELECT count(*) FROM funding_ledgerentry)"
        )
        records, daily, monthly, ledger = cursor.fetchone()
    if mismatched or not checked:
        sys.exit(f"rollups differ from the raw records: {mismatched} of {checked} sampled")
    if lab_mismatched:
        sys.exit(f"rollups by lab differ from the daily ones: {lab_mismatched} of {lab_checked}")
    if source_mismatched:
        sys.exit(
            "rollups by funding source differ from the monthly ones: "
            f"{source_mismatched} of {source_checked}"
        )
    return {
        "billing_records": records,
        "daily_rollup_rows": daily,
        "monthly_rollup_rows": monthly,
        "ledger_entries": ledger,
        "rollup_sample_checked": checked,
        "lab_rollup_rows_checked": lab_checked,
        "source_rollup_rows_checked": source_checked,
    }


def _pages(world: dict) -> dict:
    from django.urls import reverse

    return {
        "lab admin: lab": (world["lab_admin"], reverse("dashboard:lab", args=[world["lab"].pk])),
        "lab admin: funding source": (
            world["lab_admin"],
            reverse("dashboard:funding", args=[world["funding_source"].pk]),
        ),
        "student": (world["student"], reverse("dashboard:me")),
        "finance": (world["finance"], reverse("dashboard:institution")),
        "lab admin: lab alerts": (
            world["lab_admin"],
            reverse("alerts:lab_panel", args=[world["lab"].pk]),
        ),
        "lab admin: home": (world["lab_admin"], reverse("home")),
        "finance: alerts": (world["finance"], reverse("alerts:list")),
    }


def _settle(sizes: dict) -> None:
    from django.db import connection

    for run in sizes.values():
        _use(run["connection"])
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE)")


def _evaluate(sizes: dict, rounds: int = 5) -> dict:
    """Alert evaluation of the institution: the first run (opens every alert and notifies),
    then the median of `rounds` more (what each sync and the daily run cost from then on)."""
    from labgov.accounts.models import Institution
    from labgov.alerts.evaluation import alerts_evaluate
    from labgov.alerts.models import Alert

    results = {}
    for size, run in sizes.items():
        _use(run["connection"])
        institution_id = Institution.objects.get(slug="bench").pk
        started = time.perf_counter()
        alerts_evaluate(institution_id=institution_id)
        first = (time.perf_counter() - started) * 1000
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            alerts_evaluate(institution_id=institution_id)
            times.append((time.perf_counter() - started) * 1000)
        results[size] = {
            "first_ms": round(first, 1),
            "median_ms": round(statistics.median(times), 1),
            "alerts": Alert.objects.unresolved().count(),
        }
    return results


def _measure(sizes: dict, requests: int) -> dict:
    """Time every page on every size. Requests alternate between the sizes (and which goes
    first), so a change in the machine's load touches both alike and the ratio stays fair."""
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    results: dict = {size: {} for size in sizes}
    names = list(_pages(next(iter(sizes.values()))["world"]))
    for name in names:
        clients, urls, times = {}, {}, {size: [] for size in sizes}
        for size, run in sizes.items():
            _use(run["connection"])
            user, urls[size] = _pages(run["world"])[name]
            clients[size] = Client(HTTP_HOST="localhost")
            clients[size].force_login(user)
            for _ in range(3):
                assert clients[size].get(urls[size]).status_code == 200, urls[size]
        order = list(sizes)
        for i in range(requests):
            for size in order if i % 2 == 0 else reversed(order):
                _use(sizes[size]["connection"])
                started = time.perf_counter()
                response = clients[size].get(urls[size])
                times[size].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
        for size, run in sizes.items():
            _use(run["connection"])
            with CaptureQueriesContext(run["connection"]) as queries:
                response = clients[size].get(urls[size])
            ordered = sorted(times[size])
            results[size][name] = {
                "url": urls[size],
                "median_ms": round(statistics.median(ordered), 1),
                "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
                "queries": len(queries.captured_queries),
                "bytes": len(response.content),
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="leave the databases behind")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="use the databases an earlier --keep run left, when they hold the same sizes "
        "(implies --keep)",
    )
    args = parser.parse_args()

    _setup_django()
    runs: dict = {}
    databases = {args.small: f"{DB}_small", args.records: DB}
    try:
        for size, name in databases.items():
            connection = args.reuse and _reusable(name, size)
            if connection:
                _use(connection)
                world = _world()
                started = time.perf_counter()
                data = {**_verify_sample(), "reused": True}
                data["verify_seconds"] = round(time.perf_counter() - started, 1)
                print(f"{size:,} records: reused {data}", flush=True)
            else:
                connection = _database(name)
                _use(connection)
                started = time.perf_counter()
                world = _build(size)
                data = _rollups(world)
                data["build_seconds"] = round(time.perf_counter() - started, 1)
                print(f"{size:,} records: built in {data['build_seconds']} s {data}", flush=True)
            runs[size] = {"connection": connection, "world": world, "data": data}
        load_before = os.getloadavg()[0]
        # Alerts first, so their pages have alerts to show; then the database is vacuumed,
        # as autovacuum would soon do, so it does not do so in the middle of the timings.
        evaluation = _evaluate(runs)
        _settle(runs)
        pages = _measure(runs, args.requests)
        load_after = os.getloadavg()[0]
    finally:
        for run in runs.values():
            run["connection"].close()
        if not (args.keep or args.reuse):
            for name in databases.values():
                _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    runs = {size: {"data": run["data"], "pages": pages[size]} for size, run in runs.items()}

    small, large = runs[args.small]["pages"], runs[args.records]["pages"]
    result = {
        "records": args.records,
        "small_records": args.small,
        "requests": args.requests,
        "funding_sources": SOURCES,
        "people": PEOPLE,
        # Other work on the machine slows every page alike; the ratio is immune to it.
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
        "runs": {str(k): v for k, v in runs.items()},
        "alert_evaluation": {str(k): v for k, v in evaluation.items()},
        "pages": {
            name: {
                "median_ms": large[name]["median_ms"],
                "p95_ms": large[name]["p95_ms"],
                "queries": large[name]["queries"],
                "small_median_ms": small[name]["median_ms"],
                "small_p95_ms": small[name]["p95_ms"],
                "small_queries": small[name]["queries"],
                "ratio": round(large[name]["median_ms"] / small[name]["median_ms"], 2),
            }
            for name in large
        },
    }
    header = (
        f"{'page':<28}{'median ms':>10}{'p95 ms':>9}{'queries':>9}"
        f"{'10k median':>12}{'10k p95':>9}{'10k q':>7}{'ratio':>7}"
    )
    print(
        f"\n{args.records:,} records vs {args.small:,}, {args.requests} requests each; "
        f"load average {load_before:.2f} before, {load_after:.2f} after"
    )
    print(header)
    for name, p in result["pages"].items():
        print(
            f"{name:<28}{p['median_ms']:>10}{p['p95_ms']:>9}{p['queries']:>9}"
            f"{p['small_median_ms']:>12}{p['small_p95_ms']:>9}{p['small_queries']:>7}"
            f"{p['ratio']:>7}"
        )
    for size, e in evaluation.items():
        print(
            f"alert evaluation at {size:,} records: first {e['first_ms']} ms "
            f"(opening {e['alerts']} alerts), then median {e['median_ms']} ms"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"dashboard-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
