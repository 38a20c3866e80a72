"""The simulator's HTTP server: Runpod's REST API v2 routes, plus /_sim/ to drive it.

Plain `http.server` (HTTP/1.1, keep-alive), one thread per connection, no Django in the
request path. Every /v2 route needs `Authorization: Bearer <key>`; authenticated answers carry
the `RateLimit` and `RateLimit-Policy` headers. Faults injected through `inject_fault` (or
POST /_sim/faults) make the next matching requests fail in one of the ways a client must
survive.
"""

import contextlib
import datetime as dt
import json
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

from labgov.simulator.loader import load_scenario
from labgov.simulator.routes import (
    Response,
    Routes,
    json_response,
    parse_body,
    problem_response,
)
from labgov.simulator.scenario import Scenario
from labgov.simulator.state import ApiError, SimState

# "capacity" is the spec's 400 for a pod whose GPU and data center could not be placed; "403" a
# key without access to what it asked for; "404" and "501" a server without the route at all.
FAULT_KINDS = (
    "429",
    "500",
    "503",
    "capacity",
    "403",
    "404",
    "501",
    "slow",
    "truncate",
    "malformed",
    "disconnect",
    "409",
    "lost_answer",
)
ANSWER_FAULTS = {
    "429": (429, "rate limit exceeded for the minute window"),
    "500": (500, "internal error (injected)"),
    "503": (503, "service unavailable (injected)"),
    "capacity": (400, "this GPU and data center combination could not be placed (injected)"),
    "403": (403, "this API key cannot access the requested resource (injected)"),
    "404": (404, "no such route on this server (injected)"),
    "501": (501, "not implemented on this server (injected)"),
    "409": (409, "the action is not valid for the resource's current status (injected)"),
}
# The spec's example quota: (window, requests, seconds).
RATE_LIMITS = (("minute", 60, 60), ("hour", 3000, 3600), ("day", 50000, 86400))
# Bodies bigger than this go out chunked, as they are generated; smaller ones with a length
# (clients read those faster). Either way a response never holds more than this in memory.
STREAM_AFTER = 8 << 20


@dataclass
class Fault:
    kind: str
    path_prefix: str = "/v2"
    times: int | None = 1  # None: until cleared
    retry_after: int = 1  # seconds, for 429
    delay: float = 1.0  # seconds, for slow
    method: str | None = None
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return path.startswith(self.path_prefix) and self.method in (None, method)


class RateCounter:
    """Requests per fixed wall-clock window, for the RateLimit headers (and optionally 429s)."""

    def __init__(self, limits: tuple[tuple[str, int, int], ...], enforce: bool):
        self.limits = limits
        self.enforce = enforce
        self.policy = ", ".join(f'"{name}";q={quota};w={width}' for name, quota, width in limits)
        self._counts: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def hit(self) -> tuple[dict[str, str], int | None]:
        """Count one request: (headers, seconds to wait if it exceeds an enforced quota)."""
        now = time.time()
        states, wait = [], None
        with self._lock:
            for name, quota, width in self.limits:
                window = int(now // width)
                start, used = self._counts.get(name, (window, 0))
                used = used + 1 if start == window else 1
                self._counts[name] = (window, used)
                reset = max(int((window + 1) * width - now), 1)
                if used > quota and self.enforce:
                    wait = max(wait or 0, reset)
                states.append(f'"{name}";r={max(quota - used, 0)};t={reset}')
        return {"RateLimit": ", ".join(states), "RateLimit-Policy": self.policy}, wait


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler, simulator: "SimulatorServer"):
        self.simulator = simulator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def shutdown(self) -> None:
        """serve_forever's end, without waiting out its poll interval: the loop checks for
        the request to stop when its select returns, so a connection to the server ends that
        wait at once (each test's simulator spent ~35 ms stopping). Knocked until the loop
        has ended: a knock before the request to stop is only an empty connection."""
        stopping = threading.Thread(target=super().shutdown, name="simulator-stop", daemon=True)
        stopping.start()
        while stopping.is_alive():
            with contextlib.suppress(OSError):
                socket.create_connection(self.server_address[:2], timeout=0.5).close()
            stopping.join(0.005)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "RunpodSimulator/1.0"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = 120  # an idle keep-alive connection is closed after this

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self):  # noqa: N802
        self._serve("POST")

    def do_DELETE(self):  # noqa: N802
        self._serve("DELETE")

    def do_PATCH(self):  # noqa: N802
        self._serve("PATCH")

    def do_PUT(self):  # noqa: N802
        self._serve("PUT")

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        log = self.server.simulator.log
        if log:
            log(f"{self.address_string()} {format % args}")

    def _serve(self, method: str) -> None:
        simulator: SimulatorServer = self.server.simulator
        body = self._read_body()
        url = urlsplit(self.path)
        path = unquote(url.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        if path.startswith("/_sim/") or path == "/_sim":
            self._send(simulator.control(method, path, body, self.headers.get("Authorization")))
            return
        if not path.startswith("/v2/") and path != "/graphql":
            self._send(problem_response(404, f"no route {path}; the API is under /v2"))
            return
        simulator.record(method, self.path)
        refused = simulator.authorized(self.headers.get("Authorization"))
        if refused is not None:
            self._send(problem_response(401, refused))
            return
        writes = method not in ("GET", "HEAD") and path != "/graphql"
        if writes and simulator.read_only(self.headers.get("Authorization")):
            self._send(problem_response(403, "this API key is read-only"))
            return
        limit_headers, wait = simulator.rate.hit()
        fault = simulator.take_fault(method, path)
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        if wait is not None:
            response = problem_response(429, "rate limit exceeded")
            response.headers["Retry-After"] = str(wait)
        elif fault is not None and fault.kind in ANSWER_FAULTS:
            response = self._fault_response(fault)
        elif fault is not None and fault.kind == "disconnect":
            self.close_connection = True
            return
        elif fault is not None and fault.kind == "lost_answer":
            # Carried out, but the answer never reaches the client (a timeout after the
            # fact): a retry must cope with the work being done already.
            simulator.api(method, path, params, body)
            self.close_connection = True
            return
        elif fault is not None and fault.kind == "malformed":
            page = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"
            response = Response(200, page)
        else:
            response = simulator.api(method, path, params, body)
        response.headers.update(limit_headers)
        if fault is not None and fault.kind == "truncate":
            self._send_truncated(response)
        else:
            self._send(response)

    def _read_body(self) -> bytes:
        # Read the whole body whatever its framing, so the next request on a kept-alive
        # connection starts where it should.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return body
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _fault_response(self, fault: Fault) -> Response:
        status, detail = ANSWER_FAULTS[fault.kind]
        response = problem_response(status, detail)
        if status == 429:
            response.headers["Retry-After"] = str(fault.retry_after)
        return response

    def _head(self, response: Response, length: int | None) -> None:
        self.send_response(response.status)
        if response.status != 204:
            self.send_header("Content-Type", response.content_type)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        elif response.status != 204:
            self.send_header("Content-Length", str(length))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _send(self, response: Response) -> None:
        body = response.body
        if isinstance(body, bytes):
            self._head(response, len(body))
            self.wfile.write(body)
            return
        first: list[bytes] = []
        size = 0
        try:
            for piece in body:
                first.append(piece)
                size += len(piece)
                if size > self.server.simulator.stream_after:
                    break
            else:
                response.body = b"".join(first)
                self._send(response)
                return
        except Exception:  # noqa: BLE001 - nothing sent yet: answer 500, keep serving
            traceback.print_exc(file=sys.stderr)
            self._send(problem_response(500, "simulator error while building the response"))
            return
        self._head(response, None)
        try:
            for piece in first:
                self._chunk(piece)
            for piece in body:
                self._chunk(piece)
            self.wfile.write(b"0\r\n\r\n")
        except Exception:  # noqa: BLE001 - half sent: the only honest signal is to hang up
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True

    def _chunk(self, piece: bytes) -> None:
        if piece:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))

    def _send_truncated(self, response: Response) -> None:
        body = response.body if isinstance(response.body, bytes) else b"".join(response.body)
        declared = len(body) or 64
        self._head(response, declared)
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True


class SimulatorServer:
    """A Runpod REST API v2 simulator on 127.0.0.1, served from a daemon thread.

        with SimulatorServer(scenario=load_scenario("default")) as sim:
            httpx.get(sim.base_url + "/v2/pods", headers={"Authorization": "Bearer sim-key"})

    `now` is a UTC-aware datetime, "wall" for the real clock, or None for the scenario's own
    `now`. The clock only moves when told (`set_now`, `advance`) unless it is "wall"; then the
    scenario is first shifted by whole hours so that its history ends at the real now.

    The RateLimit headers count real requests against `rate_limits` (the spec's example quota
    by default) but only refuse with 429 when `enforce_rate_limits` is set, so that tests and
    benchmarks meet 429s only where they inject them.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        api_key: str = "sim-key",
        read_only_keys: tuple[str, ...] = (),
        now: dt.datetime | str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        rate_limits: tuple[tuple[str, int, int], ...] = RATE_LIMITS,
        enforce_rate_limits: bool = False,
        stream_after: int = STREAM_AFTER,
        warm_up: bool = True,
        log: Callable[[str], None] | None = None,
    ):
        self.scenario = scenario if scenario is not None else load_scenario("default")
        if now == "wall":
            self.scenario = self.scenario.anchored(dt.datetime.now(dt.UTC))
        elif now is not None and not isinstance(now, dt.datetime):
            raise ValueError(f'now must be a datetime, "wall" or None, not {now!r}')
        self.api_key = api_key
        # Keys that may read but not write (Runpod's "Read Only" keys): a write gets a 403.
        self.read_only_keys = frozenset(read_only_keys)
        self.state = SimState(self.scenario, now)
        self.host = host
        self.rate = RateCounter(rate_limits, enforce_rate_limits)
        self.log = log
        self.stream_after = stream_after
        self.warm_up = warm_up
        self._port = port
        self._routes = Routes(self.state)
        self._faults: list[Fault] = []
        self._requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Lifecycle.

    def start(self) -> "SimulatorServer":
        if self._httpd is None:
            self._httpd = _HTTPServer((self.host, self._port), _Handler, self)
            self._port = self._httpd.server_address[1]
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"runpod-simulator:{self._port}",
                daemon=True,
            )
            self._thread.start()
            if self.warm_up:
                threading.Thread(
                    target=self.state.warm_up, name="simulator-warm-up", daemon=True
                ).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "SimulatorServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self._port}"

    # Control.

    def set_now(self, moment: dt.datetime) -> None:
        self.state.set_now(moment)

    def advance(self, *, hours: float = 0, minutes: float = 0, seconds: float = 0) -> None:
        self.state.advance(hours=hours, minutes=minutes, seconds=seconds)

    def inject_fault(
        self,
        path_prefix: str = "/v2",
        kind: str = "500",
        *,
        times: int | None = 1,
        retry_after: int = 1,
        delay: float = 1.0,
        method: str | None = None,
    ) -> Fault:
        """Make the next `times` requests under `path_prefix` fail as `kind` (FAULT_KINDS)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(FAULT_KINDS)})")
        if times is not None and times < 1:
            raise ValueError("times must be at least 1, or None for until cleared")
        fault = Fault(kind, path_prefix, times, retry_after, delay, method and method.upper())
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path with query) of every /v2 request seen, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # Used by the request handler.

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self._requests.append((method, path))

    def authorized(self, header: str | None) -> str | None:
        """None when the Authorization header carries our key, else why not."""
        if not header:
            return "missing bearer token"
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "malformed Authorization header: expected 'Bearer <API key>'"
        if token.strip() != self.api_key and token.strip() not in self.read_only_keys:
            return "invalid API key"
        return None

    def read_only(self, header: str | None) -> bool:
        return (header or "").partition(" ")[2].strip() in self.read_only_keys

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    if fault.times is not None and fault.hits >= fault.times:
                        self._faults.remove(fault)
                    return fault
        return None

    def api(self, method: str, path: str, params: dict[str, str], body: bytes) -> Response:
        if path == "/graphql":
            return self._graphql(method, body)
        found = self._routes.find(path)
        if found is None:
            return problem_response(404, f"no route {path}")
        match, methods = found
        handler = methods.get(method)
        if handler is None:
            response = problem_response(405, f"{method} is not allowed on {path}")
            response.headers["Allow"] = ", ".join(methods)
            return response
        try:
            return handler(match, params, body)
        except ApiError as error:
            return problem_response(error.status, error.detail, error.errors)
        except Exception:  # noqa: BLE001 - a simulator bug is a 500, not a dead server
            traceback.print_exc(file=sys.stderr)
            return problem_response(500, "simulator error")

    def _graphql(self, method: str, body: bytes) -> Response:
        """Runpod's deprecated GraphQL API, as far as labgov reads it: `myself` with the
        account's balance, spend rate and spend limit. Other queries get a GraphQL error."""
        if method != "POST":
            response = problem_response(405, f"{method} is not allowed on /graphql")
            response.headers["Allow"] = "POST"
            return response
        try:
            query = json.loads(body or b"null")["query"]
        except (ValueError, TypeError, KeyError):
            return json_response(400, {"errors": [{"message": "a JSON body with query is needed"}]})
        if "myself" not in query:
            return json_response(
                200, {"errors": [{"message": "the simulator answers myself only"}]}
            )
        myself = {}
        fields = {
            "clientBalance": lambda: self.state.balance_usd,
            "currentSpendPerHr": self.state.spend_per_hr_usd,
            "spendLimit": lambda: 80,
        }
        for name, value in fields.items():
            if name in query:
                myself[name] = value()
        return json_response(200, {"data": {"myself": myself}})

    def control(self, method: str, path: str, body: bytes, authorization: str | None) -> Response:
        """/_sim/ routes: state, clock, faults, balance, requests."""
        reason = self.authorized(authorization)
        if reason is None and self.read_only(authorization):
            reason = "the control routes need the full key"
        if reason is not None:
            return problem_response(401, reason)
        try:
            return self._control(method, path.rstrip("/"), body)
        except (ApiError, ValueError, TypeError, KeyError, InvalidOperation) as error:
            status = error.status if isinstance(error, ApiError) else 400
            return problem_response(status, str(error))

    def _control(self, method: str, path: str, body: bytes) -> Response:
        data = parse_body(body) if body else {}
        if path == "/_sim/state" and method == "GET":
            summary = self.state.summary()
            summary["faults"] = [asdict(f) for f in self.faults]
            summary["requestCount"] = len(self.requests)
            return json_response(200, summary)
        if path == "/_sim/clock" and method == "POST":
            if "now" in data:
                moment = dt.datetime.fromisoformat(data["now"])
                if moment.tzinfo is None:
                    raise ValueError("now needs a time zone offset")
                self.set_now(moment)
            else:
                self.advance(
                    hours=float(data.get("advance_hours", 0)),
                    seconds=float(data.get("advance_seconds", 0)),
                )
            return json_response(200, {"now": self.state.now.isoformat()})
        if path == "/_sim/faults":
            if method == "POST":
                fault = self.inject_fault(
                    data.get("path_prefix", "/v2"),
                    str(data["kind"]),
                    times=data.get("times", 1),
                    retry_after=int(data.get("retry_after", 1)),
                    delay=float(data.get("delay", 1.0)),
                    method=data.get("method"),
                )
                return json_response(201, asdict(fault))
            if method == "DELETE":
                self.clear_faults()
                return Response(204)
            if method == "GET":
                return json_response(200, {"faults": [asdict(f) for f in self.faults]})
        if path == "/_sim/pods-at" and method == "POST":
            # The pods as GET /v2/pods listed them at a past moment, utilization included:
            # what labgov would have sampled had it been polling then (the demo's history).
            moment = dt.datetime.fromisoformat(str(data["at"]))
            if moment.tzinfo is None:
                raise ValueError("at needs a time zone offset")
            pods = self.state.list_pods(include_cluster_pods=True, at=int(moment.timestamp()))
            return json_response(200, {"pods": pods})
        if path == "/_sim/endpoint-workers-at" and method == "POST":
            # Each endpoint's workers (the ListEndpointWorkersResponse) at a past moment: the
            # always-on workers labgov would have read had it been syncing then.
            moment = dt.datetime.fromisoformat(str(data["at"]))
            if moment.tzinfo is None:
                raise ValueError("at needs a time zone offset")
            workers = self.state.endpoint_workers_at(int(moment.timestamp()))
            return json_response(200, {"endpoints": workers})
        if path == "/_sim/balance" and method == "POST":
            self.state.set_balance(Decimal(str(data["balanceUsd"])))
            return json_response(200, {"balanceUsd": self.state.balance_usd})
        if path == "/_sim/requests":
            if method == "GET":
                return json_response(200, {"requests": [list(r) for r in self.requests]})
            if method == "DELETE":
                self.clear_requests()
                return Response(204)
        return problem_response(
            404 if method in ("GET", "POST", "DELETE") else 405, f"no route {path}"
        )
