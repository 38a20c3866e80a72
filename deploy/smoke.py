"""Start labgov's production stack from the files in deploy/ on this machine, check it through
nginx, and stop it again.

    .venv/bin/python deploy/smoke.py        (or scripts/deploy-smoke)

What runs, each as its systemd unit (deploy/systemd/) says, with only paths and ports changed:
the web unit's `migrate` and `collectstatic`, gunicorn with deploy/gunicorn.conf.py, the Celery
worker and Celery beat; Debian's nginx (installed with apt-get when missing) with
deploy/nginx.conf and a self-signed certificate; the Runpod simulator as a process. DEBUG=0,
every secret from the environment. PostgreSQL and Redis must be running already: the script
creates a database of its own (dropped at the end) on the server of LABGOV_SMOKE_DATABASE_URL
(else DATABASE_URL, else postgresql://postgres@127.0.0.1:5432/postgres) and uses a queue of its
own in the Redis database of LABGOV_SMOKE_REDIS_URL (else LABGOV_TEST_REDIS_URL, else
redis://127.0.0.1:6379/0), deleted at the end; that Redis database is also the shared cache
(LABGOV_CACHE_URL, as env.example sets it: sessions and the dashboard page cache). Every
port is picked free at random, so runs beside each other and beside the test suite do not
collide. With LABGOV_SMOKE_COLLECTED_STATIC naming what collect_static() made (the web unit's
collectstatic, run once for the whole test suite), a copy of it stands for that step. With
LABGOV_SMOKE_DATABASE_TEMPLATE naming a migrated database on that server (the test suite's
template, tests/fixtures_db.py), its database is a copy of it, and the web unit's `migrate`
then checks that nothing is left to apply instead of migrating from nothing.

Through nginx it checks the health endpoint, a login, static files and their cache headers,
the HTTPS-only cookie policy behind the proxy (Secure cookies and HSTS when nginx says the
request came over https; plain http redirected), /metrics behind its token, a sync the
worker runs on beat's schedule (worker and beat start after the spend page was read once), and
that page showing what it synced at once: the worker's writes retire the copy the web kept.
Whatever happens, it then stops every process it started, checks that none is left and that
every port is free, and exits 0 only if all checks passed.
"""

import contextlib
import datetime as dt
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
UNITS = ("labgov-web", "labgov-worker", "labgov-beat")
# What the shipped files name, and so what the script replaces for a run on this machine.
INSTALL_DIR = "/opt/labgov"
VAR_DIR = "/var/lib/labgov"


class SmokeFailure(Exception):
    pass


def log(message: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the shipped files -------------------------------------------------------------------


def unit_commands(unit: str) -> dict[str, list[str]]:
    """ExecStartPre/ExecStart command lines of a shipped systemd unit, and its
    WorkingDirectory, as written in the file."""
    found: dict[str, list[str]] = {}
    for line in (DEPLOY / "systemd" / f"{unit}.service").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("ExecStartPre", "ExecStart", "WorkingDirectory"):
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def localized(command: str, var_dir: Path) -> list[str]:
    """A unit's command for this checkout: its virtualenv and a scratch directory instead of
    /opt/labgov/.venv and /var/lib/labgov. Nothing else in the command changes."""
    command = command.replace(f"{INSTALL_DIR}/.venv/bin/", f"{VENV_BIN}/")
    command = command.replace(f"{VAR_DIR}/", f"{var_dir}/")
    return shlex.split(command)


def nginx_site(*, http_port: int, https_port: int, upstream_port: int, tmp: Path) -> str:
    """deploy/nginx.conf with only its ports and paths replaced; each replacement must find
    its text, so a change to the shipped file cannot silently skip a check."""
    text = (DEPLOY / "nginx.conf").read_text()
    replacements = [
        (r"listen 80;", f"listen 127.0.0.1:{http_port};"),
        (r"listen 443 ssl", f"listen 127.0.0.1:{https_port} ssl"),
        (r"/etc/letsencrypt/live/labgov\.example\.edu/fullchain\.pem", str(tmp / "cert.pem")),
        (r"/etc/letsencrypt/live/labgov\.example\.edu/privkey\.pem", str(tmp / "key.pem")),
        (re.escape(f"{VAR_DIR}/static/"), f"{tmp}/static/"),
        (r"http://127\.0\.0\.1:8000", f"http://127.0.0.1:{upstream_port}"),
        # The HTTP server's redirect names the standard port; here it is a random one.
        (
            r"return 301 https://\$host\$request_uri;",
            f"return 301 https://$host:{https_port}$request_uri;",
        ),
    ]
    for pattern, replacement in replacements:
        text, count = re.subn(pattern, replacement, text)
        if count == 0:
            raise SmokeFailure(f"deploy/nginx.conf no longer contains {pattern!r}")
    return text


def nginx_main(tmp: Path, site: Path) -> str:
    """The part /etc/nginx/nginx.conf plays on a real install, for a private instance."""
    return f"""daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 128; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {tmp}/nginx-access.log;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    include {site};
}}
"""


# --- this machine ------------------------------------------------------------------------


def nginx_binary() -> str:
    found = shutil.which("nginx") or "/usr/sbin/nginx"
    if Path(found).exists():
        return found
    log("nginx is missing: installing Debian's nginx with apt-get")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "nginx"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=True)
        subprocess.run(install, env=env, capture_output=True, check=True)
    return shutil.which("nginx") or "/usr/sbin/nginx"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def self_signed_certificate(tmp: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (tmp / "key.pem").chmod(0o600)


class Stack:
    """The processes the script started, each in a session of its own so that stopping it
    stops its children too (gunicorn's and Celery's workers)."""

    def __init__(self, tmp: Path, env: dict):
        self.tmp = tmp
        self.env = env
        self.processes: dict[str, subprocess.Popen] = {}

    def run(self, name: str, *argvs: list[str], timeout: float = 120) -> None:
        """Run commands side by side (one-shot steps that do not depend on each other) and
        wait for all of them; any failure fails the run."""
        started = time.monotonic()
        running = [
            subprocess.Popen(
                argv,
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            for argv in argvs
        ]
        for argv, process in zip(argvs, running, strict=True):
            try:
                _, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for other in running:
                    other.kill()
                raise SmokeFailure(f"{' '.join(argv[:3])} took over {timeout} s") from None
            if process.returncode != 0:
                raise SmokeFailure(f"{' '.join(argv[:3])} failed:\n{stderr[-3000:]}")
        log(f"{name}: done in {time.monotonic() - started:.1f} s")

    def start(self, name: str, argv: list[str]) -> None:
        out = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.processes[name] = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        log(f"{name}: started (pid {self.processes[name].pid})")

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise SmokeFailure(f"{name} exited with {process.returncode}:\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.tmp / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> list[str]:
        """SIGTERM every process group (nginx: SIGQUIT, its graceful stop), wait, SIGKILL what
        is left; returns what had to be killed or is still there."""
        problems = []
        for name, process in self.processes.items():
            if process.poll() is None:
                sig = signal.SIGQUIT if name == "nginx" else signal.SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
        stopping = time.monotonic()
        deadline = stopping + 15
        for name, process in self.processes.items():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
                log(f"{name}: stopped after {time.monotonic() - stopping:.1f} s")
            except subprocess.TimeoutExpired:
                problems.append(f"{name} did not stop in time; killed")
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        # The whole session must be gone: a gunicorn or Celery child left behind holds ports
        # and connections.
        for name, process in self.processes.items():
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                continue
            problems.append(f"{name} left processes behind; killed")
            os.killpg(process.pid, signal.SIGKILL)
        return problems


def production_env(var_dir: Path) -> dict[str, str]:
    """The environment every unit of the stack gets: DEBUG=0, fresh secrets, and var_dir for
    /var/lib/labgov (static files in var_dir/static)."""
    from cryptography.fernet import Fernet

    return {
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(var_dir),
        "LANG": "C.UTF-8",
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "LABGOV_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "ALLOWED_HOSTS": "127.0.0.1",
        "STATIC_ROOT": str(var_dir / "static"),
        "LABGOV_VAR_DIR": str(var_dir),
    }


def collectstatic_command(var_dir: Path) -> list[str]:
    """The web unit's collectstatic ExecStartPre, for this checkout."""
    found = [c for c in unit_commands("labgov-web")["ExecStartPre"] if "collectstatic" in c]
    if len(found) != 1:
        raise SmokeFailure(f"the web unit should run collectstatic once, not {len(found)} times")
    return localized(found[0], var_dir)


def collect_static(var_dir: Path) -> Path:
    """Run the web unit's collectstatic as the stack runs it (DEBUG=0: the compressed manifest
    storage) into var_dir/static and return that directory. The test suite runs it once for
    the whole run and hands the result to this script (LABGOV_SMOKE_COLLECTED_STATIC) and to
    the manifest test: it is the slowest step of the stack's start (every file hashed, then
    compressed twice)."""
    var_dir.mkdir(parents=True, exist_ok=True)
    env = {**production_env(var_dir), "DATABASE_URL": "sqlite://:memory:"}
    done = subprocess.run(
        collectstatic_command(var_dir),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    if done.returncode != 0:
        raise SmokeFailure(f"collectstatic failed:\n{done.stderr[-3000:]}")
    return var_dir / "static"


# --- the run -----------------------------------------------------------------------------


def _with_database(url: str, name: str) -> str:
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{name}"))


def _admin_connection(url: str):
    import psycopg

    return psycopg.connect(_with_database(url, "postgres"), autocommit=True, connect_timeout=5)


SETUP = """
from labgov.accounts.models import Institution, Membership, Role, User
from labgov.runpod.services import account_connect
import os
institution = Institution.objects.create(name="Smoke University", slug="smoke")
user = User.objects.create_user("smoke-admin", "smoke@example.edu", os.environ["SMOKE_PASSWORD"])
Membership.objects.create(user=user, institution=institution, role=Role.INSTITUTION_ADMIN)
account_connect(actor=user, institution=institution, name="Simulator",
                api_key="sim-key", base_url=os.environ["SMOKE_SIMULATOR_URL"])
"""


def _terminated(signum, frame):
    raise SmokeFailure(f"stopped by signal {signum}")


def main() -> int:
    started = time.monotonic()
    # A SIGTERM (a test runner's timeout) fails the run through the same clean-up.
    signal.signal(signal.SIGTERM, _terminated)
    server_url = (
        os.environ.get("LABGOV_SMOKE_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    if not server_url.startswith("postgres"):
        raise SmokeFailure(f"the smoke test needs PostgreSQL, not {server_url.split(':')[0]}")
    redis_url = (
        os.environ.get("LABGOV_SMOKE_REDIS_URL")
        or os.environ.get("LABGOV_TEST_REDIS_URL")
        or "redis://127.0.0.1:6379/0"
    )
    suffix = secrets.token_hex(4)
    database = f"{urlparse(server_url).path.lstrip('/') or 'labgov'}_smoke_{suffix}"[:63]
    queue = f"labgov-smoke-{suffix}"
    collected = os.environ.get("LABGOV_SMOKE_COLLECTED_STATIC")
    if collected and not (Path(collected) / "staticfiles.json").is_file():
        raise SmokeFailure(f"LABGOV_SMOKE_COLLECTED_STATIC={collected} has no staticfiles.json")
    nginx = nginx_binary()
    tmp = Path(tempfile.mkdtemp(prefix="labgov-smoke-"))
    tmp.chmod(0o755)  # nginx's workers (www-data) read the static files
    ports = {name: free_port() for name in ("gunicorn", "http", "https", "simulator")}
    password = secrets.token_urlsafe(16)
    metrics_token = secrets.token_urlsafe(24)
    env = {
        **production_env(tmp),
        "CSRF_TRUSTED_ORIGINS": f"https://127.0.0.1:{ports['https']}",
        "DATABASE_URL": _with_database(server_url, database),
        "CELERY_BROKER_URL": redis_url,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        # As env.example ships it: sessions and dashboard pages in the shared cache, which the
        # worker's writes must retire (checked below).
        "LABGOV_CACHE_URL": redis_url,
        "GUNICORN_BIND": f"127.0.0.1:{ports['gunicorn']}",
        "GUNICORN_WORKERS": "2",
        "LABGOV_RUNPOD_HOSTS": "127.0.0.1",
        "LABGOV_SYNC_INTERVAL_SECONDS": "3",
        "LABGOV_SYNC_FIRST_DAYS": "1",
        "LABGOV_METRICS_TOKEN": metrics_token,
        "LABGOV_LOG_FORMAT": "json",
        "EMAIL_BACKEND": "django.core.mail.backends.dummy.EmailBackend",
        "SMOKE_PASSWORD": password,
        "SMOKE_SIMULATOR_URL": f"http://127.0.0.1:{ports['simulator']}",
    }
    stack = Stack(tmp, env)
    failures: list[str] = []
    try:
        template = os.environ.get("LABGOV_SMOKE_DATABASE_TEMPLATE")
        with _admin_connection(server_url) as conn:
            if template:
                conn.execute(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
                log(f"database {database}: a copy of the migrated {template}")
            else:
                conn.execute(f'CREATE DATABASE "{database}"')
        log(f"database {database}, redis {redis_url} queue {queue}, scratch {tmp}")
        stack.start(
            "simulator",
            [
                f"{VENV_BIN}/python",
                "manage.py",
                "runpod_simulator",
                "--port",
                str(ports["simulator"]),
                "--now",
                "wall",
            ],
        )
        web = unit_commands("labgov-web")
        pre = [localized(command, tmp) for command in web["ExecStartPre"]]
        if collected:
            # The caller ran the web unit's collectstatic already (collect_static): a copy
            # of its output stands for that step.
            pre.remove(collectstatic_command(tmp))
            shutil.copytree(collected, tmp / "static")
            log(f"collectstatic: the web unit's command ran before this script, into {collected}")
        # The web unit's ExecStartPre steps (migrate, collectstatic) need nothing of each
        # other, so they run side by side here (systemd runs them one after the other).
        stack.run("the web unit's ExecStartPre (" + ", ".join(argv[2] for argv in pre) + ")", *pre)
        stack.start("gunicorn", localized(web["ExecStart"][0], tmp))

        def start_jobs() -> None:
            # The worker and beat start once the checks have read a page before any sync.
            stack.start("worker", localized(unit_commands("labgov-worker")["ExecStart"][0], tmp))
            stack.start("beat", localized(unit_commands("labgov-beat")["ExecStart"][0], tmp))

        # An institution, its admin and the simulator's account, while the stack boots.
        stack.run("setup", [f"{VENV_BIN}/python", "manage.py", "shell", "-c", SETUP])
        self_signed_certificate(tmp)
        site = tmp / "labgov-site.conf"
        site.write_text(
            nginx_site(
                http_port=ports["http"],
                https_port=ports["https"],
                upstream_port=ports["gunicorn"],
                tmp=tmp,
            )
        )
        (tmp / "nginx.conf").write_text(nginx_main(tmp, site))
        stack.run("nginx -t", [nginx, "-t", "-q", "-p", str(tmp), "-c", str(tmp / "nginx.conf")])
        stack.start("nginx", [nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf")])
        checks(stack, ports, password, metrics_token, env["DATABASE_URL"], failures, start_jobs)
    except SmokeFailure as exc:
        failures.append(str(exc))
    except Exception as exc:  # report, then clean up like any other failure
        failures.append(f"{exc.__class__.__name__}: {exc}")
    finally:
        if failures:
            for name in stack.processes:
                print(f"--- {name}.log (last lines)\n{stack.tail(name)}", file=sys.stderr)
        failures += stack.stop()
        failures += cleanup(server_url, database, redis_url, queue, tmp, ports)
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    log(f"{'FAILED' if failures else 'passed'} in {time.monotonic() - started:.1f} s")
    return 1 if failures else 0


def cleanup(server_url, database, redis_url, queue, tmp: Path, ports) -> list[str]:
    problems = []
    try:
        with _admin_connection(server_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    except Exception as exc:
        problems.append(f"could not drop database {database}: {exc}")
    try:
        import redis

        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(f"*{queue}*"))
        if keys:
            client.delete(*keys)
    except Exception as exc:
        problems.append(f"could not remove the Redis queue {queue}: {exc}")
    shutil.rmtree(tmp, ignore_errors=True)
    problems += [
        f"port {port} ({name}) is still in use" for name, port in ports.items() if port_in_use(port)
    ]
    return problems


# --- the checks --------------------------------------------------------------------------


# What the institution's spend page says while no unattributed spend is synced (the smoke
# account has no attribution rules, so all that its sync brings is unattributed).
ALL_ATTRIBUTED = "All spend in this range is attributed."


def checks(
    stack: Stack, ports, password, metrics_token, database_url, failures, start_jobs
) -> None:
    import httpx

    base = f"https://127.0.0.1:{ports['https']}"
    context = ssl.create_default_context(cafile=str(stack.tmp / "cert.pem"))

    def check(condition: bool, what: str) -> None:
        log(("ok: " if condition else "FAILED: ") + what)
        if not condition:
            failures.append(what)

    with httpx.Client(base_url=base, verify=context, timeout=10) as client:
        deadline = time.monotonic() + 30
        while True:
            stack.check_alive()
            try:
                health = client.get("/healthz")
                if health.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SmokeFailure("/healthz did not answer 200 through nginx within 30 s")
            time.sleep(0.3)
        body = health.json()
        check(
            body["database"] == {"vendor": "postgresql", "state": "ok"}
            and body["broker"]["state"] == "ok",
            f"/healthz through nginx: PostgreSQL and Redis ok ({body})",
        )
        hsts = health.headers.get("strict-transport-security", "")
        check(
            hsts == "max-age=31536000; includeSubDomains; preload",
            f"HSTS as configured over https ({hsts!r})",
        )
        plain = httpx.get(f"http://127.0.0.1:{ports['http']}/login/", timeout=10)
        check(
            plain.status_code == 301 and plain.headers.get("location") == f"{base}/login/",
            f"plain http is redirected to https by nginx ({plain.status_code})",
        )
        direct = httpx.get(f"http://127.0.0.1:{ports['gunicorn']}/login/", timeout=10)
        check(
            direct.status_code == 301 and direct.headers["location"].startswith("https://"),
            "gunicorn itself sends a request without nginx's X-Forwarded-Proto to https",
        )
        spoofed = client.get("/login/", headers={"X-Forwarded-Proto": "http"})
        check(
            spoofed.status_code == 200,
            "a client's own X-Forwarded-Proto is replaced by nginx's ($scheme)",
        )

        login_page = client.get("/login/")
        csrf_cookie = _set_cookie(login_page, "csrftoken")
        check(
            login_page.status_code == 200 and "secure" in csrf_cookie.lower(),
            f"the CSRF cookie is Secure behind the proxy ({csrf_cookie!r})",
        )
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text)
        logged_in = client.post(
            "/login/",
            data={
                "username": "smoke-admin",
                "password": password,
                "csrfmiddlewaretoken": token.group(1) if token else "",
            },
            headers={"Origin": base, "Referer": f"{base}/login/"},
        )
        session_cookie = _set_cookie(logged_in, "sessionid")
        check(
            logged_in.status_code == 302 and logged_in.headers.get("location") == "/",
            f"login through nginx ({logged_in.status_code})",
        )
        check(
            "secure" in session_cookie.lower() and "httponly" in session_cookie.lower(),
            f"the session cookie is Secure and HttpOnly ({session_cookie!r})",
        )
        home = client.get("/")
        check(home.status_code == 200 and "smoke-admin" in home.text, "the home page, signed in")

        css = re.search(r'href="(/static/css/labgov\.[0-9a-f]{12}\.css)"', login_page.text)
        check(css is not None, "pages link hashed static files")
        if css:
            static = client.get(css.group(1), headers={"Accept-Encoding": "identity"})
            cache = static.headers.get("cache-control", "")
            check(
                static.status_code == 200
                and static.headers.get("content-type", "").startswith("text/css")
                and "public" in cache
                and "immutable" in cache
                and "max-age=2592000" in cache
                and "expires" in static.headers,
                f"nginx serves static files with cache headers ({static.status_code}, {cache!r})",
            )
            missing = client.get("/static/css/nothing-here.css")
            check(missing.status_code == 404, "a missing static file is a 404")

        refused = client.get("/metrics")
        check(refused.status_code == 403, f"/metrics refuses without the token ({refused})")

        # Before the worker runs, the spend page has nothing synced, and the web process keeps
        # it in the shared cache (for up to LABGOV_PAGE_CACHE_SECONDS, 300 s).
        spend = client.get("/spend/institution/")
        check(
            spend.status_code == 200 and ALL_ATTRIBUTED in spend.text,
            f"the institution's spend page before any sync ({spend.status_code})",
        )
        start_jobs()
        run = wait_for_scheduled_sync(stack, database_url, deadline=time.monotonic() + 60)
        check(
            run is not None and run[0] == "succeeded" and (run[1] or {}).get("records", 0) > 0,
            f"the worker ran a sync on beat's schedule ({run})",
        )
        # The worker's writes move the data version on in the shared cache, so the web
        # process computes the page again instead of serving the copy it kept (a few seconds'
        # grace for the sync's last commit).
        shown = False
        for _ in range(20):
            spend = client.get("/spend/institution/")
            shown = spend.status_code == 200 and ALL_ATTRIBUTED not in spend.text
            if shown:
                break
            time.sleep(0.25)
        check(
            shown,
            "the spend page shows the worker's sync at once: its writes retired the page the "
            "web process kept in the shared cache",
        )
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {metrics_token}"})
        check(
            metrics.status_code == 200
            and 'labgov_sync_lag_seconds{account="Simulator"' in metrics.text
            and "labgov_http_request_duration_seconds_bucket" in metrics.text,
            f"/metrics with the token: sync lag per account, request latency ({metrics})",
        )
        stack.check_alive()


def _set_cookie(response, name: str) -> str:
    for header in response.headers.get_list("set-cookie"):
        if header.startswith(f"{name}="):
            return header
    return ""


def wait_for_scheduled_sync(stack: Stack, database_url: str, deadline: float):
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            stack.check_alive()
            row = conn.execute(
                "SELECT status, counts FROM runpod_syncrun WHERE trigger = 'schedule' "
                "AND status <> 'running' ORDER BY id LIMIT 1"
            ).fetchone()
            if row is not None:
                return row
            time.sleep(0.5)
    return None


if __name__ == "__main__":
    sys.exit(main())
