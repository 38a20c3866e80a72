"""A real Celery worker in a process of its own (prefork, one child, as the systemd unit runs
it), consuming a queue of its own in the test run's Redis database and using the test
database, for tests that kill it. Loaded for the whole suite by tests/conftest.py."""

import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REDIS_URL = os.environ.get("LABGOV_TEST_REDIS_URL")
REQUIRE = os.environ.get("LABGOV_REQUIRE_SERVICES") == "1"


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    queue: str
    log: Path

    def child_pid(self, timeout: float = 20) -> int:
        """The prefork child that runs tasks (the parent restarts one when it dies)."""
        deadline = time.monotonic() + timeout
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        while time.monotonic() < deadline:
            children = path.read_text().split() if path.exists() else []
            if children:
                return int(children[0])
            time.sleep(0.1)
        raise AssertionError(f"the worker has no child process:\n{self.tail()}")

    def kill_child(self) -> int:
        """kill -9 the process running the task, as the OOM killer or an operator would."""
        pid = self.child_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def send(self, task: str, *args) -> None:
        from celery import Celery

        app = Celery("labgov-test-sender", set_as_current=False, broker=REDIS_URL)
        app.send_task(task, args=list(args), queue=self.queue)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


class SmtpStub:
    """Just enough SMTP for Django's backend: records each message, and with `hold` set keeps
    the reply to the message's final "." back until released, so a test can kill the sender
    mid-send (after the server has the message, before the sender knows it)."""

    def __init__(self):
        self.messages: list[bytes] = []
        self.hold = False
        self.data_received = threading.Event()
        self.release = threading.Event()
        stub = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                self.wfile.write(b"220 stub ESMTP\r\n")
                while line := self.rfile.readline():
                    verb = line[:4].upper()
                    if verb in (b"EHLO", b"HELO"):
                        self.wfile.write(b"250 stub\r\n")
                    elif verb == b"DATA":
                        self.wfile.write(b"354 go ahead\r\n")
                        body = b"".join(iter(self.rfile.readline, b".\r\n"))
                        stub.messages.append(body)
                        stub.data_received.set()
                        if stub.hold:
                            stub.release.wait(30)
                        self.wfile.write(b"250 queued\r\n")
                    elif verb == b"QUIT":
                        self.wfile.write(b"221 bye\r\n")
                        return
                    else:
                        self.wfile.write(b"250 ok\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self) -> None:
        self.messages.clear()
        self.hold = False
        self.data_received.clear()
        self.release.clear()


@pytest.fixture(scope="session")
def smtp_stub():
    stub = SmtpStub()
    yield stub
    stub.release.set()
    stub.server.shutdown()


@pytest.fixture(scope="session")
def worker_process(django_db_setup, smtp_stub, tmp_path_factory):
    """Started once per test process that needs it; the tests using it are transactional, so
    what they commit is what the worker reads."""
    if not REDIS_URL:
        if REQUIRE:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but LABGOV_TEST_REDIS_URL is not set")
        pytest.skip("needs Redis (make test sets LABGOV_TEST_REDIS_URL when it answers)")
    from django.db import connection

    if connection.vendor != "postgresql":
        if REQUIRE:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but the test database is not PostgreSQL")
        pytest.skip("needs PostgreSQL (a worker process cannot share an in-memory SQLite)")
    db = connection.settings_dict
    queue = f"labgov-test-kill-{uuid.uuid4().hex}"
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": (
            f"postgresql://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT']}/"
            f"{db['NAME']}"
        ),
        "CELERY_BROKER_URL": REDIS_URL,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_stub.port),
        "EMAIL_TIMEOUT": "10",
    }
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "labgov",
                "worker",
                "--pool=prefork",
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = WorkerProcess(process, queue, log)
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text(errors="replace"):
            assert process.poll() is None, f"the worker exited:\n{worker.tail()}"
            assert time.monotonic() < deadline, f"the worker did not start:\n{worker.tail()}"
            time.sleep(0.1)
        yield worker
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"*{queue}*"))
        if keys:
            client.delete(*keys)
