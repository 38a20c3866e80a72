"""Load benchmark: the student's, the lab admin's and finance's dashboards through gunicorn
with the deploy config, 16 concurrent clients, with the page cache off and on.

    .venv/bin/python bench/load_bench.py [--records 10000000] [--reuse] [--seconds 20]
        [--rounds 3] [--database labgov_loadbench] [--port N] [--modes off,on]
        [--pages student,lab,finance] [--workers N --threads N]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth), Redis, and wrk (Debian
package `wrk`). Builds the database `labgov_loadbench` with bench/dashboard_bench.py's
builder (one institution, 20 labs, 1,000 people and resources, `--records` hourly billing
records, rollups by the sync's own functions); `--reuse` keeps and reuses it (it is built
when missing). Then, twice (LABGOV_PAGE_CACHE_SECONDS=0, then the default), it starts
gunicorn as the web unit does (deploy/gunicorn.conf.py with its own workers and threads
unless `--workers`/`--threads` are given; DEBUG=0, on `--port` or a free one,
fresh secrets, statics collected into a scratch STATIC_ROOT, LABGOV_CACHE_URL at Redis
database `--redis-db`, which it empties first), opens a session for the student and for the
lab admin, checks each page answers 200 with that person's page, and runs wrk with 16
connections for `--seconds` per page, `--rounds` times (the figures given are the median
round's; each round's are kept in the JSON). Every request's status is read back from
labgov's own request log: all must be 200, and the data version must not move while wrk runs
(no GET writes). Prints a table and writes JSON to bench/results/.
With `--coldfront`, ColdFront 1.1.10 at 100 times its test data answers the same three pages
in the same run, its server up beside labgov's: each round of a page measures labgov's page,
then ColdFront's, one right after the other, with wrk as for labgov (bench/coldfront.py says
how it is installed, filled and served, and which of its pages answers which). The ratio is
the median of the rounds' ratios: this machine's speed drifts by a quarter within minutes,
and a ratio of two measurements minutes apart moved with it. Its database
(`--coldfront-database`) is kept with `--reuse`.
Targets (issue 24), with the page cache off: the student's page at least 200 requests/s with
p99 under 250 ms, the lab's at least 120 requests/s with p99 under 400 ms; against ColdFront,
at least 10 times its rate on the student's page and 5 times on the lab's and finance's.
"""

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import coldfront  # noqa: E402 - ColdFront beside labgov, for --coldfront
import dashboard_bench  # noqa: E402 - the builder this benchmark shares
import procs  # noqa: E402

DB = "labgov_loadbench"
VENV_BIN = Path(sys.executable).parent
PAGES = ("student", "lab", "finance")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _database_exists(name: str) -> bool:
    import psycopg

    with psycopg.connect(dashboard_bench.ADMIN_URL, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()


def _world(records: int, reuse: bool) -> dict:
    """Who to log in as and what to open: built afresh, or read from the kept database."""
    if reuse and _database_exists(DB):
        from django.core.management import call_command

        from labgov.accounts.models import Lab, User

        # Kept from an older checkout: brought up to this one's migrations (which fill what
        # they add from the data there, as they would in production).
        call_command("migrate", verbosity=0, interactive=False)

        lab_admin = User.objects.get(username="person0000")
        student = User.objects.get(username=f"person{dashboard_bench.LABS:04d}")
        from labgov.runpod.models import BillingRecord

        count = BillingRecord.objects.count()
        print(f"reusing {DB} ({count:,} billing records)", flush=True)
        return {
            "records": count,
            "lab_admin": lab_admin,
            "student": student,
            "finance": User.objects.get(username="finance"),
            "lab": Lab.objects.get(slug="lab-00"),
        }
    connection = dashboard_bench._database(DB)
    dashboard_bench._use(connection)
    started = time.perf_counter()
    world = dashboard_bench._build(records)
    data = dashboard_bench._rollups(world)
    print(f"{records:,} records built in {time.perf_counter() - started:.0f} s {data}", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return {**world, "records": records}


def _session_cookie(user) -> str:
    """A logged-in session as the login view leaves it, in the database (the cached_db engine
    finds it there too)."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "labgov.accounts.backends.PasswordBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


class Gunicorn:
    def __init__(self, env: dict, log_path: Path):
        self.log_path = log_path
        self.env = env
        self.process = None

    def __enter__(self):
        out = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [f"{VENV_BIN}/gunicorn", "-c", "deploy/gunicorn.conf.py", "labgov.wsgi"],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        return self

    def __exit__(self, *exc):
        procs.stop_group(self.process)


def _wait_ready(base: str, deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("gunicorn did not answer in time")


def _check_page(base: str, path: str, cookie: str, expected: list[str]) -> None:
    import httpx

    response = httpx.get(f"{base}{path}", cookies={"sessionid": cookie}, timeout=60)
    missing = [text for text in expected if text not in response.text]
    if response.status_code != 200 or missing:
        raise SystemExit(f"{path} answered {response.status_code}, missing {missing}")


def _wrk(url: str, cookie: str, seconds: int, connections: int) -> dict:
    output = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "--latency",
            "-H",
            f"Cookie: sessionid={cookie}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def ms(label: str) -> float:
        value, unit = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", output, re.M).groups()
        return round(float(value) * {"us": 0.001, "ms": 1, "s": 1000}[unit], 1)

    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: (.*)", output)
    return {
        "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "requests": int(re.search(r"(\d+) requests in", output).group(1)),
        "p50_ms": ms("50%"),
        "p90_ms": ms("90%"),
        "p99_ms": ms("99%"),
        "non_2xx_3xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors.group(1) if errors else "",
    }


def _measured(url: str, cookie: str, args, group: int) -> dict:
    """wrk on one page, with the load average around it and the server's CPU per request."""
    load_before, cpu_before = os.getloadavg(), procs.process_group_cpu(group)
    figures = _wrk(url, cookie, args.seconds, args.connections)
    cpu = procs.process_group_cpu(group) - cpu_before
    figures["server_cpu_s"] = round(cpu, 2)
    figures["server_cpu_ms_per_request"] = round(1000 * cpu / max(figures["requests"], 1), 2)
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    return figures


def _statuses(log_path: Path, path: str, user_id: int) -> dict[str, int]:
    """How many requests of `path` labgov answered with each status, from its JSON log (and
    under "other person", how many it answered for someone else)."""
    counts: dict[int, int] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("path") == path and "status_code" in record:
            status = str(record["status_code"])
            if record.get("user_id") != user_id:
                status = "other person"
            counts[status] = counts.get(status, 0) + 1
    return counts


def _gunicorn_shape(env: dict) -> tuple[int, int]:
    """The workers and threads deploy/gunicorn.conf.py gives in this environment."""
    code = "import runpy; c = runpy.run_path('deploy/gunicorn.conf.py'); "
    code += "print(c['workers'], c['threads'])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PROMETHEUS_MULTIPROC_DIR": tempfile.gettempdir()},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


class _ColdFront:
    """ColdFront's counterparts of each page (coldfront.PAGES), served while labgov's server
    runs, so that each round of a page measures labgov and then ColdFront, one after the
    other (the ratio of a round is of two measurements a few seconds apart)."""

    def __init__(self, bin_dir: Path, env: dict, database: str, args, log: Path):
        self.port = args.coldfront_port or _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.project = coldfront.pi_project(database)
        self.server = coldfront.Server(bin_dir, env, self.port, log)
        self.args = args
        self.figures: dict[str, list] = {}  # by page: each counterpart's figures of each round

    def __enter__(self):
        self.server.__enter__()
        try:
            coldfront.wait_ready(self.base, time.monotonic() + 60)
            self.sessions = {
                user: coldfront.login(self.base, user) for user in (coldfront.PI, coldfront.ADMIN)
            }
        except BaseException:
            self.server.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)

    def counterparts(self, page: str) -> list[tuple[str, str]]:
        return [
            (user, pattern.format(project=self.project)) for user, pattern in coldfront.PAGES[page]
        ]

    def measure(self, page: str, round_: int) -> None:
        """One round of the page's counterparts, the one the ratio is of first."""
        found = self.figures.setdefault(page, [[] for _ in self.counterparts(page)])
        for i, (user, path) in enumerate(self.counterparts(page)):
            if round_ == 0:
                pattern = coldfront.PAGES[page][i][1]
                texts = coldfront.expected(page, pattern, self.args.coldfront_times)
                for _ in range(3):  # every worker's first request
                    coldfront.check_page(self.base, path, self.sessions[user], texts)
            figures = _measured(
                self.base + path, self.sessions[user], self.args, self.server.process.pid
            )
            figures.update(path=path, user=user)
            found[i].append(figures)
            print(f"ColdFront  {page:<8} round {round_ + 1} {figures}", flush=True)

    def results(self) -> dict:
        """By page, each counterpart's figures over the rounds, its statuses checked."""
        by_page = {}
        for page, counterparts in self.figures.items():
            by_page[page] = []
            for rounds in counterparts:
                figures = _combined(rounds)
                figures.update(path=rounds[0]["path"], user=rounds[0]["user"])
                figures["statuses"] = self.server.statuses(figures["path"])
                if set(figures["statuses"]) != {"200"} or figures["non_2xx_3xx"]:
                    raise SystemExit(
                        f"ColdFront {figures['path']}: statuses {figures['statuses']}, "
                        f"see {self.server.log_path}"
                    )
                by_page[page].append(figures)
        return by_page


def _combined(rounds: list[dict]) -> dict:
    """One page's figures over its rounds: requests/s and the percentiles as each round's
    median (p99 also as the worst round's), CPU per request over all of them; each round's
    own figures kept under "rounds"."""
    requests = sum(r["requests"] for r in rounds)
    cpu = sum(r["server_cpu_s"] for r in rounds)
    return {
        "requests_per_s": round(statistics.median(r["requests_per_s"] for r in rounds), 2),
        "requests": requests,
        "p50_ms": round(statistics.median(r["p50_ms"] for r in rounds), 1),
        "p90_ms": round(statistics.median(r["p90_ms"] for r in rounds), 1),
        "p99_ms": round(statistics.median(r["p99_ms"] for r in rounds), 1),
        "p99_ms_worst_round": max(r["p99_ms"] for r in rounds),
        "non_2xx_3xx": sum(r["non_2xx_3xx"] for r in rounds),
        "socket_errors": "; ".join(r["socket_errors"] for r in rounds if r["socket_errors"]),
        "server_cpu_s": round(cpu, 2),
        "server_cpu_ms_per_request": round(1000 * cpu / max(requests, 1), 2),
        "load_average": rounds[-1]["load_average"],
        "load_average_before": rounds[0]["load_average_before"],
        "data_version_moved": any(r.get("data_version_moved") for r in rounds),
        "rounds": rounds,
    }


def _round_ratios(ours: dict, theirs: dict) -> dict:
    """labgov's rate over ColdFront's, and ColdFront's CPU per request over labgov's, round
    by round (each round's two measurements were taken one right after the other): the
    median, and the lowest and highest round."""
    rates = [
        a["requests_per_s"] / b["requests_per_s"]
        for a, b in zip(ours["rounds"], theirs["rounds"], strict=True)
    ]
    cpus = [
        b["server_cpu_ms_per_request"] / max(a["server_cpu_ms_per_request"], 0.01)
        for a, b in zip(ours["rounds"], theirs["rounds"], strict=True)
    ]
    return {
        "ratio": round(statistics.median(rates), 2),
        "ratio_rounds": [round(r, 2) for r in rates],
        "cpu_ratio": round(statistics.median(cpus), 2),
        "cpu_ratio_rounds": [round(r, 2) for r in cpus],
    }


def main() -> None:
    global DB
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--reuse", action="store_true", help="keep the database and reuse it")
    parser.add_argument("--database", default=DB, help=f"its name (default {DB})")
    parser.add_argument("--seconds", type=int, default=20, help="per page and round")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="measurements of each page, one after the other (with --coldfront: labgov's, then "
        "ColdFront's, each round)",
    )
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, help="default: deploy/gunicorn.conf.py's")
    parser.add_argument("--threads", type=int, help="default: deploy/gunicorn.conf.py's")
    parser.add_argument("--port", type=int, help="gunicorn's (default: a free one)")
    parser.add_argument("--modes", default="off,on", help="page cache off, on, or both")
    parser.add_argument("--pages", default=",".join(PAGES), help="of " + ", ".join(PAGES))
    parser.add_argument("--redis-db", type=int, default=7)
    parser.add_argument("--coldfront", action="store_true", help="and ColdFront, same run")
    parser.add_argument("--coldfront-venv", type=Path, default=coldfront.DEFAULT_VENV)
    parser.add_argument("--coldfront-database", help="default: --database's name + _coldfront")
    parser.add_argument("--coldfront-port", type=int, help="default: a free one")
    parser.add_argument("--coldfront-times", type=int, default=100, help="its test data times")
    args = parser.parse_args()
    if shutil.which("wrk") is None:  # before the database is built, not after
        sys.exit("load_bench: wrk is not installed (Debian: apt-get install wrk)")
    if args.coldfront and "off" not in args.modes:
        raise SystemExit("--coldfront compares with the cache off: --modes must hold off")

    from cryptography.fernet import Fernet

    # The server and this process share the secrets: the sessions made here must be its.
    secret_key = secrets.token_urlsafe(50)
    encryption_key = Fernet.generate_key().decode()
    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    # This process reads the server's cache too: the data version, which no GET may move.
    os.environ.update(
        SECRET_KEY=secret_key, LABGOV_ENCRYPTION_KEYS=encryption_key, LABGOV_CACHE_URL=redis_url
    )
    DB = dashboard_bench.DB = args.database
    dashboard_bench._setup_django()
    import redis
    from django.db import connections
    from django.urls import reverse

    from labgov.core import dataversion

    redis.Redis.from_url(redis_url).flushdb()
    world = _world(args.records, args.reuse)
    student, lab_admin, lab = world["student"], world["lab_admin"], world["lab"]
    users = {"student": student, "lab": lab_admin, "finance": world["finance"]}
    pages = [page for page in args.pages.split(",") if page]
    unknown = set(pages) - set(PAGES)
    if unknown:
        raise SystemExit(f"no such page: {', '.join(sorted(unknown))}")
    cookies = {page: _session_cookie(user) for page, user in users.items()}
    paths = {
        "student": reverse("dashboard:me"),
        "lab": reverse("dashboard:lab", args=[lab.pk]),
        "finance": reverse("dashboard:institution"),
    }
    # The person's name is in the menu bar; the page's own heading in its body.
    from labgov.funding.models import Allocation

    grant = Allocation.objects.filter(user=student).select_related("funding_source").first()
    expected = {
        "student": [f"<span>{student}</span>", "<h1>My spend</h1>", grant.funding_source.name],
        "lab": [f"<span>{lab_admin}</span>", f"<h1>{lab.name} <small>spend"],
        "finance": [f"<span>{world['finance']}</span>"],
    }
    database_url = connections["default"].settings_dict
    connections.close_all()

    tmp = Path(tempfile.mkdtemp(prefix="labgov-loadbench-"))
    port = args.port or _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(tmp),
        "LANG": "C.UTF-8",
        "DEBUG": "0",
        "SECRET_KEY": secret_key,
        "LABGOV_ENCRYPTION_KEYS": encryption_key,
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{database_url['NAME']}",
        "LABGOV_CACHE_URL": redis_url,
        "STATIC_ROOT": str(tmp / "static"),
        "LABGOV_VAR_DIR": str(tmp),
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        # wrk speaks plain http to gunicorn itself (nginx is not what is measured here).
        "SECURE_SSL_REDIRECT": "0",
        "LABGOV_LOG_FORMAT": "json",
    }
    if args.workers:
        env["GUNICORN_WORKERS"] = str(args.workers)
    if args.threads:
        env["GUNICORN_THREADS"] = str(args.threads)
    workers, threads = _gunicorn_shape(env)
    modes = [m for m in (("cache off", "0"), ("cache on", None)) if m[0][6:] in args.modes]
    results: dict = {}
    coldfront_results: dict = {}
    coldfront_database = args.coldfront_database or f"{DB}_coldfront"
    try:
        if args.coldfront:
            coldfront_bin = coldfront.ensure_venv(args.coldfront_venv)
            coldfront_home, coldfront_static = coldfront.scratch(tmp)
            coldfront_env = coldfront.environment(
                coldfront_database, coldfront_static, coldfront_home
            )
            built = coldfront.ensure_database(
                coldfront_bin, coldfront_database, args.coldfront_times, args.reuse, coldfront_env
            )
            print(f"ColdFront: {built}", flush=True)
        subprocess.run(
            [f"{VENV_BIN}/python", "manage.py", "collectstatic", "--noinput", "-v0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        for mode, seconds in modes:
            run_env = dict(env)
            if seconds is not None:
                run_env["LABGOV_PAGE_CACHE_SECONDS"] = seconds
            log_path = tmp / f"gunicorn-{mode.replace(' ', '-')}.log"
            with contextlib.ExitStack() as stack:
                server = stack.enter_context(Gunicorn(run_env, log_path))
                theirs = None
                if args.coldfront and mode == "cache off":
                    theirs = stack.enter_context(
                        _ColdFront(
                            coldfront_bin,
                            coldfront_env,
                            coldfront_database,
                            args,
                            tmp / "coldfront-access.log",
                        )
                    )
                _wait_ready(base, time.monotonic() + 60)
                for page in pages:
                    for _ in range(3):  # every worker's first request, and the cache's
                        _check_page(base, paths[page], cookies[page], expected[page])
                    rounds = []
                    for round_ in range(args.rounds):
                        version = dataversion.current()
                        figures = _measured(
                            base + paths[page], cookies[page], args, server.process.pid
                        )
                        # A GET that wrote would retire every cached page, each time.
                        figures["data_version_moved"] = dataversion.current() != version
                        rounds.append(figures)
                        print(f"{mode:<10} {page:<8} round {round_ + 1} {figures}", flush=True)
                        if theirs is not None:
                            theirs.measure(page, round_)
                    results.setdefault(mode, {})[page] = _combined(rounds)
                if theirs is not None:
                    coldfront_results = theirs.results()
            for page in pages:
                statuses = _statuses(log_path, paths[page], users[page].pk)
                results[mode][page]["statuses"] = statuses
                if (
                    set(statuses) != {"200"}
                    or results[mode][page]["non_2xx_3xx"]
                    or results[mode][page]["data_version_moved"]
                ):
                    raise SystemExit(f"{mode} {page}: statuses {statuses}, see {log_path}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not args.reuse:
            dashboard_bench._admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            if args.coldfront:
                coldfront.drop_database(coldfront_database)

    print(
        f"\n{world['records']:,} records, {args.connections} connections, "
        f"{args.rounds} x {args.seconds} s per page, "
        f"gunicorn {workers} workers x {threads} threads on {os.cpu_count()} cores"
    )
    print(
        f"{'':<10} {'page':<8}{'req/s':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
        f"{'CPU ms/req':>11}  load average"
    )
    for mode, pages in results.items():
        for page, f in pages.items():
            print(
                f"{mode:<10} {page:<8}{f['requests_per_s']:>9.1f}{f['p50_ms']:>9}"
                f"{f['p90_ms']:>9}{f['p99_ms']:>9}{f['server_cpu_ms_per_request']:>11}"
                f"  {' '.join(map(str, f['load_average']))}"
            )
    if coldfront_results:
        print(
            f"\nColdFront {coldfront.VERSION} at {args.coldfront_times} times its test data, "
            "gunicorn 2 sync workers; labgov with the page cache off"
        )
        print(
            f"{'page':<8} {'ColdFront page':<38}{'req/s labgov':>13}{'ColdFront':>10}{'ratio':>7}"
            f"{'CPU ms/req labgov':>19}{'ColdFront':>10}{'ratio':>7}"
            f"{'p99 ms labgov':>14}{'ColdFront':>10}  rate ratio by round"
        )
        for page, counterparts in coldfront_results.items():
            ours = results["cache off"][page]
            for i, f in enumerate(counterparts):  # the first is the page's counterpart
                f.update(_round_ratios(ours, f))
                print(
                    f"{'' if i else page:<8} {f['path']:<38}{ours['requests_per_s']:>13.1f}"
                    f"{f['requests_per_s']:>10.1f}{f['ratio']:>7.2f}"
                    f"{ours['server_cpu_ms_per_request']:>19}{f['server_cpu_ms_per_request']:>10}"
                    f"{f['cpu_ratio']:>7.2f}{ours['p99_ms']:>14}{f['p99_ms']:>10}"
                    f"  {' '.join(map(str, f['ratio_rounds']))}"
                )
        print(
            "ratio: labgov's requests/s over ColdFront's, ColdFront's CPU per request over"
            " labgov's: the median of the rounds' (each round measures labgov, then ColdFront,"
            " one right after the other). req/s and p99: the median round. A page's first"
            " ColdFront page is its counterpart (bench/coldfront.py); a row below it, another"
            " page measured beside it"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"load-{time.strftime('%Y%m%dT%H%M%S')}.json"
    result = {
        "records": world["records"],  # what the database holds (a reused one: counted)
        "connections": args.connections,
        "seconds": args.seconds,
        "workers": workers,
        "threads": threads,
        "cores": os.cpu_count(),
        "results": results,
    }
    if coldfront_results:
        result["coldfront"] = {
            "version": coldfront.VERSION,
            "times_test_data": args.coldfront_times,
            "workers": 2,
            "pages": coldfront_results,
        }
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwritten to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
