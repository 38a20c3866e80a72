"""Invoicing benchmark: finance's month end for an institution with 200 funding sources over
1 million billing records (the dashboard bench's world), in PostgreSQL.

    .venv/bin/python bench/invoicing_bench.py [--records 1000000] [--requests 30] [--keep|--reuse]

Builds the world with bench/dashboard_bench.py's own `_build` and rollups (20 labs, 200
funding sources, 1,000 people and allocations, 1,000 resources on two accounts, hourly
records ending at the last full hour) in `labgov_h22c_bench` (`--db` to change), then, for
the last full month: generates its drafts (once fresh, once again), opens the invoice period
page as finance (`--requests` timed requests after 3 warm-ups, DEBUG off; the query count
from one more) with current drafts, then after a re-assignment has made one stale, and
closes the month (regenerate, issue 200 invoices, freeze). Goal: period page median
<= 150 ms with a fixed query count, generation and close <= 5 s. Writes JSON to
bench/results/.
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
sys.path.insert(0, str(ROOT / "bench"))

import dashboard_bench as dash  # noqa: E402  (its world, built the same way)


def _timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, round(time.perf_counter() - started, 2)


def _page(client, url, requests: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(3):
        assert client.get(url).status_code == 200
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        assert client.get(url).status_code == 200
        times.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 1),
        "queries": len(queries.captured_queries),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--db", default="labgov_h22c_bench")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    dash.DB = args.db
    dash._setup_django()

    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    connection = args.reuse and dash._reusable(args.db, args.records)
    if connection:
        dash._use(connection)
        world = dash._world()
        built = {"reused": True}
    else:
        connection = dash._database(args.db)
        dash._use(connection)
        started = time.perf_counter()
        world = dash._build(args.records)
        built = {**dash._rollups(world), "build_seconds": round(time.perf_counter() - started)}
    print(f"world: {built}", flush=True)

    from labgov.accounts.models import Institution
    from labgov.funding.models import Allocation
    from labgov.invoicing.models import Invoice
    from labgov.invoicing.services import invoices_generate, period_close_checked
    from labgov.runpod.models import Resource
    from labgov.runpod.services import resource_assign

    finance = world["finance"]
    institution = Institution.objects.get(slug="bench")
    now = timezone.now()
    month = (now.date().replace(day=1) - dt.timedelta(days=1)).replace(day=1)
    result: dict = {"records": args.records, "month": f"{month:%Y-%m}", "world": built}
    try:
        Invoice.objects.filter(institution=institution, month=month).delete()
        drafts, result["generate_first_s"] = _timed(
            lambda: invoices_generate(actor=finance, institution=institution, month=month)
        )
        result["drafts"] = len(drafts)
        _, result["generate_again_s"] = _timed(
            lambda: invoices_generate(actor=finance, institution=institution, month=month)
        )
        client = Client(HTTP_HOST="localhost")
        client.force_login(finance)
        url = reverse("invoicing:period", args=[institution.pk, month.year, month.month])
        result["period_page_current"] = _page(client, url, args.requests)
        print(f"period page, drafts current: {result['period_page_current']}", flush=True)

        # A re-assignment from the resource's first hour: one draft goes stale, and the page
        # says so (its first load computes the fresh lines, the others read them cached).
        pod = Resource.objects.filter(
            account__institution=institution, kind="pod", current_allocation__isnull=True
        ).first()
        allocation = Allocation.objects.filter(funding_source__institution=institution).first()
        _, result["reassign_s"] = _timed(
            lambda: resource_assign(actor=None, resource=pod, allocation=allocation)
        )
        started = time.perf_counter()
        body = client.get(url).content.decode()
        result["period_page_stale_first_ms"] = round((time.perf_counter() - started) * 1000, 1)
        result["stale_shown"] = 'id="stale-drafts"' in body
        result["period_page_stale"] = _page(client, url, args.requests)
        print(f"period page, one draft stale: {result['period_page_stale']}", flush=True)

        _, result["close_s"] = _timed(
            lambda: period_close_checked(
                actor=finance,
                institution=institution,
                month=month,
                acceptance_reason="Bench: no Runpod account totals were loaded.",
            )
        )
        result["issued"] = Invoice.objects.filter(
            institution=institution, month=month, status=Invoice.Status.ISSUED
        ).count()
        result["period_page_closed"] = _page(client, url, args.requests)
    finally:
        connection.close()
        if not (args.keep or args.reuse):
            dash._admin(f"DROP DATABASE IF EXISTS {args.db} WITH (FORCE)")
    result["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"invoicing-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"written to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
