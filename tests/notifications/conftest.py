import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest


class HookServer:
    """A real HTTP server on 127.0.0.1 that records what is posted to it and can be told to
    answer the first N posts with an error."""

    def __init__(self, tls=None):
        self.posts: list[dict] = []
        self.hosts: list[str] = []  # the Host header of each post
        self.fail_next = 0
        self.fail_status = 500
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"null")
                server.hosts.append(self.headers.get("Host", ""))
                if server.fail_next > 0:
                    server.fail_next -= 1
                    status, reply = server.fail_status, b"try later"
                else:
                    server.posts.append(body)
                    status, reply = 200, b"ok"
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"http://127.0.0.1:{self.port}/services/T0/B0/secretXYZ9"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.closed = False

    def close(self):
        if not self.closed:
            self.closed = True
            self.httpd.shutdown()
            self.httpd.server_close()


@pytest.fixture
def hook_server():
    server = HookServer()
    yield server
    server.close()


@pytest.fixture
def test_kinds(monkeypatch):
    """Two registered kinds for the test only (the registry is global)."""
    from labgov.notifications import kinds

    registry = dict(kinds._registry)
    monkeypatch.setattr(kinds, "_registry", registry)
    kinds.register("test.alpha", "Alpha things happened", "info")
    kinds.register("test.beta", "Beta things happened", "warning")
    return ["test.alpha", "test.beta"]


@pytest.fixture
def eager_retries():
    """Let eagerly run tasks retry as a worker would (at once, without the backoff): with
    task_eager_propagates on, Celery raises the first Retry instead of running it."""
    from labgov.celery import app

    before = app.conf.task_eager_propagates
    app.conf.task_eager_propagates = False
    yield
    app.conf.task_eager_propagates = before


@pytest.fixture
def fake_dns(monkeypatch):
    """This machine has no DNS: names in `table` resolve to the addresses given (a list, or a
    function returning one per lookup; none means the name does not exist), and every lookup
    of them is recorded in `lookups`. Literal addresses and other names resolve as usual."""
    real = socket.getaddrinfo
    dns = SimpleNamespace(table={}, lookups=[])

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in dns.table:
            return real(host, port, *args, **kwargs)
        dns.lookups.append(name)
        answer = dns.table[name]
        addresses = answer() if callable(answer) else answer
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port or 0, 0, 0))
            if ":" in a
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port or 0))
            for a in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return dns
