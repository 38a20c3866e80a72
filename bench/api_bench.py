"""API benchmark: the spend list (`/api/v1/spend/daily/`) through the API, in pages of 100,
over 1 million billing records and over 10 thousand, in PostgreSQL.

    .venv/bin/python bench/api_bench.py [--records 1000000] [--small 10000] [--requests 50]

Builds both sizes exactly as bench/dashboard_bench.py does (its functions: one institution,
1,000 people, 1,000 resources, hourly billing records generated in the database, rollups by
the sync's own functions), in databases of its own (`labgov_apibench`, `labgov_apibench_small`,
created and dropped). Then, per size and per caller (finance, who sees the whole institution;
a student, who sees their own spend), it requests pages of 100 with a personal token, in
process with Django's test Client, DEBUG off: the first page, and pages that start at cursors
spread evenly over the whole list (a keyset page costs the same wherever it starts). Requests
alternate between the sizes so that the machine's load weighs on both alike. Prints median
and 95th percentile per page, query counts and the ratio of the medians (target < 1.5), and
writes JSON to bench/results/.
"""

import argparse
import base64
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import dashboard_bench as dash  # noqa: E402 - after the path

DB = "labgov_apibench"
URL = "/api/v1/spend/daily/?page_size=100"


def _cursor(row) -> str:
    token = json.dumps({"o": "day", "v": [row[0].isoformat(), str(row[1])]}, separators=(",", ":"))
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def _urls(user, requests: int) -> list[str]:
    """The first page, then pages starting at rows spread evenly over what the user sees."""
    from labgov.accounts import access
    from labgov.usage.models import DailySpend

    rows = list(
        DailySpend.objects.filter(access.spend_q(user))
        .order_by("day", "id")
        .values_list("day", "id")
    )
    step = max(1, len(rows) // requests)
    starts = rows[: len(rows) - 100 : step][: requests - 1]
    return [URL] + [f"{URL}&cursor={_cursor(row)}" for row in starts], len(rows)


def _token(user) -> str:
    from labgov.api.services import token_create

    return token_create(actor=user, name="bench", scope="read", days=1)[1]


def _measure(runs: dict, requests: int) -> dict:
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    results: dict = {size: {} for size in runs}
    for caller in ("finance", "student"):
        plans = {}
        for size, run in runs.items():
            dash._use(run["connection"])
            user = run["world"][caller]
            urls, rows = _urls(user, requests)
            client = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {_token(user)}")
            for url in urls[:3]:
                assert client.get(url).status_code == 200
            plans[size] = (client, urls, rows)
        times = {size: [] for size in runs}
        order = list(runs)
        for i in range(requests):
            for size in order if i % 2 == 0 else reversed(order):
                dash._use(runs[size]["connection"])
                client, urls, _rows = plans[size]
                started = time.perf_counter()
                response = client.get(urls[i % len(urls)])
                times[size].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
                assert len(response.json()["results"]) == 100 or i % len(urls) == len(urls) - 1
        for size, run in runs.items():
            dash._use(run["connection"])
            client, urls, rows = plans[size]
            with CaptureQueriesContext(run["connection"]) as queries:
                client.get(urls[-1])
            ordered = sorted(times[size])
            results[size][caller] = {
                "rows": rows,
                "median_ms": round(statistics.median(ordered), 1),
                "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 1),
                "queries": len(queries.captured_queries),
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="leave the databases behind")
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{DB}"
    dash.DB = DB
    dash._setup_django()
    runs: dict = {}
    databases = {args.small: f"{DB}_small", args.records: DB}
    try:
        for size, name in databases.items():
            connection = dash._database(name)
            dash._use(connection)
            started = time.perf_counter()
            world = dash._build(size)
            data = dash._rollups(world)
            data["build_seconds"] = round(time.perf_counter() - started, 1)
            print(f"{size:,} records: built in {data['build_seconds']} s", flush=True)
            runs[size] = {"connection": connection, "world": world, "data": data}
        dash._settle(runs)
        load_before = os.getloadavg()[0]
        measured = _measure(runs, args.requests)
        load_after = os.getloadavg()[0]
    finally:
        for run in runs.values():
            run["connection"].close()
        if not args.keep:
            for name in databases.values():
                dash._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    small, large = measured[args.small], measured[args.records]
    result = {
        "records": args.records,
        "small_records": args.small,
        "requests": args.requests,
        "page_size": 100,
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
        "callers": {
            caller: {
                **{f"large_{k}": v for k, v in large[caller].items()},
                **{f"small_{k}": v for k, v in small[caller].items()},
                "ratio": round(large[caller]["median_ms"] / small[caller]["median_ms"], 2),
            }
            for caller in large
        },
    }
    print(
        f"\nspend list, pages of 100: {args.records:,} records vs {args.small:,}, "
        f"{args.requests} requests each; load average {load_before:.2f} before, "
        f"{load_after:.2f} after"
    )
    print(
        f"{'caller':<10}{'rows':>9}{'median ms':>11}{'p95 ms':>9}{'queries':>9}"
        f"{'10k rows':>10}{'10k median':>12}{'10k p95':>9}{'ratio':>7}"
    )
    for caller, c in result["callers"].items():
        print(
            f"{caller:<10}{c['large_rows']:>9}{c['large_median_ms']:>11}{c['large_p95_ms']:>9}"
            f"{c['large_queries']:>9}{c['small_rows']:>10}{c['small_median_ms']:>12}"
            f"{c['small_p95_ms']:>9}{c['ratio']:>7}"
        )
    out = ROOT / "results"
    out.mkdir(exist_ok=True)
    path = out / f"api-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {path.relative_to(ROOT.parent)}")


if __name__ == "__main__":
    main()
