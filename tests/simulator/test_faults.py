"""Injected faults, the /_sim/ control routes, rate-limit headers and keep-alive."""

import http.client
import re
import socket
import time

import httpx
import pytest

from tests.simulator.conftest import Api, decoded

POLICY = '"minute";q=60;w=60, "hour";q=3000;w=3600, "day";q=50000;w=86400'


def test_429_carries_retry_after_and_stops_after_times(sim, api):
    sim.inject_fault(path_prefix="/v2/billing/pods", kind="429", times=2, retry_after=7)
    for _ in range(2):
        response = api.get("/v2/billing/pods")
        assert response.status_code == 429
        assert response.headers["retry-after"] == "7"
        assert response.headers["content-type"] == "application/problem+json"
        assert decoded(response)["status"] == 429
        assert "RateLimit" in response.headers
    assert api.get("/v2/billing/pods").status_code == 200
    assert sim.faults == []


@pytest.mark.parametrize("kind", ["500", "503"])
def test_server_errors_are_problem_json(sim, api, kind):
    sim.inject_fault(path_prefix="/v2/pods", kind=kind)
    response = api.get("/v2/pods")
    assert response.status_code == int(kind)
    assert decoded(response)["status"] == int(kind)
    assert api.get("/v2/pods").status_code == 200


def test_faults_match_their_path_prefix_and_method_only(sim, api):
    sim.inject_fault(path_prefix="/v2/billing/pods", kind="500", times=None, method="GET")
    assert api.get("/v2/pods").status_code == 200
    assert api.get("/v2/billing").status_code == 200
    for _ in range(3):  # times=None: until cleared
        assert api.get("/v2/billing/pods").status_code == 500
    sim.clear_faults()
    assert api.get("/v2/billing/pods").status_code == 200


def test_slow_answers_after_the_delay(sim, api):
    sim.inject_fault(kind="slow", delay=0.3)
    started = time.perf_counter()
    assert api.get("/v2/pods").status_code == 200
    assert time.perf_counter() - started >= 0.3
    started = time.perf_counter()
    api.get("/v2/pods")
    assert time.perf_counter() - started < 0.3


def _raw_get(sim, path: str) -> tuple[bytes, bytes]:
    """Send one request on a fresh socket; (head, body) as received until the server closes."""
    with socket.create_connection((sim.host, sim.port), timeout=5) as sock:
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {sim.api_key}\r\n\r\n"
        sock.sendall(request.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def test_truncate_declares_the_full_length_and_closes_half_way(sim, api):
    sim.inject_fault(path_prefix="/v2/pods", kind="truncate")
    head, body = _raw_get(sim, "/v2/pods")
    assert head.startswith(b"HTTP/1.1 200")
    declared = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    assert 0 < len(body) < declared
    sim.inject_fault(path_prefix="/v2/pods", kind="truncate")
    with pytest.raises(httpx.RemoteProtocolError):
        api.get("/v2/pods")
    assert api.get("/v2/pods").status_code == 200


def test_malformed_is_200_with_a_body_that_is_not_json(sim, api):
    sim.inject_fault(kind="malformed")
    response = api.get("/v2/billing")
    assert response.status_code == 200
    with pytest.raises(ValueError):
        response.json()


def test_disconnect_closes_without_answering(sim, api):
    sim.inject_fault(kind="disconnect")
    head, body = _raw_get(sim, "/v2/pods")
    assert head == body == b""
    sim.inject_fault(kind="disconnect")
    with pytest.raises(httpx.RemoteProtocolError):
        api.get("/v2/pods")
    assert api.get("/v2/pods").status_code == 200


def test_unknown_fault_kinds_are_refused(sim):
    with pytest.raises(ValueError, match="unknown fault kind"):
        sim.inject_fault(kind="teapot")


def test_rate_limit_headers_follow_the_spec_format(api):
    response = api.get("/v2/pods")
    assert response.headers["ratelimit-policy"] == POLICY
    pattern = r'"minute";r=\d+;t=\d+, "hour";r=\d+;t=\d+, "day";r=\d+;t=\d+'
    assert re.fullmatch(pattern, response.headers["ratelimit"])
    first = int(re.search(r'"minute";r=(\d+)', response.headers["ratelimit"]).group(1))
    second = api.get("/v2/pods").headers["ratelimit"]
    assert int(re.search(r'"minute";r=(\d+)', second).group(1)) in (first - 1, 59)


def test_enforced_rate_limit_answers_429_with_retry_after():
    from labgov.simulator import SimulatorServer

    limits = (("minute", 2, 60),)
    with SimulatorServer(rate_limits=limits, enforce_rate_limits=True) as sim:
        api = Api(sim)
        statuses = [api.get("/v2/pods").status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        assert 1 <= int(api.get("/v2/pods").headers["retry-after"]) <= 60
        api.close()


def test_requests_are_recorded(sim, api):
    api.get("/v2/billing/pods", bucketSize="hour", lastN="2")
    api.post("/v2/pods/nope/action", {"action": "stop"})
    assert sim.requests == [
        ("GET", "/v2/billing/pods?bucketSize=hour&lastN=2"),
        ("POST", "/v2/pods/nope/action"),
    ]


def test_control_routes_over_http(sim, api):
    created = api.post("/_sim/faults", {"path_prefix": "/v2/pods", "kind": "503", "times": 1})
    assert created.status_code == 201
    assert api.get("/_sim/faults").json()["faults"][0]["kind"] == "503"
    assert api.get("/v2/pods").status_code == 503
    api.post("/_sim/faults", {"kind": "500", "times": None})
    assert api.delete("/_sim/faults").status_code == 204
    assert api.get("/v2/pods").status_code == 200

    assert (
        api.post("/_sim/clock", {"advance_hours": 2}).json()["now"] == "2026-11-20T16:30:00+00:00"
    )
    moved = api.post("/_sim/clock", {"now": "2026-11-21T08:00:00Z"})
    assert moved.json()["now"] == "2026-11-21T08:00:00+00:00"
    state = api.get("/_sim/state").json()
    assert state["now"] == "2026-11-21T08:00:00+00:00"
    assert {"id": "a4n8d2r6t0w5y1", "name": "vision-annotate", "status": "EXITED"} in state["pods"]

    assert api.post("/_sim/balance", {"balanceUsd": "1.00"}).status_code == 200
    assert sim.state.balance_usd == 1
    assert api.get("/_sim/requests").json()["requests"][0][1] == "/v2/pods"
    assert api.post("/_sim/clock", {"now": "not a time"}).status_code == 400
    assert api.post("/_sim/faults", {"kind": "teapot"}).status_code == 400


def test_control_routes_need_the_key(sim):
    response = httpx.get(sim.base_url + "/_sim/state")
    assert response.status_code == 401
    response = httpx.post(sim.base_url + "/_sim/clock", json={"advance_hours": 1})
    assert response.status_code == 401


def test_keep_alive_serves_many_requests_on_one_connection(sim):
    connection = http.client.HTTPConnection(sim.host, sim.port, timeout=5)
    headers = {"Authorization": f"Bearer {sim.api_key}"}
    for path in ("/v2/pods", "/v2/pods/nope", "/v2/billing/pods?lastN=1", "/v2/network-volumes"):
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        assert response.status in (200, 404)
        assert response.getheader("Connection") != "close"
    connection.close()


def test_large_billing_answers_are_streamed_in_chunks(sim, small_generated):
    from labgov.simulator import SimulatorServer

    with SimulatorServer(scenario=small_generated, stream_after=64 * 1024) as big:
        api = Api(big)
        response = api.get("/v2/billing/pods", bucketSize="hour", lastN=str(12 * 24))
        assert response.headers.get("transfer-encoding") == "chunked"
        body = decoded(response)
        assert body["metadata"]["recordCount"] == len(body["records"]) > 5000
        small = api.get("/v2/billing/pods", bucketSize="day", lastN="1")
        assert "content-length" in small.headers
        api.close()


def test_a_chunked_request_body_is_read_whole(sim):
    connection = http.client.HTTPConnection(sim.host, sim.port, timeout=5)
    headers = {"Authorization": f"Bearer {sim.api_key}", "Content-Type": "application/json"}
    body = iter([b'{"action": ', b'"stop"}'])
    connection.request("POST", "/v2/pods/vq7m2k4x9p1b3c/action", body=body, headers=headers)
    response = connection.getresponse()
    assert response.status == 200
    response.read()
    connection.request("GET", "/v2/pods/vq7m2k4x9p1b3c", headers=headers)
    assert connection.getresponse().status == 200  # the connection is still in step
    connection.close()


def test_paths_outside_the_api_are_404_without_a_key(sim):
    response = httpx.get(sim.base_url + "/")
    assert response.status_code == 404
    assert sim.requests == []


def test_pods_at_a_past_moment_report_what_their_gpus_did_then(sim, api):
    """/_sim/pods-at (the demo's utilization history): the idle-from pod was busy before
    10:30 and idle after; a moment in the simulator's future or without a zone is refused."""
    pod_id = "m8n7b6v5c4x3z2"  # idle from 2026-11-20T10:30Z, the scenario's now is 14:30

    def gpus_at(moment):
        answer = api.post("/_sim/pods-at", {"at": moment})
        assert answer.status_code == 200
        (pod,) = [p for p in answer.json()["pods"] if p["id"] == pod_id]
        return [g["util"] for g in pod["runtime"]["gpus"]]

    assert min(gpus_at("2026-11-20T10:00:00Z")) >= 35
    assert max(gpus_at("2026-11-20T12:00:00Z")) <= 2
    before_it_ran = api.post("/_sim/pods-at", {"at": "2026-11-20T08:00:00Z"}).json()["pods"]
    assert pod_id not in {p["id"] for p in before_it_ran}
    future = api.post("/_sim/pods-at", {"at": "2026-11-21T00:00:00Z"})
    assert future.status_code == 400 and "future" in future.json()["detail"]
    assert api.post("/_sim/pods-at", {"at": "2026-11-20T10:00:00"}).status_code == 400


def test_endpoint_workers_at_a_past_moment(sim, api):
    """/_sim/endpoint-workers-at (the demo's history of always-on workers): nlp-embed-api
    serves nothing at any hour, so its one always-on worker idles; vision-segment-api's runs
    with its daytime traffic; an endpoint deleted before the moment is not listed."""

    def workers_at(moment):
        answer = api.post("/_sim/endpoint-workers-at", {"at": moment})
        assert answer.status_code == 200
        return {k: v["summary"] for k, v in answer.json()["endpoints"].items()}

    night, noon = workers_at("2026-11-20T03:00:00Z"), workers_at("2026-11-20T12:00:00Z")
    for moment in (night, noon):
        assert (moment["x5nlpembed7f8g"]["running"], moment["x5nlpembed7f8g"]["idle"]) == (0, 1)
    assert (night["x2visionseg0c3"]["running"], night["x2visionseg0c3"]["idle"]) == (0, 1)
    assert noon["x2visionseg0c3"]["running"] == 1 and noon["x2visionseg0c3"]["idle"] == 0
    assert "x4whisperold5e" not in noon  # deleted on 5 November
    assert "x4whisperold5e" in workers_at("2026-11-01T12:00:00Z")
    future = api.post("/_sim/endpoint-workers-at", {"at": "2026-11-21T00:00:00Z"})
    assert future.status_code == 400 and "future" in future.json()["detail"]
    assert api.post("/_sim/endpoint-workers-at", {"at": "2026-11-20T10:00:00"}).status_code == 400
