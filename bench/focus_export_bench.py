"""FOCUS export benchmark: a month's FOCUS 1.2 dataset of a million rows
(labgov.exports.focus.dataset, what the page and `manage.py export_focus` stream), against
PostgreSQL's own `COPY (…) TO STDOUT` of the same rows in plain form, in the same run.

    .venv/bin/python bench/focus_export_bench.py [--rows 1000000] [--keep]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops the
database `labgov_focusbench` (`--keep` leaves it). The world is export_bench's (one
institution, 20 labs, 200 funding sources, 1,000 people with an allocation each, one resource
in twenty unattributed, one name in fifty beginning with `=`), with hourly records of October
2026 whose three components (GPU, CPU, disk) are each a FOCUS row: `--rows` ÷ 3 records.

Each measurement runs in a child process of its own, so its peak resident memory (ru_maxrss)
is its own; the COPYs are measured before and after the export, the faster counts:
- `copy`: PostgreSQL's COPY of the dataset's own SELECT (the same rows and text, without the
  formula guard, the header or the adjustments), as export_bench compares with the query the
  export runs: the target's baseline;
- `copy_plain`: COPY of the same rows in plain form (each record once per non-zero component:
  its columns, the component's name and amount, no FOCUS texts), for scale;
- `focus`: the dataset as the download writes it (focus.dataset: COPY of the SELECT through
  the formula guard, then the invoices' adjustments), streamed and discarded.
Targets: FOCUS rows/s ≥ 0.5 × `copy`'s; peak memory under 200 MB. Prints a table and writes
JSON to bench/results/.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_bench as world  # noqa: E402 (the same world, in a database of our own)

ROOT = world.ROOT
world.DB = "labgov_focusbench"
COMPONENTS_PER_RECORD = 3


def _plain_sql(institution) -> tuple[str, list]:
    """The same rows as the dataset, plainly: each record once per non-zero component."""
    from labgov.exports.focus import period_of

    period = period_of(institution, world.MONTH)
    start, end = period.start, period.end
    sql = """
        SELECT b.resource_id, b.bucket_start, b.bucket_end, b.kind, b.allocation_id,
               b.total_usd, c.name, c.amount
        FROM runpod_billingrecord b
        JOIN runpod_resource r ON r.id = b.resource_id
        JOIN runpod_runpodaccount a ON a.id = r.account_id
        CROSS JOIN LATERAL (VALUES ('gpu', b.gpu_usd), ('cpu', b.cpu_usd), ('disk', b.disk_usd),
            ('storage_standard', b.storage_standard_usd),
            ('storage_high_performance', b.storage_high_performance_usd),
            ('fee', b.fee_usd), ('networking', b.networking_usd),
            ('other', b.total_usd - (b.gpu_usd + b.cpu_usd + b.disk_usd
                + b.storage_standard_usd + b.storage_high_performance_usd + b.fee_usd
                + b.networking_usd))) AS c(name, amount)
        WHERE a.institution_id = %s AND b.bucket_start >= %s AND b.bucket_start < %s
          AND c.amount <> 0
        ORDER BY b.resource_id, b.bucket_start
    """
    return sql, [institution.pk, start, end]


def _measure(what: str) -> dict:
    """Run in a child: one measurement, with this process's own peak memory."""
    world._setup_django()
    from django.db import connection

    from labgov.accounts.models import Institution
    from labgov.exports import focus

    institution = Institution.objects.get(slug="bench")
    started = time.perf_counter()
    rows = size = 0
    if what in ("copy", "copy_plain"):
        if what == "copy":
            sql, params = focus._charges_sql(focus.period_of(institution, world.MONTH))
        else:
            sql, params = _plain_sql(institution)
        connection.ensure_connection()
        statement = f"COPY ({sql}) TO STDOUT (FORMAT csv, HEADER)"
        with connection.connection.cursor() as cursor, cursor.copy(statement, params) as copy:
            for data in copy:
                size += len(data)
                rows += bytes(data).count(b"\n")
    else:
        for piece in focus.dataset(institution, world.MONTH):
            size += len(piece)
            rows += piece.count(b"\n")
    rows -= 1  # the header
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rows": rows, "bytes": size, "seconds": round(seconds, 2), "peak_mb": round(peak_mb)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure)))
        return

    records = -(-args.rows // COMPONENTS_PER_RECORD)
    world._admin(f"DROP DATABASE IF EXISTS {world.DB} WITH (FORCE)")
    world._admin(f"CREATE DATABASE {world.DB}")
    try:
        started = time.perf_counter()
        world._setup_django()
        world._build(records)
        from django.db import connections

        connections.close_all()
        print(f"built {records:,} records in {time.perf_counter() - started:.0f} s")
        results = {}
        for what in ["copy", "copy_plain", "focus", "copy", "copy_plain"]:
            out = subprocess.run(
                [sys.executable, __file__, "--measure", what],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            result = json.loads(out.strip().splitlines()[-1])
            result["rows_per_s"] = round(result["rows"] / result["seconds"])
            # COPY is measured before and after the export; the faster of the two counts.
            if what in results and results[what]["seconds"] <= result["seconds"]:
                continue
            results[what] = result
        if not results["focus"]["rows"] == results["copy"]["rows"] == results["copy_plain"]["rows"]:
            sys.exit(f"row counts differ: {results}")
        for baseline in ("copy", "copy_plain"):
            results["focus"][f"vs_{baseline}"] = round(
                results["focus"]["rows_per_s"] / results[baseline]["rows_per_s"], 2
            )
        print(f"{'':6} {'rows':>10} {'seconds':>8} {'rows/s':>9} {'MB out':>7} {'peak MB':>8}")
        for what, r in results.items():
            print(
                f"{what:10} {r['rows']:>10,} {r['seconds']:>8} {r['rows_per_s']:>9,} "
                f"{r['bytes'] / 1e6:>7.0f} {r['peak_mb']:>8}"
            )
        print(
            f"FOCUS rate ÷ COPY of the same SELECT: {results['focus']['vs_copy']} (target ≥ 0.5);"
            f" ÷ COPY of the plain rows: {results['focus']['vs_copy_plain']}; "
            "peak memory target < 200 MB"
        )
        out_dir = ROOT / "bench" / "results"
        out_dir.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        (out_dir / f"focus_export_bench-{stamp}.json").write_text(
            json.dumps({"rows": args.rows, "records": records, "results": results}, indent=2)
        )
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            world._admin(f"DROP DATABASE IF EXISTS {world.DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
