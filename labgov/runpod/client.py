"""A client for the Runpod REST API v2: the calls labgov needs, as typed values.

Retries, deadlines and error mapping live in `session.py`, JSON parsing in `parsing.py`. Pod
actions and deletes are retried like reads (repeating one is harmless: a repeated stop gives a
409, which the caller handles); creating a pod is not, see `create_pod`.
"""

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from django.views.decorators.debug import sensitive_variables

from labgov.runpod.errors import (
    RunpodAuthError,
    RunpodBadResponse,
    RunpodError,
    RunpodNotFound,
    RunpodOutcomeUnknown,
    RunpodUnavailable,
)
from labgov.runpod.parsing import (
    MalformedBody,
    decode_json,
    parse_account_billing,
    parse_balance,
    parse_billing_records,
    parse_cluster,
    parse_clusters,
    parse_endpoint,
    parse_endpoints,
    parse_gpu_types,
    parse_network_volumes,
    parse_pod,
    parse_pods,
    parse_worker_summary,
)
from labgov.runpod.session import Session, describe_transport_error
from labgov.runpod.types import (
    AccountBalance,
    AccountBillingRecord,
    BillingKind,
    BillingRecord,
    Cluster,
    Endpoint,
    GpuType,
    NetworkVolume,
    Pod,
    WorkerSummary,
)

logger = logging.getLogger(__name__)

# A connection-test button should answer while the admin is still looking at it.
CHECK_ATTEMPTS = 2
CHECK_DEADLINE_S = 20.0

POD_ACTIONS = frozenset({"start", "stop", "restart", "terminate"})
BUCKET_SIZES = frozenset({"hour", "day", "week", "month", "year"})

# Billing endpoint and the field naming each record's resource (also its filter parameter).
BILLING_ENDPOINTS: dict[BillingKind, tuple[str, str | None]] = {
    BillingKind.POD: ("/v2/billing/pods", "podId"),
    BillingKind.NETWORK_VOLUME: ("/v2/billing/network-volumes", "networkVolumeId"),
    BillingKind.SERVERLESS: ("/v2/billing/serverless", "serverlessId"),
    BillingKind.CLUSTER: ("/v2/billing/clusters", "clusterId"),
    BillingKind.ENDPOINT: ("/v2/billing/endpoints", None),
}


@dataclass(frozen=True, slots=True)
class ConnectionCheck:
    ok: bool
    message: str
    # The pods the key could list: two keys of one connection must see the same account.
    pod_ids: frozenset[str] = frozenset()


class RunpodClient:
    @sensitive_variables()  # an error page must not show the key
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: httpx.Timeout | float = httpx.Timeout(15.0, connect=5.0),  # noqa: B008 - immutable
        max_attempts: int = 5,
        deadline_s: float = 120.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._session = Session(
            base_url,
            api_key,
            timeout=timeout,
            max_attempts=max_attempts,
            deadline_s=deadline_s,
            transport=transport,
            sleep=sleep,
            clock=clock,
        )
        self.base_url = self._session.base_url

    def __repr__(self) -> str:
        return f"RunpodClient(base_url={self.base_url!r}, api_key='{self._session.masked_key}')"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "RunpodClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- Reads ------------------------------------------------------------------------------

    def list_pods(self, include_cluster_pods: bool = True) -> list[Pod]:
        params = {"includeClusterPods": "true" if include_cluster_pods else "false"}
        return parse_pods(self._get_json("/v2/pods", params))

    def get_pod(self, pod_id: str) -> Pod:
        return parse_pod(self._get_json(f"/v2/pods/{_segment(pod_id)}"))

    def list_network_volumes(self) -> list[NetworkVolume]:
        return parse_network_volumes(self._get_json("/v2/network-volumes"))

    def list_endpoints(self) -> list[Endpoint]:
        return parse_endpoints(self._get_json("/v2/serverless"))

    def endpoint_workers(self, endpoint_id: str) -> WorkerSummary:
        """GET /v2/serverless/{id}/workers: how many of its workers run a job, wait idle, …"""
        return parse_worker_summary(
            self._get_json(f"/v2/serverless/{_segment(endpoint_id)}/workers")
        )

    def list_clusters(self) -> list[Cluster]:
        return parse_clusters(self._get_json("/v2/clusters"))

    def list_cluster_pods(self, cluster_id: str) -> list[Pod]:
        return parse_pods(self._get_json(f"/v2/clusters/{_segment(cluster_id)}/pods"))

    def list_gpu_types(self) -> list[GpuType]:
        return parse_gpu_types(self._get_json("/v2/catalog/gpus"))

    def billing_records(
        self,
        kind: BillingKind,
        *,
        start: dt.datetime,
        end: dt.datetime,
        bucket_size: str = "hour",
        resource_id: str | None = None,
    ) -> list[BillingRecord]:
        kind = BillingKind(kind)
        path, id_field = BILLING_ENDPOINTS[kind]
        params = _billing_params(start, end, bucket_size)
        if resource_id is not None:
            if id_field is None:
                raise ValueError("Endpoint billing records carry no resource id to filter by")
            if not resource_id:
                raise ValueError("resource_id must not be empty (pass None for every resource)")
            params[id_field] = resource_id
        return parse_billing_records(self._get_json(path, params), kind, id_field, resource_id)

    def billing_records_body(
        self, kind: BillingKind, *, start: dt.datetime, end: dt.datetime, bucket_size: str = "hour"
    ) -> bytes:
        """The unparsed body of `billing_records` for every resource of a kind: for a bulk
        writer that hands the JSON to the database, which reads its numbers exactly."""
        path, _ = BILLING_ENDPOINTS[BillingKind(kind)]
        return self.get_json_bytes(path, _billing_params(start, end, bucket_size))

    def account_billing(
        self, *, start: dt.datetime, end: dt.datetime, bucket_size: str = "hour"
    ) -> list[AccountBillingRecord]:
        params = _billing_params(start, end, bucket_size)
        return parse_account_billing(self._get_json("/v2/billing", params))

    def get_json_bytes(self, path: str, params: dict | None = None) -> bytes:
        """The raw body of a GET, for callers that parse it themselves (bulk imports).

        Retried like any GET; a body that does not even start and end like a JSON document is
        treated as cut short. The caller still owns the full parse.
        """
        if not path.startswith("/v2/"):
            raise ValueError(f"{path!r} is not a Runpod API v2 path (/v2/...)")
        response, _ = self._session.request(
            "GET", path, params=params, read=_looks_like_json_document
        )
        return response.content

    # -- Writes -----------------------------------------------------------------------------

    def create_pod(self, body: dict) -> Pod:
        if not isinstance(body, dict):
            raise TypeError("body must be a CreatePodRequest as a dict")
        response, _ = self._session.request("POST", "/v2/pods", body=body, idempotent=False)
        try:
            return parse_pod(decode_json(response.content))
        except (MalformedBody, RunpodBadResponse) as exc:
            # Not RunpodBadResponse, which is transient: the pod exists, and a blind retry
            # would create a second one.
            reason = exc.message if isinstance(exc, RunpodBadResponse) else str(exc)
            raise RunpodOutcomeUnknown(
                f"Runpod created the pod ({response.status_code}) but its answer could not be"
                f" read ({reason}). Look for the pod on Runpod before creating it again.",
                status=response.status_code,
            ) from exc

    def create_network_volume(self, body: dict) -> NetworkVolume:
        """POST /v2/network-volumes (a CreateNetworkVolumeRequest). Like creating a pod, not
        retried blindly: on an unknown outcome look for the volume by name first."""
        if not isinstance(body, dict):
            raise TypeError("body must be a CreateNetworkVolumeRequest as a dict")
        response, _ = self._session.request(
            "POST", "/v2/network-volumes", body=body, idempotent=False
        )
        try:
            (volume,) = parse_network_volumes({"networkVolumes": [decode_json(response.content)]})
        except (MalformedBody, RunpodBadResponse) as exc:
            reason = exc.message if isinstance(exc, RunpodBadResponse) else str(exc)
            raise RunpodOutcomeUnknown(
                f"Runpod created the network volume ({response.status_code}) but its answer"
                f" could not be read ({reason}). Look for it on Runpod before creating it again.",
                status=response.status_code,
            ) from exc
        return volume

    def _create(self, path: str, body: dict, what: str, parse):
        """POST a create; like a pod's, never retried blindly (Runpod may have made it)."""
        if not isinstance(body, dict):
            raise TypeError(f"body must be the create request of {what} as a dict")
        response, _ = self._session.request("POST", path, body=body, idempotent=False)
        try:
            return parse(decode_json(response.content))
        except (MalformedBody, RunpodBadResponse) as exc:
            reason = exc.message if isinstance(exc, RunpodBadResponse) else str(exc)
            raise RunpodOutcomeUnknown(
                f"Runpod created the {what} ({response.status_code}) but its answer could not"
                f" be read ({reason}). Look for it on Runpod before creating it again.",
                status=response.status_code,
            ) from exc

    def _update(self, path: str, body: dict, what: str, parse):
        if not isinstance(body, dict):
            raise TypeError(f"body must be the update of {what} as a dict")
        response, _ = self._session.request("PATCH", path, body=body)
        try:
            return parse(decode_json(response.content))
        except MalformedBody as exc:
            raise RunpodBadResponse(
                f"Runpod accepted the change of {what} but its answer could not be read "
                f"({exc}); read it again to see what it holds.",
                status=response.status_code,
            ) from exc

    def create_endpoint(self, body: dict) -> Endpoint:
        """POST /v2/serverless (a CreateEndpointRequest): 201 and the Endpoint."""
        return self._create("/v2/serverless", body, "serverless endpoint", parse_endpoint)

    def update_endpoint(self, endpoint_id: str, body: dict) -> Endpoint:
        """PATCH /v2/serverless/{id} (an UpdateEndpointRequest)."""
        path = f"/v2/serverless/{_segment(endpoint_id)}"
        return self._update(path, body, f"endpoint {endpoint_id!r}", parse_endpoint)

    def delete_endpoint(self, endpoint_id: str) -> None:
        self._session.request("DELETE", f"/v2/serverless/{_segment(endpoint_id)}")

    def create_cluster(self, body: dict) -> Cluster:
        """POST /v2/clusters (a CreateClusterRequest): 201 and the Cluster."""
        return self._create("/v2/clusters", body, "cluster", parse_cluster)

    def update_cluster(self, cluster_id: str, body: dict) -> Cluster:
        """PATCH /v2/clusters/{id} (an UpdateClusterRequest: its name)."""
        path = f"/v2/clusters/{_segment(cluster_id)}"
        return self._update(path, body, f"cluster {cluster_id!r}", parse_cluster)

    def delete_cluster(self, cluster_id: str) -> None:
        self._session.request("DELETE", f"/v2/clusters/{_segment(cluster_id)}")

    def pod_action(self, pod_id: str, action: str) -> Pod | None:
        """start, stop, restart or terminate; None when Runpod answers without a pod (204)."""
        if action not in POD_ACTIONS:
            raise ValueError(f"{action!r} is not a pod action ({', '.join(sorted(POD_ACTIONS))})")
        path = f"/v2/pods/{_segment(pod_id)}/action"
        response, _ = self._session.request("POST", path, body={"action": action})
        if response.status_code == 204 or not response.content.strip():
            return None
        try:
            data = decode_json(response.content)
        except MalformedBody as exc:
            raise RunpodBadResponse(
                f"Runpod accepted the {action} of pod {pod_id!r} but its answer could not be"
                f" read ({exc}); read the pod again to see its status.",
                status=response.status_code,
            ) from exc
        return parse_pod(data)

    def update_endpoint_workers(
        self, endpoint_id: str, *, workers_min: int, idle_timeout_seconds: int | None = None
    ) -> Endpoint:
        """PATCH /v2/serverless/{id} with only `workers` (min, and idleTimeout when given):
        Runpod changes nothing else and answers with the whole endpoint. Setting the same
        values again changes nothing, so it may be retried."""
        workers = {"min": workers_min}
        if idle_timeout_seconds is not None:
            workers["idleTimeout"] = idle_timeout_seconds
        path = f"/v2/serverless/{_segment(endpoint_id)}"
        response, _ = self._session.request("PATCH", path, body={"workers": workers})
        try:
            (endpoint,) = parse_endpoints({"endpoints": [decode_json(response.content)]})
        except MalformedBody as exc:
            raise RunpodBadResponse(
                f"Runpod accepted the change of endpoint {endpoint_id!r} but its answer could"
                f" not be read ({exc}); read the endpoint again to see its workers.",
                status=response.status_code,
            ) from exc
        return endpoint

    def delete_network_volume(self, volume_id: str) -> None:
        self._session.request("DELETE", f"/v2/network-volumes/{_segment(volume_id)}")

    def account_balance(self) -> AccountBalance | None:
        """The account's balance from Runpod's GraphQL API, or None where that API is gone
        (it retires in early 2027; admins then enter the balance by hand). A server without
        it (404, 405, 410, 501) answers at once: none of those is retried."""
        try:
            _, data = self._session.request(
                "POST", "/graphql", body={"query": BALANCE_QUERY}, read=decode_json
            )
        except RunpodError as exc:
            if exc.status in GRAPHQL_ABSENT:
                return None
            raise
        return parse_balance(data)

    # -- Connection test --------------------------------------------------------------------

    def check_connection(self) -> ConnectionCheck:
        """Whether this base URL and key can read the account, in words for an admin."""
        try:
            data = self._get_json(
                "/v2/pods",
                {"includeClusterPods": "true"},
                attempts=min(CHECK_ATTEMPTS, self._session.max_attempts),
                deadline_s=min(CHECK_DEADLINE_S, self._session.deadline_s),
            )
            if not (isinstance(data, dict) and isinstance(data.get("pods"), list)):
                return ConnectionCheck(False, self._not_the_api())
            pod_ids = frozenset(pod.id for pod in parse_pods(data))
            count = len(pod_ids)
        except RunpodError as exc:
            return ConnectionCheck(False, self._explain_failed_check(exc))
        except Exception as exc:  # the button must always show something
            logger.exception("Unexpected error testing the Runpod connection to %s", self.base_url)
            return ConnectionCheck(
                False, f"Unexpected error while testing the connection ({type(exc).__name__})."
            )
        found = f"{count} found"
        return ConnectionCheck(
            True,
            f"Connected: the key can read this account's pods ({found}). A read-only key is"
            " enough for syncing; provisioning needs a key with write access.",
            pod_ids,
        )

    def _not_the_api(self, what: str = "") -> str:
        return (
            f"The server at {self.base_url} did not answer like the Runpod API{what}"
            " (is the base URL right?)."
        )

    def _explain_failed_check(self, exc: RunpodError) -> str:
        cause = exc.__cause__
        if isinstance(exc, RunpodAuthError) and exc.status == 401:
            return "Runpod refused the API key (401): check it was copied whole and is not revoked."
        if isinstance(exc, RunpodAuthError) and exc.status == 403:
            return (
                "Runpod accepted the API key but refused to list pods with it (403): give the"
                " key read access to pods (a read-only key is enough for syncing)."
            )
        if isinstance(exc, RunpodNotFound) or exc.status == 405:
            return self._not_the_api(f" ({exc.status} for /v2/pods)")
        if isinstance(exc, RunpodBadResponse) and isinstance(cause, MalformedBody):
            return self._not_the_api()
        if isinstance(exc, RunpodUnavailable) and exc.status is None and cause is not None:
            return (
                f"Could not reach {self.base_url}: {describe_transport_error(cause)}"
                " (is the base URL right?)."
            )
        if isinstance(exc, RunpodUnavailable) and exc.status == 429:
            return "Runpod is rate-limiting this API key right now (429): try again in a minute."
        if isinstance(exc, RunpodUnavailable) and exc.status is not None:
            return (
                f"Runpod answered with a server error ({exc.status}): it may be down or busy;"
                " try again in a few minutes."
            )
        return exc.message

    # -- Helpers ----------------------------------------------------------------------------

    def _get_json(
        self,
        path: str,
        params: dict | None = None,
        *,
        attempts: int | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        _, data = self._session.request(
            "GET", path, params=params, read=decode_json, attempts=attempts, deadline_s=deadline_s
        )
        return data


# Answers meaning "this server has no GraphQL API": the balance is unavailable, not failing.
GRAPHQL_ABSENT = frozenset({404, 405, 410, 501})
BALANCE_QUERY = "query Balance { myself { clientBalance currentSpendPerHr spendLimit } }"


def _segment(value: str) -> str:
    """One path segment, escaped so an id can never change which URL is called."""
    if not isinstance(value, str) or not value.strip() or value in (".", ".."):
        raise ValueError(f"{value!r} is not a Runpod id")
    return quote(value, safe="")


def _billing_params(start: dt.datetime, end: dt.datetime, bucket_size: str) -> dict[str, str]:
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    if end <= start:
        raise ValueError("end must be after start")
    if bucket_size not in BUCKET_SIZES:
        raise ValueError(f"bucket_size must be one of {', '.join(sorted(BUCKET_SIZES))}")
    return {"startTime": rfc3339(start), "endTime": rfc3339(end), "bucketSize": bucket_size}


def rfc3339(moment: dt.datetime) -> str:
    """`2026-06-01T00:00:00Z`; fractions of a second only when there are any."""
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _looks_like_json_document(content: bytes) -> None:
    body = content.strip()
    if not body or (body[:1], body[-1:]) not in ((b"{", b"}"), (b"[", b"]")):
        raise MalformedBody("the answer was not complete JSON")
