"""Every simulator response has the shape our schema describes, and (when Runpod's OpenAPI file
is present) the shape Runpod's contract describes too, for several scenarios."""

from collections.abc import Iterator

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from labgov.runpod.schema import validate
from labgov.simulator import SimulatorServer, load_scenario
from tests.runpod.openapi import SKIP_REASON, load_openapi
from tests.simulator.conftest import Api, decoded

LISTS = [
    ("/v2/pods", {}, "ListPodsResponse"),
    ("/v2/pods", {"includeClusterPods": "true"}, "ListPodsResponse"),
    ("/v2/network-volumes", {}, "ListNetworkVolumesResponse"),
    ("/v2/serverless", {}, "ListEndpointsResponse"),
    ("/v2/clusters", {}, "ListClustersResponse"),
    ("/v2/catalog/gpus", {}, "ListGpuTypesResponse"),
]
BILLING = [
    ("/v2/billing", "ListBillingResponse"),
    ("/v2/billing/pods", "ListPodBillingResponse"),
    ("/v2/billing/network-volumes", "ListNetworkVolumeBillingResponse"),
    ("/v2/billing/serverless", "ListServerlessBillingResponse"),
    ("/v2/billing/endpoints", "ListEndpointBillingResponse"),
    ("/v2/billing/clusters", "ListClusterBillingResponse"),
]
BILLING_QUERIES = [
    {},
    {"bucketSize": "hour", "lastN": "48"},
    {"bucketSize": "week", "lastN": "6"},
    {"bucketSize": "month", "startTime": "2026-01-01T00:00:00Z"},
]


def every_response(api: Api) -> Iterator[tuple[str, str, object]]:
    """(what, definition name, JSON) for every route the simulator serves."""
    for path, params, name in LISTS:
        yield f"GET {path} {params}", name, api.json(path, **params)
    for path, name in BILLING:
        for params in BILLING_QUERIES:
            yield f"GET {path} {params}", name, api.json(path, **params)
    pods = api.json("/v2/pods", includeClusterPods="true")["pods"]
    for pod in pods:
        yield f"GET pod {pod['id']}", "Pod", api.json(f"/v2/pods/{pod['id']}")
    for volume in api.json("/v2/network-volumes")["networkVolumes"]:
        yield "GET volume", "NetworkVolume", api.json(f"/v2/network-volumes/{volume['id']}")
    for endpoint in api.json("/v2/serverless")["endpoints"]:
        yield "GET endpoint", "Endpoint", api.json(f"/v2/serverless/{endpoint['id']}")
    for cluster in api.json("/v2/clusters")["clusters"]:
        yield "GET cluster", "Cluster", api.json(f"/v2/clusters/{cluster['id']}")
        pods_of = api.json(f"/v2/clusters/{cluster['id']}/pods")
        yield "GET cluster pods", "ListPodsResponse", pods_of
    gpu = api.json("/v2/catalog/gpus")["gpus"][0]
    yield "GET gpu", "GpuType", api.json(f"/v2/catalog/gpus/{gpu['id']}")
    for response in (
        api.get("/v2/pods/nope"),
        api.post("/v2/pods", {"bogus": True}),
        api.get("/v2/billing", bucketSize="fortnight"),
        Api(api.sim, key="wrong").get("/v2/pods"),
    ):
        assert response.headers["content-type"] == "application/problem+json"
        yield f"error {response.status_code}", "ErrorResponse", decoded(response)
    created = api.post(
        "/v2/pods",
        {
            "name": "contract-check",
            "image": "runpod/pytorch:2.8",
            "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 1},
            "env": {"LABGOV_ALLOCATION": "1"},
        },
    )
    if created.status_code == 201:
        yield "POST /v2/pods", "Pod", decoded(created)
        stopped = api.post(f"/v2/pods/{decoded(created)['id']}/action", {"action": "stop"})
        yield "POST action stop", "Pod", decoded(stopped)
    else:
        yield "POST /v2/pods refused", "ErrorResponse", decoded(created)


@pytest.fixture(params=["default", "empty", "generated"])
def scenario_api(request, small_generated) -> Iterator[Api]:
    scenario = small_generated if request.param == "generated" else load_scenario(request.param)
    with SimulatorServer(scenario=scenario) as sim:
        client = Api(sim)
        yield client
        client.close()


def test_every_response_fits_our_schema(scenario_api):
    seen = set()
    for what, name, body in every_response(scenario_api):
        try:
            validate(name, body)
        except Exception as error:
            pytest.fail(f"{what} does not fit {name}: {error}")
        seen.add(name)
    assert {"ListPodBillingResponse", "ErrorResponse", "ListBillingResponse"} <= seen


def test_request_bodies_the_simulator_accepts_fit_our_schema():
    validate("PodActionRequest", {"action": "terminate"})
    validate(
        "CreatePodRequest",
        {
            "name": "vision-train",
            "templateId": "runpod-torch-v280",
            "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 2},
            "cloud": "SECURE",
            "mounts": {"network": [{"volumeId": "nv4lpd7x2k", "path": "/workspace"}]},
            "env": {"LABGOV_ALLOCATION": "12"},
        },
    )


@pytest.fixture(scope="module")
def openapi_validators():
    doc = load_openapi()
    if doc is None:
        pytest.skip(SKIP_REASON)
    registry = Registry().with_resource(
        "urn:runpod-openapi", Resource.from_contents(doc, default_specification=DRAFT202012)
    )

    def validator(name: str) -> Draft202012Validator:
        schema = {"$ref": f"urn:runpod-openapi#/components/schemas/{name}"}
        return Draft202012Validator(schema, registry=registry)

    return validator


def test_every_response_fits_runpods_openapi(scenario_api, openapi_validators):
    for what, name, body in every_response(scenario_api):
        problems = [e.message for e in openapi_validators(name).iter_errors(body)]
        assert problems == [], f"{what} does not fit Runpod's {name}"


def test_the_openapi_check_catches_a_wrong_shape(openapi_validators):
    pod_without_cost = {"id": "x", "name": "y", "status": "RUNNING"}
    assert list(openapi_validators("Pod").iter_errors(pod_without_cost))
