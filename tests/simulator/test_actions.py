"""Actions, creation and deletion change the simulated account and its future billing; and
the HTTP errors a client must handle (401, 404, 405, 409, 402, 400, 422)."""

from decimal import Decimal

import pytest

from tests.simulator.conftest import Api, decoded
from tests.simulator.test_billing import RUNNING_POD, STOPPED_POD, TERMINATED_POD, q, t

H100 = "NVIDIA H100 80GB HBM3"
CLUSTER_POD_OF = "cl7v1s2d3p4q5r"


def action(api: Api, pod_id: str, name: str):
    return api.post(f"/v2/pods/{pod_id}/action", {"action": name})


def hours_of(api: Api, pod_id: str, start: str, end: str) -> list[dict]:
    body = api.json(
        "/v2/billing/pods", podId=pod_id, bucketSize="hour", startTime=start, endTime=end
    )
    return body["records"]


def test_stop_releases_compute_and_bills_the_volume_at_the_stopped_rate_from_then_on(sim, api):
    response = action(api, RUNNING_POD, "stop")
    assert response.status_code == 200
    pod = decoded(response)
    assert (pod["status"], pod["cost"], pod["actions"]) == ("EXITED", 0, ["start", "terminate"])
    sim.advance(hours=2)
    current, after = hours_of(api, RUNNING_POD, t("11-20T14:00"), t("11-20T16:00"))
    assert current["gpuAmount"] == Decimal("2.69")  # ran until 14:30
    assert after["gpuAmount"] == 0
    assert after["diskAmount"] == q(200 * Decimal("0.20") / 730)
    assert sim.state.pod_status(RUNNING_POD) == "EXITED"


def test_start_boots_a_stopped_pod_and_compute_bills_again(sim, api):
    pod = decoded(action(api, STOPPED_POD, "start"))
    assert pod["status"] == "STARTING"
    assert pod["startedAt"] == t("11-20T14:30")
    sim.advance(minutes=1)
    assert api.json(f"/v2/pods/{STOPPED_POD}")["status"] == "RUNNING"
    sim.advance(hours=2)
    record = hours_of(api, STOPPED_POD, t("11-20T15:00"), t("11-20T16:00"))[0]
    assert record["gpuAmount"] == Decimal("0.34")  # community RTX 4090
    assert record["diskAmount"] == q((20 + 100) * Decimal("0.10") / 730)


def test_restart_keeps_billing_and_restarts_the_clock_of_the_run(sim, api):
    pod = decoded(action(api, RUNNING_POD, "restart"))
    assert pod["status"] == "STARTING"
    assert pod["startedAt"] == t("11-20T14:30")
    sim.advance(hours=1)
    assert hours_of(api, RUNNING_POD, t("11-20T14:00"), t("11-20T15:00"))[0][
        "gpuAmount"
    ] == Decimal("5.38")


def test_terminate_removes_the_pod_but_keeps_its_history(sim, api):
    before = hours_of(api, RUNNING_POD, t("11-18T00:00"), t("11-20T15:00"))
    response = action(api, RUNNING_POD, "terminate")
    assert response.status_code == 204
    assert response.content == b""
    assert RUNNING_POD not in {p["id"] for p in api.json("/v2/pods")["pods"]}
    assert api.get(f"/v2/pods/{RUNNING_POD}").status_code == 404
    sim.advance(hours=3)
    after = hours_of(api, RUNNING_POD, t("11-18T00:00"), t("11-21T00:00"))
    assert after == before  # nothing new after 14:30, nothing lost before
    assert sim.state.pod_status(RUNNING_POD) == "TERMINATED"


def test_delete_on_a_pod_is_terminate(api):
    assert api.delete(f"/v2/pods/{STOPPED_POD}").status_code == 204
    assert api.get(f"/v2/pods/{STOPPED_POD}").status_code == 404


@pytest.mark.parametrize(
    "pod_id,name",
    [
        (STOPPED_POD, "stop"),  # already EXITED
        (RUNNING_POD, "start"),  # already RUNNING
        (STOPPED_POD, "restart"),
        (TERMINATED_POD, "start"),  # terminated pods take no action
        (TERMINATED_POD, "terminate"),
    ],
)
def test_invalid_transitions_are_409(api, pod_id, name):
    response = action(api, pod_id, name)
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    problem = decoded(response)
    assert problem["status"] == 409
    assert problem["title"] == "Conflict"


def test_cluster_member_pods_are_listed_only_on_request_and_take_no_pod_actions(api):
    standalone = api.json("/v2/pods")["pods"]
    everything = api.json("/v2/pods", includeClusterPods="true")["pods"]
    members = [p for p in everything if "cluster" in p]
    assert not any("cluster" in p for p in standalone)
    assert len(members) == 2 and {p["cluster"]["id"] for p in members} == {CLUSTER_POD_OF}
    assert api.json(f"/v2/clusters/{CLUSTER_POD_OF}/pods")["pods"] == members
    assert action(api, members[0]["id"], "stop").status_code == 409


def test_unknown_action_is_422_and_a_body_that_is_not_json_400(api):
    response = action(api, RUNNING_POD, "hibernate")
    assert response.status_code == 422
    assert decoded(response)["errors"]
    raw = api.http.post(f"/v2/pods/{RUNNING_POD}/action", content=b"stop please")
    assert raw.status_code == 400


CREATE = {
    "name": "vision-labgov-42",
    "image": "ghcr.io/northfield-vision/train:4.2",
    "gpu": {"id": H100, "count": 2},
    "cloud": "SECURE",
    "env": {"LABGOV_ALLOCATION": "42"},
    "disk": 40,
    "mounts": {"network": [{"volumeId": "vc8h2m5q1z", "path": "/workspace"}]},
}


def test_create_pod_honours_the_request_and_bills_from_now(sim, api):
    response = api.post("/v2/pods", CREATE)
    assert response.status_code == 201
    pod = decoded(response)
    assert pod["status"] == "STARTING"
    assert (pod["name"], pod["env"], pod["disk"]) == (
        "vision-labgov-42",
        {"LABGOV_ALLOCATION": "42"},
        40,
    )
    assert pod["gpu"] == {"id": H100, "count": 2}
    assert pod["mounts"] == CREATE["mounts"]
    assert pod["cost"] == Decimal("5.38")
    assert pod["dataCenterId"] == "US-KS-2"  # where its network volume is
    assert pod["createdAt"] == t("11-20T14:30")
    sim.advance(minutes=1)
    assert api.json(f"/v2/pods/{pod['id']}")["status"] == "RUNNING"
    sim.advance(hours=2)
    records = hours_of(api, pod["id"], t("11-20T00:00"), t("11-21T00:00"))
    assert [r["startTime"] for r in records] == [
        t("11-20T14:00"),
        t("11-20T15:00"),
        t("11-20T16:00"),
    ]
    assert records[0]["gpuAmount"] == Decimal("2.69")
    assert records[1]["gpuAmount"] == Decimal("5.38")
    assert records[1]["diskAmount"] == q(40 * Decimal("0.10") / 730)


def test_create_pod_from_a_template_takes_its_image_and_env(api):
    body = {"name": "dl101-lab5", "templateId": "nf-dl101-2026f", "cloud": "COMMUNITY"}
    body["gpu"] = {"id": "NVIDIA GeForce RTX 4090"}
    pod = decoded(api.post("/v2/pods", body))
    assert pod["template"] == "nf-dl101-2026f"
    assert pod["image"] == "ghcr.io/northfield-cs/dl101-lab:2026f"
    assert pod["env"]["LABGOV_ALLOCATION"] == "lga-demo-6"
    assert pod["cost"] == Decimal("0.34")


def test_create_cpu_pod(api):
    body = {"name": "nlp-tokenize", "image": "python:3.12", "cpu": {"id": "cpu3c", "vcpuCount": 8}}
    pod = decoded(api.post("/v2/pods", body))
    assert pod["cpu"]["vcpuCount"] == 8
    assert pod["cost"] == Decimal("0.24")


@pytest.mark.parametrize(
    "change,status",
    [
        ({"name": None}, 422),  # required
        ({"bogus": 1}, 422),  # unknown property
        ({"image": None}, 422),  # image or templateId
        ({"gpu": {"id": H100, "count": 0}}, 422),
        ({"cpu": {"id": "cpu3c", "vcpuCount": 4}}, 400),  # gpu and cpu: a cross-field rule
        ({"gpu": {"id": H100, "count": 1.0}}, 422),  # an integer written as a float
        ({"mounts": {"persistent": {"size": 5, "path": "/w"}}}, 422),  # below the minimum size
        ({"gpu": {"id": "NVIDIA Imaginary 9000"}}, 400),
        ({"gpu": {"id": H100, "count": 9}}, 400),
        ({"templateId": "no-such-template"}, 400),
        ({"cloud": "COMMUNITY"}, 400),  # network volumes are secure cloud only
        ({"mounts": {"network": [{"volumeId": "nope", "path": "/w"}]}}, 400),
    ],
)
def test_invalid_create_requests_are_refused_with_reasons(api, change, status):
    body = {**CREATE, **change}
    body = {k: v for k, v in body.items() if v is not None}
    response = api.post("/v2/pods", body)
    assert response.status_code == status, response.text
    problem = decoded(response)
    assert problem["status"] == status
    if status == 422:
        assert problem["errors"]


def test_create_needs_one_hour_of_credit(sim, api):
    sim.state.set_balance(Decimal("5.37"))
    response = api.post("/v2/pods", CREATE)
    assert response.status_code == 402
    assert "balance" in decoded(response)["detail"]
    sim.state.set_balance(Decimal("5.38"))
    assert api.post("/v2/pods", CREATE).status_code == 201


def test_delete_network_volume_stops_its_billing_and_frees_tier_room(sim, api):
    assert api.delete("/v2/network-volumes/th5d8r2y7e").status_code == 204
    assert api.get("/v2/network-volumes/th5d8r2y7e").status_code == 404
    sim.advance(hours=2)
    body = api.json("/v2/billing/network-volumes", bucketSize="hour", startTime=t("11-20T14:00"))
    by_volume = {(r["networkVolumeId"], r["startTime"]): r for r in body["records"]}
    assert ("th5d8r2y7e", t("11-20T15:00")) not in by_volume
    assert by_volume[("th5d8r2y7e", t("11-20T14:00"))]["standardAmount"] == q(
        300 * Decimal("0.07") / 2 / 730
    )
    # With 300 GB gone, the older nv4lpd7x2k's 500 GB leave room for 500 of vision-checkpoints'
    # 750 GB in the 1,000 GB tier from 14:30 (200 before).
    checkpoints = by_volume[("vc8h2m5q1z", t("11-20T15:00"))]
    assert checkpoints["standardAmount"] == q(
        500 * Decimal("0.07") / 730 + 250 * Decimal("0.05") / 730
    )


def test_a_volume_in_use_cannot_be_deleted(api):
    response = api.delete("/v2/network-volumes/nv4lpd7x2k")  # nlp-llama-ft runs on it
    assert response.status_code == 409
    assert "n3l7p1m5q9r2s6" in decoded(response)["detail"]


def test_a_volume_a_stopped_pod_mounts_cannot_be_deleted_until_the_pod_is_terminated(api):
    """As Runpod answers: a stopped pod still mounts its network volume, so the delete is a
    409 problem (the spec's error response for any status it lists no body for) naming the
    pod; once the pod is terminated, the volume goes (204) and is no longer listed."""
    from labgov.runpod.schema import validate

    response = api.delete("/v2/network-volumes/vc8h2m5q1z")  # vision-data-sync, EXITED
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    problem = decoded(response)
    validate("ErrorResponse", problem)
    assert problem["status"] == 409 and "h6g5f4d3s2a1p0" in problem["detail"]
    assert action(api, "h6g5f4d3s2a1p0", "terminate").status_code == 204
    assert api.delete("/v2/network-volumes/vc8h2m5q1z").status_code == 204
    listed = {v["id"] for v in api.json("/v2/network-volumes")["networkVolumes"]}
    assert "vc8h2m5q1z" not in listed


@pytest.mark.parametrize(
    "headers,detail",
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer wrong"}, "invalid API key"),
        ({"Authorization": "Basic c2ltLWtleQ=="}, "malformed"),
    ],
)
def test_every_v2_route_needs_the_bearer_key(sim, headers, detail):
    import httpx

    from labgov.core.tls import default_context

    for path in ("/v2/pods", "/v2/billing", "/v2/catalog/gpus", "/v2/nope"):
        response = httpx.get(sim.base_url + path, headers=headers, verify=default_context())
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/problem+json"
        assert detail in decoded(response)["detail"]
        assert "RateLimit" not in response.headers


def test_unknown_ids_and_routes_are_404(api):
    for path in (
        "/v2/pods/nope",
        "/v2/network-volumes/nope",
        "/v2/serverless/nope",
        "/v2/clusters/nope",
        "/v2/clusters/nope/pods",
        "/v2/catalog/gpus/nope",
        "/v2/unknown",
    ):
        response = api.get(path)
        assert response.status_code == 404, path
        assert decoded(response)["title"] == "Not Found"


def test_wrong_method_is_405_with_allow(api):
    response = api.http.put("/v2/pods")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    assert api.delete("/v2/billing").status_code == 405
    assert api.http.get(f"/v2/pods/{RUNNING_POD}/action").status_code == 405


@pytest.mark.parametrize(
    "params",
    [
        {"startTime": "yesterday"},
        {"startTime": "2026-11-01T00:00:00"},  # no offset
        {"bucketSize": "fortnight"},
        {"lastN": "0"},
        {"lastN": "three"},
        {"lastN": "3", "startTime": "2026-11-01T00:00:00Z"},
        {"startTime": "2026-11-10T00:00:00Z", "endTime": "2026-11-01T00:00:00Z"},
        {"lastN": "100001"},
        {"bucketSize": "year", "lastN": "100000"},  # before year 1
        {"bucketSize": "year", "endTime": "9999-12-31T23:00:00Z"},  # after year 9999
    ],
)
def test_bad_billing_queries_are_400(api, params):
    response = api.get("/v2/billing/pods", **params)
    assert response.status_code == 400
    assert decoded(response)["detail"]


def test_bad_boolean_is_400(api):
    assert api.get("/v2/pods", includeClusterPods="maybe").status_code == 400
