"""Where a dashboard request's time goes, page cache off: the student's, the lab admin's and
finance's pages through Django's whole WSGI handler in-process (every middleware, the session
from the cache and database, authentication, the view, the menu, the selectors, the templates),
timed by CPU time per request and split by cProfile into its parts.

    .venv/bin/python bench/request_profile.py [--database labgov_loadbench] [--requests 200]

Needs a database built by bench/load_bench.py (`--reuse` keeps it) and Redis for the shared
cache (`--redis-db`, emptied first). CPU time (`time.process_time`) is what the machine's other
load weighs on least; the parts are cProfile's cumulative times over the same requests (each
part includes what it calls, so they overlap: session inside middleware, selectors inside the
view), in ms per request. Then each of one request's queries is run again (`--query-repeats`
times, as it ran: prepared or not) for the PostgreSQL backend CPU it costs: the floor a page's
database work sets, query by query. Writes JSON to bench/results/.
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import procs  # noqa: E402

# Parts of a request, by the function cProfile names (file fragment, function name).
PARTS = {
    "whole request (handler)": ("django/core/handlers/base.py", "get_response"),
    "session load": ("django/contrib/sessions/backends/cached_db.py", "load"),
    "auth: get_user": ("django/contrib/auth/__init__.py", "get_user"),
    "csrf middleware": ("django/middleware/csrf.py", "process_view"),
    "csp middleware": ("csp/middleware.py", "process_response"),
    "metrics middleware": ("labgov/ops/metrics.py", "__call__"),
    "request log": ("labgov/core/log_json.py", "format"),
    "access: scope_for": ("labgov/accounts/access.py", "scope_for"),
    "menu": ("labgov/navigation/menu.py", "menu_for"),
    "context processors": ("django/template/context.py", "bind_template"),
    "selector: student": ("labgov/dashboard/selectors/student.py", "student_dashboard"),
    "selector: my_pods": ("labgov/dashboard/selectors/student.py", "my_pods"),
    "selector: lab": ("labgov/dashboard/selectors/lab.py", "lab_dashboard"),
    "selector: institution": ("labgov/dashboard/selectors/institution.py", "institution_dashboard"),
    "template render (all)": ("django/template/base.py", "render"),
    "database execute": ("django/db/backends/utils.py", "execute"),
    "psycopg execute": ("psycopg/cursor.py", "execute"),
    "cache get (redis)": ("django/core/cache/backends/redis.py", "get"),
    "model init": ("django/db/models/base.py", "__init__"),
}


def _part_times(stats: pstats.Stats, requests: int) -> dict[str, float]:
    found = {}
    for name, (path, func) in PARTS.items():
        total = 0.0
        for (filename, _, function), (_, _, _, cumulative, _) in stats.stats.items():
            if function == func and filename.endswith(path):
                total = max(total, cumulative)
        found[name] = round(total * 1000 / requests, 2)
    return found


def _query_costs(client, path: str, backend: int, repeats: int) -> list[dict]:
    """What each of one request's queries costs PostgreSQL: the request's queries (SQL and
    parameters, and whether they ran prepared: core/compiled.py's cursor) run again
    `repeats` times each on the same connection, its backend's CPU read from /proc. The
    floor a page's database work sets, query by query, whatever Python does around it."""
    from django.db import connection

    from labgov.core.compiled import _prepared_cursor

    ran = []

    def record(execute, sql, params, many, context):
        prepared = type(context["cursor"].cursor).__name__ == "Prepared"
        ran.append((sql, params, prepared))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert client.get(path, secure=True).status_code == 200
    costs = []
    for sql, params, prepared in ran:
        with _prepared_cursor(connection) if prepared else connection.cursor() as cursor:
            for _ in range(6):  # prepared: past PostgreSQL's 5 custom plans, to its generic one
                cursor.execute(sql, params)
                cursor.fetchall()
            before, w0 = procs.process_cpu(backend), time.perf_counter()
            for _ in range(repeats):
                cursor.execute(sql, params)
                cursor.fetchall()
            backend_ms = (procs.process_cpu(backend) - before) * 1000 / repeats
            costs.append(
                {
                    "sql": " ".join(sql.split()),
                    "prepared": prepared,
                    "backend_cpu_ms": round(backend_ms, 3),
                    "wall_ms": round((time.perf_counter() - w0) * 1000 / repeats, 3),
                }
            )
    return sorted(costs, key=lambda q: -q["backend_cpu_ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="labgov_loadbench")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--redis-db", type=int, default=7)
    parser.add_argument("--top", type=int, default=25, help="cProfile's top functions shown")
    parser.add_argument("--label", default="", help="kept in the JSON (before, after, …)")
    parser.add_argument("--pages", default="student,lab,finance", help="which pages, in order")
    parser.add_argument(
        "--sort", default="tottime", help="cProfile's order of the top functions (cumulative…)"
    )
    parser.add_argument(
        "--only", default="", help="show only functions whose file holds this (labgov/, …)"
    )
    parser.add_argument("--dump", help="a directory to write each page's cProfile stats to")
    parser.add_argument(
        "--query-repeats",
        type=int,
        default=200,
        help="each of a page's queries run again this many times for its PostgreSQL CPU (0: not)",
    )
    args = parser.parse_args()

    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    os.environ.update(
        DEBUG="0",
        SECRET_KEY="request-profile-" + "k" * 40,
        LABGOV_ENCRYPTION_KEYS="ZmDfcTF7_60GrrY167zsiPd67pEvs0aGOv2oasOM1Pg=",
        ALLOWED_HOSTS="testserver,127.0.0.1",
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{args.database}",
        DATABASE_CONN_MAX_AGE="600",
        LABGOV_CACHE_URL=redis_url,
        LABGOV_PAGE_CACHE_SECONDS="0",
        SECURE_SSL_REDIRECT="0",
        LABGOV_LOG_FORMAT="json",
        LOG_LEVEL="INFO",
        DJANGO_SETTINGS_MODULE="labgov.settings",
        STATIC_ROOT=str(ROOT / "var" / "profile-static"),
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    import logging

    import redis
    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse

    from labgov.accounts.models import Lab, User

    call_command("collectstatic", interactive=False, verbosity=0)  # the manifest DEBUG=0 reads
    redis.Redis.from_url(redis_url).flushdb()
    # The request log's lines go nowhere: their formatting is timed, not the terminal.
    for handler in logging.getLogger().handlers + logging.getLogger("labgov").handlers:
        handler.stream = open(os.devnull, "w")  # noqa: SIM115 - for the process's life

    pages = {
        "student": (
            User.objects.get(username="person0020"),
            reverse("dashboard:me"),
        ),
        "lab": (
            User.objects.get(username="person0000"),
            reverse("dashboard:lab", args=[Lab.objects.get(slug="lab-00").pk]),
        ),
        "finance": (User.objects.get(username="finance"), reverse("dashboard:institution")),
    }
    results = {}
    for page in args.pages.split(","):
        user, path = pages[page]
        client = Client(HTTP_HOST="127.0.0.1", headers={"X-Forwarded-Proto": "https"})
        client.force_login(user)
        for _ in range(10):  # warm: templates compiled, connections open
            assert client.get(path, secure=True).status_code == 200
        from django.db import connection

        with connection.cursor() as cursor:  # this connection's PostgreSQL backend
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        cpu, wall = [], []
        backend_cpu = procs.process_cpu(backend)
        profiler = cProfile.Profile(time.process_time)  # CPU time: load weighs on it least
        for _ in range(args.requests):
            c0, w0 = time.process_time(), time.perf_counter()
            response = client.get(path, secure=True)
            cpu.append((time.process_time() - c0) * 1000)
            wall.append((time.perf_counter() - w0) * 1000)
            assert response.status_code == 200
        backend_ms = (procs.process_cpu(backend) - backend_cpu) * 1000 / args.requests
        for _ in range(args.requests):
            profiler.enable()
            client.get(path, secure=True)
            profiler.disable()
        stats = pstats.Stats(profiler)
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            stats.dump_stats(Path(args.dump) / f"{page}.prof")
        out = io.StringIO()
        restrict = [args.only, args.top] if args.only else [args.top]
        pstats.Stats(profiler, stream=out).sort_stats(args.sort).print_stats(*restrict)
        results[page] = {
            "cpu_ms_median": round(statistics.median(cpu), 2),
            "wall_ms_median": round(statistics.median(wall), 2),
            "cpu_ms_mean": round(statistics.fmean(cpu), 2),
            "postgresql_backend_cpu_ms_mean": round(backend_ms, 2),
            "parts_ms_per_request_profiled": _part_times(stats, args.requests),
        }
        print(
            f"\n== {page}: CPU {results[page]['cpu_ms_median']} ms, wall "
            f"{results[page]['wall_ms_median']} ms per request (median of {args.requests}); "
            f"mean CPU {results[page]['cpu_ms_mean']} ms here and "
            f"{results[page]['postgresql_backend_cpu_ms_mean']} ms in PostgreSQL's backend"
        )
        for name, ms in results[page]["parts_ms_per_request_profiled"].items():
            print(f"   {name:<32}{ms:>8.2f} ms")
        if args.query_repeats:
            queries = _query_costs(client, path, backend, args.query_repeats)
            results[page]["queries"] = queries
            print(
                f"   its {len(queries)} queries, each run again {args.query_repeats} times as "
                "it ran (prepared or not), PostgreSQL backend CPU and wall ms per run:"
            )
            for q in queries:
                print(f"   {q['backend_cpu_ms']:>7.2f} {q['wall_ms']:>7.2f}  {q['sql'][:96]}")
            print(
                f"   {sum(q['backend_cpu_ms'] for q in queries):>7.2f} "
                f"{sum(q['wall_ms'] for q in queries):>7.2f}  in all"
            )
        print("\n".join(out.getvalue().splitlines()[: args.top + 12]))
    results["load_average"] = os.getloadavg()
    target = ROOT / "bench" / "results"
    target.mkdir(exist_ok=True)
    label = f"{args.label}-" if args.label else ""
    name = f"request-profile-{label}{time.strftime('%Y%m%dT%H%M%S')}.json"
    (target / name).write_text(json.dumps(results, indent=2))
    print(f"\nwritten to bench/results/{name}")


if __name__ == "__main__":
    main()
