"""`manage.py runpod_simulator` starts a server that answers, and stops on SIGTERM."""

import os
import socket
import subprocess
import sys
import time

import httpx

from tests.runpod.openapi import REPO_ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_management_command_serves_the_scenario_until_terminated():
    port = free_port()
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "labgov.settings"}
    command = [sys.executable, "manage.py", "runpod_simulator", "--port", str(port)]
    command += ["--api-key", "cmd-key", "--now", "2026-11-20T16:00:00Z"]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in line, process.stderr.read()
        headers = {"Authorization": "Bearer cmd-key"}
        response = httpx.get(f"http://127.0.0.1:{port}/v2/pods", headers=headers, timeout=5)
        assert response.status_code == 200
        assert len(response.json()["pods"]) > 5
        state = httpx.get(f"http://127.0.0.1:{port}/_sim/state", headers=headers).json()
        assert state["now"] == "2026-11-20T16:00:00+00:00"
        assert httpx.get(f"http://127.0.0.1:{port}/v2/pods").status_code == 401
    finally:
        process.terminate()
        deadline = time.monotonic() + 10
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0


def test_management_command_refuses_an_unknown_scenario():
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "labgov.settings"}
    result = subprocess.run(
        [sys.executable, "manage.py", "runpod_simulator", "--scenario", "nope", "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "no scenario 'nope'" in result.stderr
