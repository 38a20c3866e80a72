"""The shipped deploy/ files: systemd units that systemd accepts, and a compose file that runs
exactly the units' commands."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
VENV_BIN = "/opt/labgov/.venv/bin/"


def unit_lines(unit: Path, key: str) -> list[str]:
    return [
        line.partition("=")[2].strip()
        for line in unit.read_text().splitlines()
        if line.partition("=")[0].strip() == key
    ]


def compose_commands() -> dict[str, str]:
    """`command:` of each service in docker-compose.yml (a two-level YAML this test reads
    line by line: no YAML parser is installed)."""
    commands, service = {}, None
    for line in (DEPLOY / "docker-compose.yml").read_text().splitlines():
        if match := re.match(r"^  ([a-z-]+):\s*$", line):
            service = match.group(1)
        elif match := re.match(r"^    command: (.+)$", line):
            commands[service] = match.group(1)
    return commands


def test_systemd_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    # verify checks that every command exists: give it /opt/labgov/.venv/bin under a scratch
    # root, linked to this checkout's virtualenv; nothing else in the units changes.
    install = tmp_path / "opt" / "labgov"
    (install / ".venv" / "bin").mkdir(parents=True)
    for name in ("python", "celery", "gunicorn"):
        (install / ".venv" / "bin" / name).symlink_to(ROOT / ".venv" / "bin" / name)
    copies = []
    for unit in UNITS:
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace("/opt/labgov", str(install)))
        copies.append(str(copy))
    result = subprocess.run(
        [analyze, "verify", *copies], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    assert {unit.name for unit in UNITS} == {
        "labgov-web.service",
        "labgov-worker.service",
        "labgov-beat.service",
    }


def test_compose_runs_the_same_commands_as_the_systemd_units():
    def unit(name: str) -> list[list[str]]:
        path = DEPLOY / "systemd" / f"labgov-{name}.service"
        lines = unit_lines(path, "ExecStartPre") + unit_lines(path, "ExecStart")
        return [shlex.split(line.replace(VENV_BIN, "")) for line in lines]

    compose = compose_commands()
    web = shlex.split(compose["web"])
    assert web[:2] == ["sh", "-c"]
    assert [shlex.split(part) for part in web[2].split(" && ")] == unit("web")
    assert [shlex.split(compose["worker"])] == unit("worker")
    assert [shlex.split(compose["beat"])] == unit("beat")


def test_every_unit_reads_the_environment_file_and_runs_in_the_install():
    for unit in UNITS:
        assert unit_lines(unit, "EnvironmentFile") == ["/etc/labgov/env"], unit.name
        assert unit_lines(unit, "WorkingDirectory") == ["/opt/labgov"], unit.name
        assert unit_lines(unit, "User") == ["labgov"], unit.name


def test_compose_keeps_pages_in_a_bounded_redis_of_their_own():
    """Pages can never crowd out the broker or sessions: they live in their own instance, with
    a memory limit and least-recently-used eviction; web, worker and beat all point at it."""
    compose = (DEPLOY / "docker-compose.yml").read_text()
    pages = compose_commands()["redis-pages"]
    assert "--maxmemory" in pages and "allkeys-lru" in pages
    assert "maxmemory" not in compose_commands().get("redis", "")
    assert compose.count("LABGOV_PAGE_CACHE_URL: redis://redis-pages:6379/0") == 3


def test_compose_trusts_only_the_proxy_container_for_client_addresses():
    """A LAN client or another container must not pick the address the login lockout counts:
    only the proxy's fixed address is believed for X-Forwarded-For."""
    compose = (DEPLOY / "docker-compose.yml").read_text()
    proxy = re.search(r"ipv4_address: ([\d.]+)", compose).group(1)
    assert re.search(rf"LABGOV_TRUSTED_PROXIES: {re.escape(proxy)}\s*$", compose, re.M)
    assert re.search(rf"GUNICORN_FORWARDED_ALLOW_IPS: {re.escape(proxy)}\s*$", compose, re.M)
    assert "10.0.0.0/8" not in compose and "172.16.0.0/12" not in compose and '"*"' not in compose
    subnet = re.search(r"subnet: ([\d./]+)", compose).group(1)
    import ipaddress

    assert ipaddress.ip_address(proxy) in ipaddress.ip_network(subnet)
