"""`make run` (scripts/run-demo): one signal stops everything it started, Ctrl-C (SIGINT to
the terminal's process group) or a SIGTERM to the script alone. A stub stands in for Python,
so the script's own process handling is what runs: the stub's simulator listens on its port,
its schedule and web server wait for a signal, the other commands do nothing."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STUB = f"""#!{sys.executable}
import os, signal, socket, sys, time
args = sys.argv[1:]
if args[:1] == ["-c"]:
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
command = args[1] if len(args) > 1 else ""
if command == "runpod_simulator":
    server = socket.create_server(("127.0.0.1", int(args[args.index("--port") + 1])))
    while True:
        server.accept()[0].close()
if command in ("run_schedule", "runserver"):
    while True:
        time.sleep(1)
"""


# The script as a terminal starts its foreground job: with SIGINT's default disposition. A
# test run started in the background by a shell without job control (`cmd &` in a script, or
# under nohup) inherits SIGINT ignored, and a shell started with a signal ignored cannot trap
# it (bash's manual): the Ctrl-C test then waited its 15 s for a script that never saw the
# signal. Reset here, then exec'd: the script's pid is this process's.
AS_A_TERMINAL_STARTS_IT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session(sid: int) -> list[str]:
    """The processes still in the script's session (the script and all it started)."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "sid=,pid=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.split()[0] == str(sid)]


def _started(tmp_path):
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {
        **os.environ,
        "LABGOV_DEMO_PYTHON": str(stub),
        "PORT": str(_free_port()),
        "SIM_PORT": str(_free_port()),
    }
    script = subprocess.Popen(
        [sys.executable, "-c", AS_A_TERMINAL_STARTS_IT, "bash", "scripts/run-demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own session and process group, as a terminal's job
    )
    for line in script.stdout:
        if line.startswith("labgov is at"):
            break
    else:
        pytest.fail(f"scripts/run-demo ended before starting (exit {script.wait()})")
    # The web server starts just after the line: bash forks, and the fork shows as
    # "bash scripts/run-demo" until it execs, so wait for the commands themselves, not for a
    # count of processes.
    wanted = ("runpod_simulator", "run_schedule", "runserver --noreload")
    deadline = time.monotonic() + 30
    running = _session(script.pid)
    while not all(any(w in p for p in running) for w in wanted) and time.monotonic() < deadline:
        time.sleep(0.05)
        running = _session(script.pid)
    assert any("runpod_simulator" in p for p in running), running
    assert any("run_schedule" in p for p in running), running
    assert any("runserver --noreload" in p for p in running), running
    return script


def _all_stopped(script) -> int:
    code = script.wait(timeout=15)
    deadline = time.monotonic() + 5
    while _session(script.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _session(script.pid) == [], _session(script.pid)
    return code


def test_a_sigterm_to_the_script_stops_all_it_started(tmp_path):
    script = _started(tmp_path)
    script.send_signal(signal.SIGTERM)
    assert _all_stopped(script) == 143


def test_ctrl_c_stops_all_it_started(tmp_path):
    script = _started(tmp_path)
    os.killpg(script.pid, signal.SIGINT)  # what the terminal sends its foreground job
    assert _all_stopped(script) == 130
