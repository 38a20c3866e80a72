"""Export benchmark: a month of a million billing records exported as CSV and XLSX by the
export jobs (labgov.exports.services.export_job_run, the path a period this large takes),
against PostgreSQL's own `COPY (…) TO STDOUT` of the same query, in the same run.

    .venv/bin/python bench/export_bench.py [--records 1000000] [--keep] [--skip-xlsx]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops the
database `labgov_exportbench` (`--keep` leaves it). Builds one institution with 20 labs,
200 funding sources, 1,000 people with an allocation each and enough resources that hourly
records for October 2026 (744 hours) reach `--records` (one resource in twenty unattributed,
one name in fifty beginning with `=`, so the formula guard has work to do), generated in the
database with generate_series.

Each measurement runs in its own child process, so its peak resident memory (ru_maxrss) is its
own: COPY (the query `period_records` builds, bound by psycopg, streamed and discarded), the
CSV job and the XLSX job writing their files, and the XLSX job's floor: a bare xlsxwriter
constant-memory loop writing as many rows of the same cells (`_bare_xlsx`). Targets: CSV
rows/s ≥ 0.5 × COPY's; peak memory under 200 MB for both; the XLSX job near its floor.
Prints a table and writes JSON to bench/results/.
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

ROOT = Path(__file__).resolve().parent.parent
DB = "labgov_exportbench"
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
MONTH = dt.date(2026, 10, 1)
HOURS = 744
LABS, SOURCES, PEOPLE = 20, 200, 1000


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
        LABGOV_EXPORT_DIR=os.environ.get("LABGOV_EXPORT_DIR", str(ROOT / "var" / DB)),
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False  # no query log, as in production


def _build(records: int) -> None:
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.db import connection

    from labgov.accounts.models import Institution, Lab, Membership, Role, User
    from labgov.core.crypto import encrypt
    from labgov.funding.models import Allocation, FundingSource
    from labgov.runpod.models import Resource, RunpodAccount
    from labgov.runpod.partitions import ensure_months

    call_command("migrate", verbosity=0, interactive=False)
    nobody = make_password(None)
    institution = Institution.objects.create(name="Bench University", slug="bench")
    labs = Lab.objects.bulk_create(
        Lab(institution=institution, name=f"Lab {i:02d}", slug=f"lab-{i:02d}") for i in range(LABS)
    )
    people = User.objects.bulk_create(
        User(username=f"person{i:04d}", password=nobody) for i in range(PEOPLE)
    )
    finance = User.objects.create(username="finance", password=nobody)
    Membership.objects.create(
        user=finance, institution=institution, role=Role.FINANCE, start_date=dt.date(2025, 1, 1)
    )
    sources = FundingSource.objects.bulk_create(
        FundingSource(
            institution=institution,
            lab=labs[i % LABS],
            name=f"Grant {i:03d}",
            award_number=f"AWD-{i:05d}",
            cost_center=f"CC-{i % 37:02d}",
            start_date=dt.date(2026, 1, 1),
            end_date=dt.date(2027, 12, 31),
            amount_usd=50000,
        )
        for i in range(SOURCES)
    )
    allocations = Allocation.objects.bulk_create(
        Allocation(
            funding_source=sources[i % SOURCES],
            user=person,
            cap_usd=5000,
            start_date=dt.date(2026, 1, 1),
            end_date=dt.date(2027, 12, 31),
        )
        for i, person in enumerate(people)
    )
    account = RunpodAccount.objects.create(
        institution=institution,
        name="Main",
        api_key_encrypted=encrypt("rp_bench_key_0000"),
        api_key_last4="0000",
    )
    count = -(-records // HOURS)
    Resource.objects.bulk_create(
        (
            Resource(
                account=account,
                kind="pod" if r % 5 else "network_volume",
                runpod_id=f"res-{r:05d}",
                name=f"=cmd-{r}" if r % 50 == 0 else f"train-{r:05d}",
                current_allocation=None if r % 20 == 19 else allocations[r % PEOPLE],
            )
            for r in range(count)
        ),
        batch_size=1000,
    )
    start = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    # On PostgreSQL each month of billing is a partition that must exist before its rows.
    ensure_months(start, start + dt.timedelta(hours=HOURS - 1), trust_cache=False)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runpod_billingrecord (resource_id, kind, bucket_start, bucket_end,
                total_usd, gpu_usd, cpu_usd, disk_usd, storage_standard_usd,
                storage_high_performance_usd, fee_usd, networking_usd, allocation_id, synced_at)
            SELECT r.id, r.kind, h, h + interval '1 hour',
                   a.gpu + 0.04 + 0.0136986301, a.gpu, 0.04, 0.0136986301, 0, 0, 0, 0,
                   r.current_allocation_id, now()
            FROM (SELECT * FROM runpod_resource ORDER BY id LIMIT %s) r
            CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz, interval '1 hour') h
            CROSS JOIN LATERAL (
                SELECT (1.49 + ((r.id * 7 + extract(epoch FROM h)::bigint / 3600) %% 40)
                        / 100.0)::numeric(20, 10) AS gpu
            ) a
            """,
            [count, start, start + dt.timedelta(hours=HOURS - 1)],
        )
        cursor.execute(
            # A row's ctid is unique within its month's partition only: with its table.
            "DELETE FROM runpod_billingrecord WHERE (tableoid, ctid) IN (SELECT tableoid, ctid "
            "FROM runpod_billingrecord ORDER BY resource_id DESC, bucket_start DESC "
            "LIMIT %s)",
            [count * HOURS - records],
        )
        cursor.execute("ANALYZE")


def _queryset():
    from labgov.accounts.models import Institution, User
    from labgov.exports import source

    finance = User.objects.get(username="finance")
    institution = Institution.objects.get(slug="bench")
    return (
        finance,
        institution,
        source.period_records(finance, institution=institution, month=MONTH),
    )


def _bare_xlsx(queryset) -> tuple[int, int]:
    """The floor for the XLSX job: xlsxwriter in constant-memory mode writing as many rows
    of the same shape (RECORD_COLUMNS: its text cells as strings, its amounts as numbers in
    the exact format) with nothing else in the loop. The cells are the period's first
    thousand records as the job reads them, converted beforehand, written over and over."""
    import tempfile

    import xlsxwriter

    from labgov.exports import source

    total = queryset.count()
    kinds = [kind for _, _, kind in source.RECORD_COLUMNS]
    texts = [i for i, kind in enumerate(kinds) if kind == "text"]
    numbers = [i for i, kind in enumerate(kinds) if kind != "text"]
    sample = [
        (
            ["" if values[i] is None else str(values[i]) for i in texts],
            [0.0 if values[i] is None else float(values[i]) for i in numbers],
        )
        for values in source.record_rows(queryset[:1000])
    ]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "bare.xlsx"
        book = xlsxwriter.Workbook(
            str(path), {"constant_memory": True, "strings_to_formulas": False}
        )
        exact = book.add_format({"num_format": '"$"#,##0.0000000000'})
        sheet = book.add_worksheet("Billing records")
        write_string, write_number = sheet.write_string, sheet.write_number
        for row in range(1, total + 1):
            strings, amounts = sample[row % len(sample)]
            for col, text in zip(texts, strings, strict=True):
                write_string(row, col, text)
            for col, amount in zip(numbers, amounts, strict=True):
                write_number(row, col, amount, exact)
        book.close()
        return total, path.stat().st_size


def _measure(what: str) -> dict:
    """Run in a child: one measurement, with this process's own peak memory."""
    _setup_django()
    from django.db import connection

    from labgov.exports.models import ExportJob
    from labgov.exports.services import export_job_run, job_path

    finance, institution, queryset = _queryset()
    started = time.perf_counter()
    if what == "copy":
        sql, params = queryset.query.sql_with_params()
        rows = size = 0
        connection.ensure_connection()
        statement = f"COPY ({sql}) TO STDOUT (FORMAT csv, HEADER)"
        with connection.connection.cursor() as cursor, cursor.copy(statement, params) as copy:
            for data in copy:
                size += len(data)
                rows += bytes(data).count(b"\n")
        rows -= 1
    elif what == "xlsx_bare":
        rows, size = _bare_xlsx(queryset)
    else:
        job = ExportJob.objects.create(
            institution=institution,
            requested_by=finance,
            kind=f"records_{what}",
            month=MONTH,
            download_name=f"bench.{what}",
        )
        export_job_run(job.pk)
        job.refresh_from_db()
        if job.status != "done":
            sys.exit(f"the {what} job failed: {job.error}")
        rows, path = job.progress_done, job_path(job)
        size = path.stat().st_size
        path.unlink()
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rows": rows, "bytes": size, "seconds": round(seconds, 2), "peak_mb": round(peak_mb)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--skip-xlsx", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure)))
        return

    _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    _admin(f"CREATE DATABASE {DB}")
    try:
        started = time.perf_counter()
        _setup_django()
        _build(args.records)
        from django.db import connections

        connections.close_all()
        print(f"built {args.records:,} records in {time.perf_counter() - started:.0f} s")
        results = {}
        for what in ["copy", "csv", "copy"] + ([] if args.skip_xlsx else ["xlsx", "xlsx_bare"]):
            out = subprocess.run(
                [sys.executable, __file__, "--measure", what],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            result = json.loads(out.strip().splitlines()[-1])
            result["rows_per_s"] = round(result["rows"] / result["seconds"])
            # COPY is measured before and after the CSV; the faster of the two counts.
            if what in results and results[what]["seconds"] <= result["seconds"]:
                continue
            results[what] = result
        results["csv"]["vs_copy"] = round(
            results["csv"]["rows_per_s"] / results["copy"]["rows_per_s"], 2
        )
        if "xlsx_bare" in results:
            results["xlsx"]["vs_bare_loop"] = round(
                results["xlsx"]["rows_per_s"] / results["xlsx_bare"]["rows_per_s"], 2
            )
        print(f"{'':9} {'rows':>10} {'seconds':>8} {'rows/s':>9} {'MB out':>7} {'peak MB':>8}")
        for what, r in results.items():
            print(
                f"{what:9} {r['rows']:>10,} {r['seconds']:>8} {r['rows_per_s']:>9,} "
                f"{r['bytes'] / 1e6:>7.0f} {r['peak_mb']:>8}"
            )
        print(
            f"CSV rate ÷ COPY rate: {results['csv']['vs_copy']} (target ≥ 0.5); "
            "peak memory target < 200 MB"
        )
        if "xlsx_bare" in results:
            print(
                f"XLSX job rate ÷ a bare xlsxwriter loop's of the same rows and cells: "
                f"{results['xlsx']['vs_bare_loop']}"
            )
        out_dir = ROOT / "bench" / "results"
        out_dir.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        (out_dir / f"export_bench-{stamp}.json").write_text(
            json.dumps({"records": args.records, "results": results}, indent=2)
        )
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
