"""The /v2 routes: which handler answers each path and method, and the answers they give."""

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from labgov.runpod import schema
from labgov.simulator import billing, render, windows
from labgov.simulator.state import ApiError, SimState

JSON = "application/json"
PROBLEM = "application/problem+json"

BILLING_ROUTES = {
    "": None,
    "/pods": billing.POD,
    "/network-volumes": billing.NETWORK_VOLUME,
    "/serverless": billing.SERVERLESS,
    "/endpoints": billing.ENDPOINT,
    "/clusters": billing.CLUSTER,
}


@dataclass
class Response:
    status: int
    body: bytes | Iterator[bytes] = b""
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, value: Any) -> Response:
    return Response(status, render.dumps(value))


def problem_response(status: int, detail: str, errors: list[str] | None = None) -> Response:
    return Response(status, render.dumps(render.problem(status, detail, errors)), PROBLEM)


class Routes:
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
            ("/v2/serverless", {"GET": self.list_endpoints, "POST": self.create_endpoint}),
            (
                "/v2/serverless" + one,
                {
                    "GET": self.get_endpoint,
                    "PATCH": self.update_endpoint,
                    "DELETE": self.delete_endpoint,
                },
            ),
            ("/v2/serverless" + one + "/workers", {"GET": self.endpoint_workers}),
            ("/v2/clusters", {"GET": self.list_clusters, "POST": self.create_cluster}),
            (
                "/v2/clusters" + one,
                {
                    "GET": self.get_cluster,
                    "PATCH": self.update_cluster,
                    "DELETE": self.delete_cluster,
                },
            ),
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
        return json_response(200, {"pods": self.state.list_pods(include_cluster_pods=include)})

    def get_pod(self, match, params, body) -> Response:
        return json_response(200, self.state.get_pod(match["id"]))

    def create_pod(self, match, params, body) -> Response:
        return json_response(201, self.state.create_pod(parse_body(body)))

    def delete_pod(self, match, params, body) -> Response:
        self.state.pod_action(match["id"], "terminate")
        return Response(204)

    def pod_action(self, match, params, body) -> Response:
        request = parse_body(body)
        problems = schema.errors("PodActionRequest", request)
        if problems:
            raise ApiError(422 if isinstance(request, dict) else 400, "invalid action", problems)
        pod = self.state.pod_action(match["id"], request["action"])
        return Response(204) if pod is None else json_response(200, pod)

    def list_volumes(self, match, params, body) -> Response:
        return json_response(200, {"networkVolumes": self.state.list_volumes()})

    def create_volume(self, match, params, body) -> Response:
        return json_response(201, self.state.create_volume(parse_body(body)))

    def get_volume(self, match, params, body) -> Response:
        return json_response(200, self.state.get_volume(match["id"]))

    def delete_volume(self, match, params, body) -> Response:
        self.state.delete_volume(match["id"])
        return Response(204)

    def list_endpoints(self, match, params, body) -> Response:
        return json_response(200, {"endpoints": self.state.list_endpoints()})

    def get_endpoint(self, match, params, body) -> Response:
        return json_response(200, self.state.get_endpoint(match["id"]))

    def create_endpoint(self, match, params, body) -> Response:
        return json_response(201, self.state.create_endpoint(parse_body(body)))

    def update_endpoint(self, match, params, body) -> Response:
        return json_response(200, self.state.update_endpoint(match["id"], parse_body(body)))

    def delete_endpoint(self, match, params, body) -> Response:
        self.state.delete_endpoint(match["id"])
        return Response(204)

    def create_cluster(self, match, params, body) -> Response:
        return json_response(201, self.state.create_cluster(parse_body(body)))

    def update_cluster(self, match, params, body) -> Response:
        return json_response(200, self.state.update_cluster(match["id"], parse_body(body)))

    def delete_cluster(self, match, params, body) -> Response:
        self.state.delete_cluster(match["id"])
        return Response(204)

    def endpoint_workers(self, match, params, body) -> Response:
        return json_response(200, self.state.endpoint_workers(match["id"]))

    def list_clusters(self, match, params, body) -> Response:
        return json_response(200, {"clusters": self.state.list_clusters()})

    def get_cluster(self, match, params, body) -> Response:
        return json_response(200, self.state.get_cluster(match["id"]))

    def cluster_pods(self, match, params, body) -> Response:
        return json_response(200, {"pods": self.state.cluster_pods(match["id"])})

    def list_gpu_types(self, match, params, body) -> Response:
        return json_response(200, {"gpus": self.state.gpu_types()})

    def get_gpu_type(self, match, params, body) -> Response:
        return json_response(200, self.state.gpu_type(match["id"]))

    def billing(self, match, params, body) -> Response:
        product = BILLING_ROUTES[match["product"]]
        try:
            return Response(200, self.state.billing_body(product, params))
        except windows.QueryError as error:
            raise ApiError(400, str(error)) from None


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise ApiError(400, f"{name} must be true or false, not {params[name]!r}")
    return value in ("true", "1")


def parse_body(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as error:
        raise ApiError(400, f"the request body is not JSON: {error}") from None
