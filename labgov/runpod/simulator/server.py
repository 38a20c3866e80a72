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
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from labgov.runpod.simulator import billing, render
from labgov.runpod.simulator.scenario import Scenario, load_scenario
from labgov.runpod.simulator.state import ApiError, SimState

JSON = "application/json"
PROBLEM = "application/problem+json"
FAULT_KINDS = ("429", "500", "503", "slow", "truncate", "malformed", "disconnect")
# The spec's example quota: (window, requests, seconds).
RATE_LIMITS = (("minute", 60, 60), ("hour", 3000, 3600), ("day", 50000, 86400))
STREAM_AFTER = 1 << 20  # bodies bigger than this go out chunked, as they are generated
BILLING_ROUTES = {
    "": None,
    "/pods": billing.POD,
    "/network-volumes": billing.NETWORK_VOLUME,
    "/serverless": billing.SERVERLESS,
    "/endpoints": billing.ENDPOINT,
    "/clusters": billing.CLUSTER,
}


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


@dataclass
class Response:
    status: int
    body: bytes | Iterator[bytes] = b""
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


def _json(status: int, value: Any) -> Response:
    return Response(status, render.dumps(value))


def _problem(status: int, detail: str, errors: list[str] | None = None) -> Response:
    return Response(status, render.dumps(render.problem(status, detail, errors)), PROBLEM)


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


class _Routes:
    """Method tables of the /v2 routes; each handler takes (match, params, body)."""

    def __init__(self, state: SimState):
        self.state = state
        one = r"/(?P<id>[^/]+)"
        billing_routes = "(?P<product>|/pods|/network-volumes|/serverless|/endpoints|/clusters)"
        table = [
            ("/v2/pods", {"GET": self.list_pods, "POST": self.create_pod}),
            ("/v2/pods" + one, {"GET": self.get_pod, "DELETE": self.delete_pod}),
            ("/v2/pods" + one + "/action", {"POST": self.pod_action}),
            ("/v2/network-volumes", {"GET": self.list_volumes, "POST": self.create_volume}),
            ("/v2/network-volumes" + one, {"GET": self.get_volume, "DELETE": self.delete_volume}),
            ("/v2/serverless", {"GET": self.list_endpoints}),
            ("/v2/serverless" + one, {"GET": self.get_endpoint}),
            ("/v2/clusters", {"GET": self.list_clusters}),
            ("/v2/clusters" + one, {"GET": self.get_cluster}),
            ("/v2/clusters" + one + "/pods", {"GET": self.cluster_pods}),
            ("/v2/catalog/gpus", {"GET": self.list_gpu_types}),
            ("/v2/catalog/gpus" + one, {"GET": self.get_gpu_type}),
            ("/v2/billing" + billing_routes, {"GET": self.billing}),
        ]
        self.table = [(re.compile(pattern + "/?"), methods) for pattern, methods in table]

    def find(self, path: str) -> tuple[re.Match, dict[str, Callable[..., Response]]] | None:
        for pattern, methods in self.table:
            match = pattern.fullmatch(path)
            if match:
                return match, methods
        return None

    def list_pods(self, match, params, body) -> Response:
        include = _flag(params, "includeClusterPods")
        return _json(200, {"pods": self.state.list_pods(include_cluster_pods=include)})

    def get_pod(self, match, params, body) -> Response:
        return _json(200, self.state.get_pod(match["id"]))

    def create_pod(self, match, params, body) -> Response:
        return _json(201, self.state.create_pod(_parse_body(body)))

    def delete_pod(self, match, params, body) -> Response:
        self.state.pod_action(match["id"], "terminate")
        return Response(204)

    def pod_action(self, match, params, body) -> Response:
        request = _parse_body(body)
        from labgov.runpod import schema  # noqa: PLC0415 - keeps server import light

        problems = schema.errors("PodActionRequest", request)
        if problems:
            raise ApiError(422 if isinstance(request, dict) else 400, "invalid action", problems)
        pod = self.state.pod_action(match["id"], request["action"])
        return Response(204) if pod is None else _json(200, pod)

    def list_volumes(self, match, params, body) -> Response:
        return _json(200, {"networkVolumes": self.state.list_volumes()})

    def create_volume(self, match, params, body) -> Response:
        return _json(201, self.state.create_volume(_parse_body(body)))

    def get_volume(self, match, params, body) -> Response:
        return _json(200, self.state.get_volume(match["id"]))

    def delete_volume(self, match, params, body) -> Response:
        self.state.delete_volume(match["id"])
        return Response(204)

    def list_endpoints(self, match, params, body) -> Response:
        return _json(200, {"endpoints": self.state.list_endpoints()})

    def get_endpoint(self, match, params, body) -> Response:
        return _json(200, self.state.get_endpoint(match["id"]))

    def list_clusters(self, match, params, body) -> Response:
        return _json(200, {"clusters": self.state.list_clusters()})

    def get_cluster(self, match, params, body) -> Response:
        return _json(200, self.state.get_cluster(match["id"]))

    def cluster_pods(self, match, params, body) -> Response:
        return _json(200, {"pods": self.state.cluster_pods(match["id"])})

    def list_gpu_types(self, match, params, body) -> Response:
        return _json(200, {"gpus": self.state.gpu_types()})

    def get_gpu_type(self, match, params, body) -> Response:
        return _json(200, self.state.gpu_type(match["id"]))

    def billing(self, match, params, body) -> Response:
        product = BILLING_ROUTES[match["product"]]
        try:
            return Response(200, self.state.billing_body(product, params))
        except billing.QueryError as error:
            raise ApiError(400, str(error)) from None


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ApiError(400, f"{name} must be true or false, not {params[name]!r}")
    return value in ("true", "1")


def _parse_body(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as error:
        raise ApiError(400, f"the request body is not JSON: {error}") from None


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
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        path = unquote(url.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        if path.startswith("/_sim/") or path == "/_sim":
            self._send(simulator.control(method, path, body, self.headers.get("Authorization")))
            return
        simulator.record(method, self.path)
        refused = simulator.authorized(self.headers.get("Authorization"))
        if refused is not None:
            self._send(_problem(401, refused))
            return
        limit_headers, wait = simulator.rate.hit()
        fault = simulator.take_fault(method, path)
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        if wait is not None:
            response = _problem(429, "rate limit exceeded")
            response.headers["Retry-After"] = str(wait)
        elif fault is not None and fault.kind in ("429", "500", "503"):
            response = self._fault_response(fault)
        elif fault is not None and fault.kind == "disconnect":
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

    def _fault_response(self, fault: Fault) -> Response:
        status = int(fault.kind)
        details = {
            429: "rate limit exceeded for the minute window",
            500: "internal error (injected)",
            503: "service unavailable (injected)",
        }
        response = _problem(status, details[status])
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
                if size > STREAM_AFTER:
                    break
            else:
                response.body = b"".join(first)
                self._send(response)
                return
        except Exception:  # noqa: BLE001 - nothing sent yet: answer 500, keep serving
            traceback.print_exc(file=sys.stderr)
            self._send(_problem(500, "simulator error while building the response"))
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
    `now`. The clock only moves when told (`set_now`, `advance`) unless it is "wall".
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        api_key: str = "sim-key",
        now: dt.datetime | str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        rate_limits: tuple[tuple[str, int, int], ...] = RATE_LIMITS,
        enforce_rate_limits: bool = False,
        log: Callable[[str], None] | None = None,
    ):
        self.scenario = scenario if scenario is not None else load_scenario("default")
        self.api_key = api_key
        self.state = SimState(self.scenario, now)
        self.host = host
        self.rate = RateCounter(rate_limits, enforce_rate_limits)
        self.log = log
        self._port = port
        self._routes = _Routes(self.state)
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
        if token.strip() != self.api_key:
            return "invalid API key"
        return None

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
        found = self._routes.find(path)
        if found is None:
            return _problem(404, f"no route {path}")
        match, methods = found
        handler = methods.get(method)
        if handler is None:
            response = _problem(405, f"{method} is not allowed on {path}")
            response.headers["Allow"] = ", ".join(methods)
            return response
        try:
            return handler(match, params, body)
        except ApiError as error:
            return _problem(error.status, error.detail, error.errors)
        except Exception:  # noqa: BLE001 - a simulator bug is a 500, not a dead server
            traceback.print_exc(file=sys.stderr)
            return _problem(500, "simulator error")

    def control(self, method: str, path: str, body: bytes, authorization: str | None) -> Response:
        """/_sim/ routes: state, clock, faults, balance, requests."""
        reason = self.authorized(authorization)
        if reason is not None:
            return _problem(401, reason)
        try:
            return self._control(method, path.rstrip("/"), body)
        except (ApiError, ValueError, TypeError, KeyError, InvalidOperation) as error:
            status = error.status if isinstance(error, ApiError) else 400
            return _problem(status, str(error))

    def _control(self, method: str, path: str, body: bytes) -> Response:
        data = _parse_body(body) if body else {}
        if path == "/_sim/state" and method == "GET":
            summary = self.state.summary()
            summary["faults"] = [asdict(f) for f in self.faults]
            summary["requestCount"] = len(self.requests)
            return _json(200, summary)
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
            return _json(200, {"now": self.state.now.isoformat()})
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
                return _json(201, asdict(fault))
            if method == "DELETE":
                self.clear_faults()
                return Response(204)
            if method == "GET":
                return _json(200, {"faults": [asdict(f) for f in self.faults]})
        if path == "/_sim/balance" and method == "POST":
            self.state.set_balance(Decimal(str(data["balanceUsd"])))
            return _json(200, {"balanceUsd": self.state.balance_usd})
        if path == "/_sim/requests":
            if method == "GET":
                return _json(200, {"requests": [list(r) for r in self.requests]})
            if method == "DELETE":
                self.clear_requests()
                return Response(204)
        return _problem(404 if method in ("GET", "POST", "DELETE") else 405, f"no route {path}")
