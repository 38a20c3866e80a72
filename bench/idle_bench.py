"""Running-idle benchmark: N running GPU pods sampled every 5 minutes for 30 days (1,000 pods:
8.6 million samples), in PostgreSQL, against the same with 10 pods.

    .venv/bin/python bench/idle_bench.py [--pods 1000] [--small 10] [--requests 30]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth); creates and drops the
databases `labgov_idlebench_<pods>`. For each size: one lab whose members own 10 of the pods
(its page is the one measured) and another lab owning the rest (1, 2, 4 or 8 GPUs; a fifth of
them idle since 1 to 72 hours), 30 days of samples written with
generate_series and their hourly aggregates, then the daily prune (raw samples older than
LABGOV_UTILIZATION_RAW_DAYS go). Then, against a simulator serving the same pods in its own
process: 10 poll passes (list pods over HTTP, parse, write the samples and rebuild the hour),
each followed by the auto-stop step (policy on), timed; the alert evaluation (first, when
every idle pod is new, and again); the storage of the two tables; and the lab's spend page
and its idle panel (htmx), `--requests` timed requests each after 3 warm-ups, median.
Prints a table and writes JSON to bench/results/.

    .venv/bin/python bench/idle_bench.py --fleet [--requests 30]

measures serverless endpoints and clusters instead (database `labgov_idlebench_fleet`, no
simulator): a lab with 2 endpoints and 1 cluster, then with 200 endpoints (half keeping an
always-on worker that serves nothing) and 50 clusters (two 8-GPU pods each, all idle), the
alerts evaluated each time; the lab's spend page, alert panel, idle panel and requests list
(query counts, which must not change, and median ms); and the live estimate of a 64-GPU
cluster (8 nodes × 8 H100, the request form's htmx fragment), median ms against the 50 ms
target.
"""

import argparse
import datetime as dt
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
END = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
DAYS = 30
GPUS = (1, 2, 4, 8)
H100 = "NVIDIA H100 80GB HBM3"


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pod_id(i: int) -> str:
    return f"benchpod{i:06d}"


def _idle_hours(i: int) -> int | None:
    return (i % 72) + 1 if i % 5 == 0 else None


def _scenario_file(pods: int) -> Path:
    """The simulator's scenario: the same pods, running since before the 30 days."""
    base = json.loads((ROOT / "labgov/simulator/scenarios/empty.json").read_text())
    started = (END - dt.timedelta(days=DAYS + 1)).isoformat().replace("+00:00", "Z")
    base["now"] = END.isoformat().replace("+00:00", "Z")
    base["balanceUsd"] = "1000000"
    base["pods"] = []
    for i in range(pods):
        pod = {
            "id": _pod_id(i),
            "name": f"bench-{i}",
            "image": "img",
            "gpu": {"id": H100, "count": GPUS[i % 4]},
            "cloud": "SECURE",
            "dataCenterId": "US-KS-2",
            "mounts": {"persistent": {"size": 50, "path": "/workspace"}},
            "history": [[started, "RUNNING"]],
        }
        if (hours := _idle_hours(i)) is not None:
            idle_from = END - dt.timedelta(hours=hours)
            pod["utilization"] = {
                "pattern": "idle_from",
                "idleFrom": idle_from.isoformat().replace("+00:00", "Z"),
            }
        base["pods"].append(pod)
    path = Path(tempfile.mkstemp(suffix=".json", prefix="idle-bench-")[1])
    path.write_text(json.dumps(base))
    return path


def _setup_django(db: str) -> None:
    os.environ.update(
        DEBUG="1",
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{db}",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="labgov.settings",
        LABGOV_RUNPOD_HOSTS="127.0.0.1",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False


def _build(pods: int, base_url: str) -> dict:
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.db import connection

    from labgov.accounts.models import Institution, Lab, Membership, Role, User
    from labgov.core.crypto import encrypt
    from labgov.funding.models import Allocation, FundingSource
    from labgov.idle.models import AutoStopPolicy
    from labgov.runpod.models import GpuType, Resource, RunpodAccount

    call_command("migrate", verbosity=0, interactive=False)
    today = END.date()
    nobody = make_password(None)
    institution = Institution.objects.create(name="Bench University", slug="bench")
    # The lab whose page is measured holds the first 10 pods at every size; the others belong
    # to another lab, so its page shows what it shows with 10 pods in all.
    lab = Lab.objects.create(institution=institution, name="Lab", slug="lab")
    other_lab = Lab.objects.create(institution=institution, name="Other", slug="other")
    admin = User.objects.create(username="labadmin", password=nobody)
    people = User.objects.bulk_create(
        User(username=f"person{i:04d}", password=nobody) for i in range(min(pods, 100))
    )
    started = today - dt.timedelta(days=400)
    Membership.objects.bulk_create(
        [
            Membership(
                user=admin,
                institution=institution,
                lab=lab,
                role=Role.LAB_ADMIN,
                start_date=started,
            )
        ]
        + [
            Membership(
                user=p, institution=institution, lab=lab, role=Role.MEMBER, start_date=started
            )
            for p in people
        ]
    )
    sources = [
        FundingSource.objects.create(
            institution=institution,
            lab=owner_lab,
            name=f"Grant {n}",
            award_number=f"AWD-{n}",
            start_date=today - dt.timedelta(days=120),
            end_date=today + dt.timedelta(days=200),
            amount_usd=10_000_000,
        )
        for n, owner_lab in enumerate((lab, other_lab))
    ]
    # People 0-9 hold allocations on the measured lab's grant, the rest on the other's.
    allocations = Allocation.objects.bulk_create(
        Allocation(
            funding_source=sources[0 if n < 10 else 1],
            user=p,
            cap_usd=100_000,
            start_date=today - dt.timedelta(days=120),
            end_date=today + dt.timedelta(days=200),
        )
        for n, p in enumerate(people)
    )
    account = RunpodAccount.objects.create(
        institution=institution,
        name="Main",
        base_url=base_url,
        api_key_encrypted=encrypt("sim-key"),
        api_key_last4="-key",
    )
    GpuType.objects.create(
        gpu_id=H100,
        name="H100",
        memory_gb=80,
        secure_price_per_hr_usd="2.69",
        secure_available=True,
        max_count_secure=8,
    )
    run_start = (END - dt.timedelta(days=DAYS + 1)).isoformat()
    Resource.objects.bulk_create(
        [
            Resource(
                account=account,
                kind="pod",
                runpod_id=_pod_id(i),
                name=f"bench-{i}",
                status="RUNNING",
                cost_per_hr_usd=f"{2.69 * GPUS[i % 4]:.2f}",
                gpu_count=GPUS[i % 4],
                gpu_type_id=H100,
                cloud="SECURE",
                volume_disk_gb=50,
                container_disk_gb=20,
                current_allocation=allocations[
                    i if i < 10 else 10 + i % max(1, len(allocations) - 10)
                ],
                details={"started_at": run_start},
            )
            for i in range(pods)
        ],
        batch_size=1000,
    )
    for policy_lab in (lab, other_lab):
        AutoStopPolicy.objects.create(lab=policy_lab, enabled=True, idle_hours=168, warn_minutes=30)
    first = END - dt.timedelta(days=DAYS)
    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        # Busy pods at 60 % on every GPU; idle ones (every fifth) at 1 % since 1-72 hours.
        cursor.execute(
            """
            INSERT INTO utilization_sample
                (resource_id, at, gpus, util_sum, util_max, mem_sum, mem_max, busy_gpus)
            SELECT r.id, t, r.gpu_count,
                   r.gpu_count * u.util, u.util, r.gpu_count * u.util, u.util,
                   CASE WHEN u.util >= 10 THEN r.gpu_count ELSE 0 END
            FROM runpod_resource r
            CROSS JOIN generate_series(%s::timestamptz, %s::timestamptz - interval '5 minutes',
                                       interval '5 minutes') t
            CROSS JOIN LATERAL (
                SELECT CASE WHEN (substr(r.runpod_id, 9)::int %% 5 = 0)
                             AND t >= %s::timestamptz
                                  - make_interval(hours => substr(r.runpod_id, 9)::int %% 72 + 1)
                       THEN 1 ELSE 60 END AS util
            ) u
            """,
            [first, END, END],
        )
        samples = cursor.rowcount
        cursor.execute(
            """
            INSERT INTO utilization_hour (resource_id, hour, samples, readings, util_sum,
                util_max, mem_sum, mem_max, busy_gpus_sum, busy_gpus_max)
            SELECT resource_id, date_trunc('hour', at), count(*), sum(gpus), sum(util_sum),
                   max(util_max), sum(mem_sum), max(mem_max), sum(busy_gpus), max(busy_gpus)
            FROM utilization_sample GROUP BY 1, 2
            """
        )
    built = time.perf_counter() - t0
    return {
        "lab": lab,
        "admin": admin,
        "account": account,
        "institution": institution,
        "samples_written": samples,
        "build_s": round(built, 1),
    }


def _sizes() -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) utilization_sample")
        cursor.execute("VACUUM (ANALYZE) utilization_hour")
        found = {}
        for table in ("utilization_sample", "utilization_hour"):
            cursor.execute(f"SELECT count(*), pg_total_relation_size('{table}') FROM {table}")  # noqa: S608
            rows, size = cursor.fetchone()
            found[table] = {"rows": rows, "mb": round(size / 1e6, 1)}
    return found


def _median_ms(client, url: str, requests: int, **headers) -> float:
    for _ in range(3):
        assert client.get(url, **headers).status_code == 200
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        response = client.get(url, **headers)
        times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200
    return round(statistics.median(times), 1)


def one(pods: int, requests: int) -> dict:
    db = f"labgov_idlebench_{pods}"
    _admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    _admin(f"CREATE DATABASE {db}")
    _setup_django(db)
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from labgov.alerts.evaluation import alerts_evaluate
    from labgov.alerts.models import Alert
    from labgov.idle.policy import autostop_run
    from labgov.runpod.client import RunpodClient
    from labgov.utilization.poll import utilization_poll
    from labgov.utilization.recording import samples_prune

    scenario = _scenario_file(pods)
    port = _free_port()
    sim = subprocess.Popen(  # noqa: S603 - our own command
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "runpod_simulator",
            "--port",
            str(port),
            "--scenario",
            str(scenario),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or sim.poll() is not None:
                    sys.exit("the simulator did not answer")
                time.sleep(0.2)
        world = _build(pods, base_url)
        before = _sizes()
        t0 = time.perf_counter()
        pruned = samples_prune(now=END)
        prune_s = time.perf_counter() - t0
        sizes = _sizes()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM FULL utilization_sample")
        compact = _sizes()

        client = RunpodClient(base_url=base_url, api_key="sim-key")

        class Borrowed:
            def __enter__(self):
                return client

            def __exit__(self, *exc):
                return False

        polls, stops = [], []
        for k in range(1, 11):
            now = END + dt.timedelta(minutes=5 * k)
            t0 = time.perf_counter()
            utilization_poll(account=world["account"], client_factory=lambda a: Borrowed(), now=now)
            polls.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            autostop_run(
                institution_id=world["institution"].pk, now=now, client_factory=lambda a: Borrowed()
            )
            stops.append(time.perf_counter() - t0)
        now = END + dt.timedelta(minutes=50)
        t0 = time.perf_counter()
        alerts_evaluate(institution_id=world["institution"].pk, now=now)
        evaluate_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        alerts_evaluate(institution_id=world["institution"].pk, now=now)
        evaluate_again = time.perf_counter() - t0
        idle_alerts = Alert.objects.filter(kind="running_idle").count()

        settings.ALLOWED_HOSTS = ["testserver"]
        web = Client()
        web.force_login(world["admin"])
        lab = world["lab"].pk
        lab_ms = _median_ms(web, f"/spend/labs/{lab}/", requests)
        panel_ms = _median_ms(web, f"/idle/labs/{lab}/", requests, HTTP_HX_REQUEST="true")
        return {
            "pods": pods,
            "samples_written": world["samples_written"],
            "build_s": world["build_s"],
            "before_prune": before,
            "prune": {"deleted": pruned, "seconds": round(prune_s, 2)},
            "after_prune": sizes,
            "after_vacuum_full": compact,
            "poll_pass_s_median": round(statistics.median(polls), 3),
            "poll_pass_s_max": round(max(polls), 3),
            "autostop_step_s_median": round(statistics.median(stops), 3),
            "alerts_evaluate_first_s": round(evaluate_first, 2),
            "alerts_evaluate_again_s": round(evaluate_again, 2),
            "running_idle_alerts": idle_alerts,
            "lab_page_ms_median": lab_ms,
            "idle_panel_ms_median": panel_ms,
        }
    finally:
        sim.terminate()
        sim.wait()
        scenario.unlink()


def _count_and_ms(client, url: str, requests: int, **headers) -> tuple[int, float]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return len(ctx.captured_queries), _median_ms(client, url, requests, **headers)


def fleet(requests: int) -> dict:
    """Endpoints and clusters at scale (see the module's docstring)."""
    db = "labgov_idlebench_fleet"
    _admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    _admin(f"CREATE DATABASE {db}")
    _setup_django(db)
    import time_machine
    from django.conf import settings
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.test import Client

    from labgov.accounts.models import Institution, Lab, Membership, Role, User
    from labgov.alerts.evaluation import alerts_evaluate
    from labgov.core.crypto import encrypt
    from labgov.funding.models import Allocation, FundingSource
    from labgov.runpod.models import GpuType, Resource, RunpodAccount
    from labgov.utilization.models import Sample, WorkerReading

    call_command("migrate", verbosity=0, interactive=False)
    travel = time_machine.travel(END, tick=True)
    travel.start()
    today = END.date()
    nobody = make_password(None)
    institution = Institution.objects.create(name="Bench University", slug="bench")
    lab = Lab.objects.create(institution=institution, name="Lab", slug="lab")
    admin = User.objects.create(username="labadmin", password=nobody)
    member = User.objects.create(username="member", password=nobody)
    for user, role in ((admin, Role.LAB_ADMIN), (member, Role.MEMBER)):
        Membership.objects.create(
            user=user,
            institution=institution,
            lab=lab,
            role=role,
            start_date=today - dt.timedelta(days=30),
        )
    source = FundingSource.objects.create(
        institution=institution,
        lab=lab,
        name="Grant",
        award_number="AWD-1",
        start_date=today - dt.timedelta(days=30),
        end_date=today + dt.timedelta(days=300),
        amount_usd=10_000_000,
    )
    allocation = Allocation.objects.create(
        funding_source=source,
        user=member,
        cap_usd=1_000_000,
        start_date=today - dt.timedelta(days=30),
        end_date=today + dt.timedelta(days=300),
    )
    account = RunpodAccount.objects.create(
        institution=institution,
        name="Main",
        api_key_encrypted=encrypt("sim-key"),
        api_key_last4="-key",
    )
    GpuType.objects.create(
        gpu_id=H100,
        name="H100",
        memory_gb=80,
        secure_price_per_hr_usd=4.39,
        community_price_per_hr_usd=2.69,
        secure_available=True,
        max_count_secure=8,
    )
    now = END

    def build(endpoints: int, clusters: int, tag: str) -> None:
        made = Resource.objects.bulk_create(
            [
                Resource(
                    account=account,
                    kind="serverless",
                    runpod_id=f"ep-{tag}-{i}",
                    name=f"endpoint {i}",
                    status="ACTIVE",
                    gpu_count=1,
                    current_allocation=allocation,
                    details={"workers_min": i % 2, "workers_max": 3, "idle_timeout_seconds": 5},
                )
                for i in range(endpoints)
            ]
            + [
                Resource(
                    account=account,
                    kind="cluster",
                    runpod_id=f"cl-{tag}-{i}",
                    name=f"cluster {i}",
                    status="RUNNING",
                    gpu_type_id=H100,
                    gpu_count=16,
                    current_allocation=allocation,
                )
                for i in range(clusters)
            ]
        )
        pods = Resource.objects.bulk_create(
            Resource(
                account=account,
                kind="pod",
                runpod_id=f"cl-{tag}-{i}-{n}",
                name=f"cluster {i} pod {n}",
                status="RUNNING",
                cluster_id=f"cl-{tag}-{i}",
                gpu_type_id=H100,
                gpu_count=8,
                cost_per_hr_usd=35.12,
                details={"started_at": (now - dt.timedelta(hours=10)).isoformat()},
            )
            for i in range(clusters)
            for n in range(2)
        )
        times = [now - dt.timedelta(hours=3) + k * dt.timedelta(minutes=5) for k in range(37)]
        Sample.objects.bulk_create(
            Sample(
                resource=p, at=at, gpus=8, util_sum=0, util_max=0, mem_sum=8, mem_max=1, busy_gpus=0
            )
            for p in pods
            for at in times
        )
        WorkerReading.objects.bulk_create(
            WorkerReading(resource=e, at=at, workers_min=1, running=0, idle=1, total=1)
            for e in made
            if e.kind == "serverless" and e.details["workers_min"]
            for at in times[::3]
        )

    settings.ALLOWED_HOSTS = ["testserver"]
    web = Client()
    web.force_login(admin)
    pages = {
        "lab page": f"/spend/labs/{lab.pk}/",
        "alert panel": f"/alerts/labs/{lab.pk}/",
        "idle panel": f"/idle/labs/{lab.pk}/",
        "requests list": f"/provisioning/?lab={lab.pk}",
    }
    results: dict = {"pages": {}}
    for label, (endpoints, clusters) in (("small", (2, 1)), ("large", (200, 50))):
        build(endpoints, clusters, label)
        t0 = time.perf_counter()
        alerts_evaluate(institution_id=institution.pk, now=now)
        results[f"alerts_evaluate_{label}_s"] = round(time.perf_counter() - t0, 3)
        for page, url in pages.items():
            results["pages"].setdefault(page, {})[label] = _count_and_ms(web, url, requests)
    student = Client()
    student.force_login(member)
    query = (
        f"/provisioning/estimate/?allocation={allocation.pk}&title=70B&deployment_model=cluster"
        f"&gpu_type_id={H100}&gpu_count=8&node_count=8&cloud=SECURE&expected_hours=100"
        "&container_disk_gb=50&volume_disk_gb=0&network_volume_gb=2000&restart_minutes=10"
        "&model_params_billion=70&bytes_per_param=14&write_mb_per_s=400"
        "&runs_distributed=on&spending_limit_raised=on"
    )
    results["estimate_64_gpu_cluster"] = _count_and_ms(
        student, query, requests, HTTP_HX_REQUEST="true"
    )
    # The arithmetic alone (assessment.estimate_request), apart from the page around it.
    from labgov.provisioning.assessment import estimate_request
    from labgov.provisioning.models import ProvisioningRequest

    req = ProvisioningRequest(
        deployment_model="cluster",
        gpu_type_id=H100,
        gpu_count=8,
        node_count=8,
        expected_hours=100,
        container_disk_gb=50,
        network_volume_gb=2000,
        model_params_billion=70,
        bytes_per_param=14,
        write_mb_per_s=400,
    )
    gpu = GpuType.objects.get(gpu_id=H100)
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        estimate_request(req, gpu)
        times.append((time.perf_counter() - t0) * 1000)
    results["estimate_arithmetic_ms_median"] = round(statistics.median(times), 3)
    results["load_average"] = os.getloadavg()[0]
    travel.stop()
    return results


def main_fleet(requests: int) -> None:
    out = subprocess.run(  # noqa: S603 - ourselves, in a process of its own
        [sys.executable, __file__, "--fleet-one", "--requests", str(requests)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'':22}{'2 ep + 1 cl':>22}{'200 ep + 50 cl':>22}")
    for page, sizes in result["pages"].items():
        (qs, ms), (ql, ml) = sizes["small"], sizes["large"]
        print(f"{page:22}{f'{qs} q, {ms} ms':>22}{f'{ql} q, {ml} ms':>22}")
    print(
        f"alert evaluation (s)  {result['alerts_evaluate_small_s']:>22}"
        f"{result['alerts_evaluate_large_s']:>22}"
    )
    queries, ms = result["estimate_64_gpu_cluster"]
    verdict = "within" if ms < 50 else "OVER"
    print(f"estimate, 64-GPU cluster: {ms} ms median, {queries} queries ({verdict} 50 ms)")
    print(
        f"  of which the arithmetic: {result['estimate_arithmetic_ms_median']} ms median "
        f"(load average {result['load_average']:.1f} while measured)"
    )
    out_dir = ROOT / "bench/results"
    out_dir.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    (out_dir / f"idle_bench_fleet_{stamp}.json").write_text(json.dumps(result, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fleet", action="store_true", help="endpoints and clusters at scale")
    parser.add_argument("--fleet-one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fleet_one:
        print(json.dumps(fleet(args.requests)))
        return
    if args.fleet:
        main_fleet(args.requests)
        return
    if args.one:
        print(json.dumps(one(args.one, args.requests)))
        return
    results = []
    for pods in (args.small, args.pods):
        out = subprocess.run(  # noqa: S603 - ourselves, one size per process
            [sys.executable, __file__, "--one", str(pods), "--requests", str(args.requests)],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    small, large = results
    print(f"{'':34}{small['pods']:>12}{large['pods']:>12}{'ratio':>8}")
    rows = [
        ("samples written (30 days)", "samples_written"),
        ("poll pass, median (s)", "poll_pass_s_median"),
        ("auto-stop step, median (s)", "autostop_step_s_median"),
        ("alert evaluation, first (s)", "alerts_evaluate_first_s"),
        ("alert evaluation, again (s)", "alerts_evaluate_again_s"),
        ("lab page, median (ms)", "lab_page_ms_median"),
        ("idle panel, median (ms)", "idle_panel_ms_median"),
    ]
    for label, key in rows:
        a, b = small[key], large[key]
        ratio = f"{b / a:.2f}" if a else ""
        print(f"{label:34}{a:>12}{b:>12}{ratio:>8}")
    for r in results:
        print(
            f"{r['pods']} pods: after prune {r['after_prune']}, after VACUUM FULL "
            f"{r['after_vacuum_full']}; prune {r['prune']}; idle alerts "
            f"{r['running_idle_alerts']}"
        )
    out_dir = ROOT / "bench/results"
    out_dir.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    (out_dir / f"idle_bench_{stamp}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
