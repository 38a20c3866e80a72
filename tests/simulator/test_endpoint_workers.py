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
