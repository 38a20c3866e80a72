"""ColdFront 1.1.10 served beside labgov, for bench/load_bench.py --coldfront to measure in the
same run.

ColdFront (the HPC centres' allocation portal, from PyPI) is installed into a venv of its own
outside the repository (`--coldfront-venv`, by default .coldfront-venv beside the checkout;
made and filled with pip when missing: coldfront==1.1.10, gunicorn, psycopg2-binary), pointed
at a PostgreSQL database of its own (ColdFront's DB_URL), set up as its docs say
(`coldfront initial_setup`, its migrations and defaults), filled with `coldfront
load_test_data` scaled to `--coldfront-times` times itself by bench/coldfront_data.py (run by
ColdFront's Python, through its own models), and served with DEBUG=False by gunicorn with 2
sync workers, with ColdFront's own settings otherwise (its sessions are saved on every
request, as it ships them). A PI and the admin log in through ColdFront's login form.

Which page answers which of labgov's (the first of each is the ratio that counts; another is
measured in the same run and shown beside it):
- student ("My spend": what is mine): the PI's allocation list, /allocation/;
- lab (a lab admin's lab, one lab's page): the PI's project, /project/<its id>/: one project's
  page, with its people, allocations, grants and publications. Also the PI's project list,
  /project/, which earlier runs took as the counterpart: for the PI of load_test_data, who has
  one project, it is a list of one row, and it answered 47-61 requests/s where the project's
  page answered 27 and the issue's own figure for ColdFront's lab page is 25 (issue 24);
- finance (money across the institution): the admin's list of every allocation,
  /allocation/?show_all_allocations=on (600 allocations at 100 times, 25 a page).
Each is checked to answer 200 with that person's content before it is measured, and every
request wrk sends is read back from gunicorn's access log (all must be 200: a session that
lapsed would answer 302 to the login page, which wrk counts as a success).
"""

import re
import shutil
import subprocess
import time
from pathlib import Path

import procs  # bench/: run by load_bench.py, whose folder is on the path

ROOT = Path(__file__).resolve().parent.parent
VERSION = "1.1.10"
DEFAULT_VENV = ROOT.parent / ".coldfront-venv"
PASSWORD = "test1234"  # noqa: S105 - load_test_data gives it to everyone
PI = "cgray"
ADMIN = "admin"
# labgov's page: its ColdFront counterparts, (who, path), the first the one its ratio is of.
# "{project}": the PI's project's id in ColdFront's database (pi_project).
PAGES = {
    "student": [(PI, "/allocation/")],
    "lab": [(PI, "/project/{project}/"), (PI, "/project/")],
    "finance": [(ADMIN, "/allocation/?show_all_allocations=on")],
}


def ensure_venv(venv: Path) -> Path:
    """ColdFront's venv, made when missing; the path of its bin directory."""
    python = venv / "bin" / "python"
    probe = "import importlib.metadata as m; print(m.version('coldfront'))"
    if python.exists():
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == VERSION:
            return venv / "bin"
    print(f"installing ColdFront {VERSION} into {venv}", flush=True)
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    packages = [f"coldfront=={VERSION}", "gunicorn", "psycopg2-binary"]
    subprocess.run([python, "-m", "pip", "install", "-q", *packages], check=True)
    return venv / "bin"


def environment(database: str, static_root: Path, home: Path) -> dict:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "DJANGO_SETTINGS_MODULE": "coldfront.config.settings",
        "DB_URL": f"psql://postgres@127.0.0.1:5432/{database}",
        "DEBUG": "False",
        # A fixed key: the sessions made at login outlive one server (reused databases).
        "SECRET_KEY": "labgov-load-bench-coldfront-" + database,
        "STATIC_ROOT": str(static_root),
        "ALLOWED_HOSTS": "127.0.0.1",
    }


def _project_count(database: str) -> int | None:
    import psycopg

    url = f"postgresql://postgres@127.0.0.1:5432/{database}"
    try:
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT count(*) FROM project_project").fetchone()[0]
    except psycopg.Error:
        return None


def ensure_database(bin_dir: Path, database: str, times: int, reuse: bool, env: dict) -> str:
    """ColdFront's database with its test data at `times` times itself: kept from an earlier
    run when `reuse` and it holds exactly that, else built afresh. Says which."""
    import psycopg

    if reuse and _project_count(database) == 2 * times:
        return f"reusing {database}"
    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    started = time.perf_counter()

    def run(*command):
        done = subprocess.run(command, env=env, cwd=env["HOME"], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
        return done.stdout.strip()

    run(f"{bin_dir}/coldfront", "initial_setup", "-f")
    run(f"{bin_dir}/coldfront", "load_test_data")
    # -P: bench/, this file's folder, must not come first on its path (it would be "coldfront").
    summary = run(f"{bin_dir}/python", "-P", str(ROOT / "bench" / "coldfront_data.py"), str(times))
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{database}") as conn:
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    return f"built {database} in {time.perf_counter() - started:.0f} s: {summary}"


def pi_project(database: str) -> int:
    """The id of the PI's project (load_test_data gives Carl Gray one)."""
    import psycopg

    url = f"postgresql://postgres@127.0.0.1:5432/{database}"
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT p.id FROM project_project p JOIN auth_user u ON u.id = p.pi_id"
            " WHERE u.username = %s ORDER BY p.id LIMIT 1",
            [PI],
        ).fetchone()
    if row is None:
        raise SystemExit(f"ColdFront's database {database} holds no project of {PI}")
    return row[0]


def drop_database(database: str) -> None:
    import psycopg

    admin = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


class Server:
    """ColdFront under gunicorn, 2 sync workers, its access log (status, path) in a file."""

    def __init__(self, bin_dir: Path, env: dict, port: int, log_path: Path):
        self.bin_dir, self.env, self.port, self.log_path = bin_dir, env, port, log_path
        self.process = None

    def __enter__(self):
        subprocess.run(
            [f"{self.bin_dir}/coldfront", "collectstatic", "--noinput", "-v0"],
            env=self.env,
            cwd=self.env["HOME"],
            check=True,
        )
        out = open(self.log_path.with_suffix(".err"), "wb")  # noqa: SIM115 - closed below
        self.process = subprocess.Popen(
            [
                f"{self.bin_dir}/gunicorn",
                "--workers",
                "2",
                "--worker-class",
                "sync",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--access-logfile",
                str(self.log_path),
                "--access-logformat",
                "%(s)s %(r)s",
                "coldfront.config.wsgi",
            ],
            env=self.env,
            cwd=self.env["HOME"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        return self

    def __exit__(self, *exc):
        procs.stop_group(self.process)

    def statuses(self, path: str) -> dict[str, int]:
        """How many requests of `path` (with its query) ColdFront answered with each status."""
        counts: dict[str, int] = {}
        for line in self.log_path.read_text(errors="replace").splitlines():
            fields = line.split()  # status, method, path, protocol
            if len(fields) == 4 and fields[2] == path:
                counts[fields[0]] = counts.get(fields[0], 0) + 1
        return counts


def _cookies(response) -> dict[str, str]:
    """The cookies a response sets, Secure ones too (ColdFront marks its session cookie
    Secure; the benchmark speaks plain http to gunicorn, as labgov's side does)."""
    found = {}
    for header in response.headers.get_list("set-cookie"):
        name, _, rest = header.partition("=")
        found[name.strip()] = rest.split(";", 1)[0]
    return found


def login(base: str, username: str) -> str:
    """Logs `username` in through ColdFront's login form; the session cookie's value."""
    import httpx

    form = httpx.get(f"{base}/user/login", timeout=30)
    csrf = _cookies(form)["csrftoken"]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    answer = httpx.post(
        f"{base}/user/login",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        cookies={"csrftoken": csrf},
        timeout=30,
    )
    session = _cookies(answer).get("sessionid")
    if answer.status_code != 302 or not session:
        raise SystemExit(f"ColdFront's login of {username} answered {answer.status_code}")
    return session


def expected(page: str, pattern: str, times: int) -> list[str]:
    """What the page must show for the person it is measured as (load_test_data's names and
    counts: Carl Gray holds 4 allocations of 1 project; each copy adds 6 allocations).
    `pattern`: the page's path as PAGES gives it."""
    if page == "student":
        return ["cgray", "Allocations: 4", "Chemistry-cgray", "Angular momentum in QGP"]
    if page == "lab" and pattern == "/project/":
        return ["cgray", "Projects: 1", "Angular momentum in QGP holography"]
    if page == "lab":
        return ["Project Detail", "Angular momentum in QGP holography", "cgray@example.com",
                "Chemistry-cgray", "Budgetstorage"]  # fmt: skip
    return ["admin", f"Allocations: {6 * times}", "Stephanie Foster", "cgray001"]


def check_page(base: str, path: str, cookie: str, texts: list[str]) -> None:
    import httpx

    response = httpx.get(f"{base}{path}", cookies={"sessionid": cookie}, timeout=60)
    missing = [text for text in texts if text not in response.text]
    if response.status_code != 200 or missing:
        raise SystemExit(f"ColdFront's {path} answered {response.status_code}, missing {missing}")


def wait_ready(base: str, deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/user/login", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("ColdFront's gunicorn did not answer in time")


def scratch(tmp: Path) -> tuple[Path, Path]:
    """ColdFront's HOME (its working directory) and STATIC_ROOT under the run's scratch."""
    home, static = tmp / "coldfront", tmp / "coldfront" / "static"
    shutil.rmtree(home, ignore_errors=True)
    static.mkdir(parents=True)
    return home, static
