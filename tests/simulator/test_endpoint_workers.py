"""An endpoint's workers (GET /v2/serverless/{id}/workers) and the change of its workers
(PATCH /v2/serverless/{id}), served as the contract describes and read by the client; a
PATCH that breaks the contract is refused in words."""

import pytest

from labgov.runpod import schema
from labgov.runpod.client import RunpodClient
from labgov.runpod.errors import RunpodError

ALWAYS_ON = "x2visionseg0c3"  # the default scenario's endpoint with one minimum worker


def test_workers_fit_the_contract_and_the_client_reads_the_summary(sim, api):
    body = api.json(f"/v2/serverless/{ALWAYS_ON}/workers")
    assert schema.errors("ListEndpointWorkersResponse", body) == []
    summary = RunpodClient(sim.base_url, sim.api_key).endpoint_workers(ALWAYS_ON)
    assert summary.total == summary.running + summary.idle >= 1


def test_patch_changes_the_minimum_and_the_idle_timeout(sim):
    client = RunpodClient(sim.base_url, sim.api_key)
    endpoint = client.update_endpoint_workers(ALWAYS_ON, workers_min=0, idle_timeout_seconds=30)
    assert (endpoint.workers_min, endpoint.idle_timeout_seconds) == (0, 30)
    listed = next(e for e in client.list_endpoints() if e.id == ALWAYS_ON)
    assert (listed.workers_min, listed.idle_timeout_seconds) == (0, 30)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"workers": {"min": 9}}, 400, "workers.min (9) is above workers.max (4)"),
        ({"workers": {"min": -1}}, 422, "request validation failed"),
        ({"workers": {"min": 0, "idleTimeout": 0}}, 422, "request validation failed"),
        ({"workers": {"min": 0}, "colour": "red"}, 422, "request validation failed"),
    ],
)
def test_a_bad_patch_is_refused_and_changes_nothing(sim, api, body, status, words):
    response = api.http.patch(f"/v2/serverless/{ALWAYS_ON}", json=body)
    assert response.status_code == status and words in response.text
    assert api.json(f"/v2/serverless/{ALWAYS_ON}")["workers"]["min"] == 1


def test_the_client_says_what_runpod_refused(sim):
    client = RunpodClient(sim.base_url, sim.api_key)
    with pytest.raises(RunpodError, match="above workers.max"):
        client.update_endpoint_workers(ALWAYS_ON, workers_min=50)
    with pytest.raises(RunpodError, match="not found"):
        client.endpoint_workers("no-such-endpoint")


def test_an_endpoint_scaling_on_request_count_has_no_idle_timeout(sim, api):
    """The spec: idleTimeout does not apply to a queue endpoint scaling on requestCount; it
    is refused on create and update and omitted from what is listed."""
    scaling = {"type": "REQUEST_COUNT", "requestCount": 8}
    body = {
        "name": "by-requests",
        "type": "QUEUE",
        "gpu": {"pools": ["ADA_80_PRO"], "count": 1},
        "image": "runpod/worker-vllm:2.1",
        "scaling": scaling,
        "workers": {"min": 0, "max": 2, "idleTimeout": 30},
    }
    refused = api.http.post("/v2/serverless", json=body)
    assert refused.status_code == 400 and "does not apply" in refused.text
    made = api.http.post("/v2/serverless", json={**body, "workers": {"min": 0, "max": 2}})
    assert made.status_code == 201, made.text
    endpoint = made.json()
    assert "idleTimeout" not in endpoint["workers"]
    assert schema.errors("Endpoint", endpoint) == []
    url = f"/v2/serverless/{endpoint['id']}"
    patch = api.http.patch(url, json={"workers": {"min": 1, "idleTimeout": 10}})
    assert patch.status_code == 400 and "does not apply" in patch.text
    assert api.json(url)["workers"] == {"min": 0, "max": 2}
    # Back to scaling on queue delay, an idle timeout applies again.
    queue = {"scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}, "workers": {"idleTimeout": 10}}
    assert api.http.patch(url, json=queue).json()["workers"]["idleTimeout"] == 10
