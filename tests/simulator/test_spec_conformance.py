"""Where the simulator once strayed from the spec: a fractional volume size accepted (and every
billing call then failing), cross-field rules answered 422 instead of 400, no way to answer the
spec's "could not be placed" 400 or a 403, and years before 1000 written with three digits."""

import pytest

from tests.simulator.conftest import decoded
from tests.simulator.test_actions import CREATE

VOLUME = {"name": "scratch", "dataCenter": "EU-RO-1"}


@pytest.mark.parametrize("size", [10.0, 20.5, 9, 4097, True, "20"])
def test_a_volume_size_must_be_a_whole_number_of_gb_from_10_to_4096(api, size):
    response = api.post("/v2/network-volumes", {**VOLUME, "size": size})
    assert response.status_code == 422, response.text
    assert decoded(response)["errors"]
    # Nothing half-made is left behind for billing to trip over.
    assert api.get("/v2/billing/network-volumes").status_code == 200
    assert api.get("/v2/billing").status_code == 200


@pytest.mark.parametrize("size", [10, 4096])
def test_the_size_limits_themselves_are_accepted_and_billed(api, size):
    assert api.post("/v2/network-volumes", {**VOLUME, "size": size}).status_code == 201
    assert api.get("/v2/billing/network-volumes", bucketSize="hour").status_code == 200


@pytest.mark.parametrize(
    "change",
    [
        {"cpu": {"id": "cpu3c", "vcpuCount": 4}},  # gpu and cpu
        {
            "mounts": {
                "persistent": {"size": 20, "path": "/a"},
                "network": [{"volumeId": "nv4lpd7x2k", "path": "/b"}],
            }
        },
    ],
)
def test_cross_field_rules_answer_400_as_the_spec_says(api, change):
    response = api.post("/v2/pods", {**CREATE, **change})
    assert response.status_code == 400, response.text


@pytest.mark.parametrize(
    ("kind", "status", "words"),
    [("capacity", 400, "could not be placed"), ("403", 403, "cannot access")],
)
def test_a_capacity_refusal_or_a_403_can_be_injected(sim, api, kind, status, words):
    sim.inject_fault(path_prefix="/v2/pods", kind=kind, method="POST")
    response = api.post("/v2/pods", CREATE)
    assert response.status_code == status
    assert words in decoded(response)["detail"]
    assert api.post("/v2/pods", CREATE).status_code == 201  # once only


def test_years_before_1000_are_written_with_four_digits(api):
    body = api.json(
        "/v2/billing/pods",
        bucketSize="year",
        startTime="0999-01-01T00:00:00Z",
        endTime="1001-01-01T00:00:00Z",
    )
    query = body["metadata"]["query"]
    assert query["startTime"] == "0999-01-01T00:00:00Z"
    assert query["endTime"] == "1001-01-01T00:00:00Z"
