"""FOCUS import benchmark: a month's FOCUS file of a million rows imported into a FOCUS billing
source (labgov.runpod.focus.focus_import, the path of the page and of `manage.py import_focus`).

    .venv/bin/python bench/focus_import_bench.py [--rows 1000000] [--keep]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops the database
`labgov_h27i_focusbench` (`--keep` leaves it). Writes a FOCUS 1.2-shaped CSV for October 2026 under
var/ (hourly rows of enough resources to reach `--rows`, each with a ResourceId, a name, a
sub-account and Tags, one resource in three tagged with a cost center a tag rule pays for),
then, each in its own child process so its peak resident memory (ru_maxrss) is its own:
the first import (every row checked, COPY'd, summed, upserted, attributed, posted to the ledger
and rolled up, in one transaction) and the same file again (nothing changes). Targets: ≥ 50,000
rows/s and < 300 MB. Prints a table (with the CPU seconds of this process and of its
PostgreSQL backend, which a loaded machine does not inflate as it does the wall clock) and
writes JSON to bench/results/.
"""

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procs  # noqa: E402 - CPU from /proc, shared by the benchmarks

ROOT = Path(__file__).resolve().parent.parent
DB = "labgov_h27i_focusbench"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
START = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
HOURS = 744
HEADER = (
    "ProviderName,BillingAccountId,SubAccountId,SubAccountName,BillingPeriodStart,"
    "BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,ChargeClass,BilledCost,"
    "EffectiveCost,ListCost,BillingCurrency,PricingQuantity,ConsumedQuantity,ServiceName,"
    "ServiceCategory,ServiceSubcategory,ResourceId,ResourceName,ResourceType,RegionId,InvoiceId,Tags"
)


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def _setup_django() -> None:
    os.environ.update(
        DEBUG="1",
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{DB}",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="labgov.settings",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False  # no query log, as in production


def _write_file(path: Path, rows: int) -> int:
    resources = -(-rows // HOURS)
    bps, bpe = "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"
    written = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(HEADER + "\n")
        hours = [
            (
                (START + dt.timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                (START + dt.timedelta(hours=h + 1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
            for h in range(HOURS)
        ]
        for r in range(resources):
            sub = f"2000000000{r % 20:02d}"
            rid = f"arn:aws:ec2:us-east-1:{sub}:instance/i-{r:017x}"
            tags = (
                '"{""CostCenter"":""cc-1042"",""team"":""vision""}"'
                if r % 3 == 0
                else f'"{{""CostCenter"":""cc-{r % 97}""}}"'
            )
            category = "Compute" if r % 5 else "Storage"
            fixed = (
                f",{category},Virtual Machines,{rid},train-{r},Instance,us-east-1,INV-1,{tags}\n"
            )
            head = f"AWS,100000000001,{sub},lab-{r % 20},{bps},{bpe},"
            for h, (cps, cpe) in enumerate(hours):
                if written == rows:
                    return written
                cost = f"{(r * 7 + h) % 1000 / 997:.10f}"
                f.write(f"{head}{cps},{cpe},Usage,,{cost},{cost},{cost},USD,1,1,AmazonEC2{fixed}")
                written += 1
    return written


def _build() -> int:
    from django.core.management import call_command

    from labgov.accounts.models import Institution, Lab, Membership, Role, User
    from labgov.funding.models import Allocation, FundingSource
    from labgov.runpod.focus import source_create
    from labgov.runpod.models import AttributionRule

    call_command("migrate", verbosity=0, interactive=False)
    institution = Institution.objects.create(name="Bench University", slug="bench")
    lab = Lab.objects.create(institution=institution, name="Vision", slug="vision")
    admin = User.objects.create(username="admin")
    Membership.objects.create(
        user=admin, role=Role.INSTITUTION_ADMIN, institution=institution, lab=None,
        start_date=dt.date(2026, 1, 1),
    )  # fmt: skip
    member = User.objects.create(username="member")
    source = FundingSource.objects.create(
        lab=lab, institution=institution, name="Grant", award_number="AWD-1", sponsor="NSF",
        cost_center="CC-1042", start_date=dt.date(2026, 1, 1), end_date=dt.date(2027, 12, 31),
        amount_usd=10**7,
    )  # fmt: skip
    allocation = Allocation.objects.create(
        funding_source=source, user=member, cap_usd=10**6,
        start_date=dt.date(2026, 1, 1), end_date=dt.date(2027, 12, 31),
    )  # fmt: skip
    from django.db import transaction

    with transaction.atomic():
        account = source_create(
            actor=admin, institution=institution, name="AWS research", provider="AWS"
        )
    AttributionRule.objects.create(
        lab=lab, account=account, kind=AttributionRule.Kind.TAG, pattern="CostCenter=cc-1042",
        allocation=allocation, starts_at=START,
    )  # fmt: skip
    return account.pk


def _measure(path: str, account_id: int) -> dict:
    _setup_django()
    import time_machine

    from labgov.accounts.models import User
    from labgov.runpod.focus import focus_import
    from labgov.runpod.models import RunpodAccount

    admin = User.objects.get(username="admin")
    account = RunpodAccount.objects.get(pk=account_id)
    from django.db import connection

    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    with time_machine.travel(dt.datetime(2026, 11, 10, tzinfo=dt.UTC)):
        started, client, server = time.perf_counter(), _cpu_self(), procs.process_cpu(backend)
        with open(path, "rb") as stream:
            result = focus_import(actor=admin, account=account, stream=stream, file_name="bench")
        seconds = time.perf_counter() - started
        client, server = _cpu_self() - client, procs.process_cpu(backend) - server
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = result.file.rows
    return {
        "seconds": round(seconds, 2),
        "rows": rows,
        "records": result.file.records,
        "unchanged": result.unchanged,
        "rows_per_s": round(rows / seconds),
        "peak_mb": round(peak_mb, 1),
        # CPU, not wall time: on a shared machine the wall clock measures the neighbours.
        "cpu_python_s": round(client, 2),
        "cpu_postgres_s": round(server, 2),
        "cpu_s_per_100k_rows": round((client + server) * 100_000 / rows, 2),
        "rows_per_cpu_s": round(rows / (client + server)) if client + server else None,
    }


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.child[0], int(args.child[1]))))
        return
    _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    _admin(f"CREATE DATABASE {DB}")
    try:
        path = ROOT / "var" / "focus_bench.csv"
        path.parent.mkdir(exist_ok=True)
        started = time.perf_counter()
        rows = _write_file(path, args.rows)
        size_mb = path.stat().st_size / 2**20
        print(f"wrote {rows} rows ({size_mb:.0f} MB) in {time.perf_counter() - started:.1f} s")
        _setup_django()
        account_id = _build()
        from django.db import connections

        connections.close_all()
        results = {}
        for label in ("first import", "same file again"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(path), str(account_id)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            results[label] = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{'run':<18}{'rows':>10}{'records':>10}{'seconds':>9}{'rows/s':>10}{'peak MB':>9}"
            f"{'CPU py':>8}{'CPU pg':>8}{'CPU s/100k':>11}{'rows/CPU s':>11}"
        )
        for label, r in results.items():
            print(
                f"{label:<18}{r['rows']:>10}{r['records']:>10}{r['seconds']:>9}"
                f"{r['rows_per_s']:>10}{r['peak_mb']:>9}{r['cpu_python_s']:>8}"
                f"{r['cpu_postgres_s']:>8}{r['cpu_s_per_100k_rows']:>11}{r['rows_per_cpu_s']:>11}"
            )
        print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
        first = results["first import"]
        verdict = first["rows_per_s"] >= 50_000 and first["peak_mb"] < 300
        print("targets (≥ 50,000 rows/s, < 300 MB):", "met" if verdict else "NOT met")
        out_dir = ROOT / "bench" / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        (out_dir / f"focus_import_{stamp}.json").write_text(
            json.dumps({"rows": rows, "file_mb": round(size_mb, 1), **results}, indent=2)
        )
        path.unlink()
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
