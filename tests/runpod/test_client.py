"""The Runpod client against scripted answers: no network, no real waiting.

Fixtures are JSON text written by hand in the shapes of Runpod's OpenAPI v2 description, so
the number text the client parses is exactly what a server would send.
"""

import datetime as dt
import json
import logging
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from labgov.runpod import session as session_module
from labgov.runpod.client import ConnectionCheck, RunpodClient
from labgov.runpod.errors import (
    RunpodAuthError,
    RunpodBadResponse,
    RunpodConflict,
    RunpodError,
    RunpodInsufficientBalance,
    RunpodNotFound,
    RunpodOutcomeUnknown,
    RunpodRequestInvalid,
    RunpodUnavailable,
)
from labgov.runpod.types import (
    AccountBillingRecord,
    BillingKind,
    BillingRecord,
    Cluster,
    Endpoint,
    GpuType,
    NetworkVolume,
    Pod,
    PodRuntime,
)

KEY = "rpa_TESTKEY0123456789abcdefWXYZ"
UTC = dt.UTC

GPU_POD = """{
  "id": "7h9k2m4n6p", "name": "pytorch-training",
  "image": "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404", "args": "", "disk": 50,
  "ports": ["8888/http", "22/tcp"], "env": {"MODEL_NAME": "llama-3", "LABGOV_ALLOCATION": "17"},
  "registry": null, "status": "RUNNING", "actions": ["stop", "restart", "terminate"],
  "mounts": {"persistent": {"size": 20, "path": "/workspace"}},
  "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 2}, "cloud": "SECURE",
  "dataCenterId": "US-KS-2", "cudaVersion": "12.8",
  "ssh": {"proxy": {"host": "ssh.runpod.io", "port": 22, "username": "u", "command": "ssh u"},
          "direct": null},
  "template": "9x4m2p7v", "cost": 0.88, "locked": false, "globalNetworking": {"enabled": false},
  "runtime": {"uptime": 3600, "ports": []},
  "createdAt": "2026-06-01T12:00:00Z", "startedAt": "2026-06-01T12:02:00Z"
}"""

CLUSTER_POD = """{
  "id": "c1node0", "name": "train-node-0", "image": "runpod/pytorch:2", "args": "", "disk": 40,
  "ports": [], "env": {}, "registry": null, "status": "EXITED", "actions": ["start", "terminate"],
  "mounts": {"network": [{"volumeId": "2q9m7x4c", "path": "/data"}]},
  "gpu": {"id": "NVIDIA H100 80GB HBM3"}, "cloud": "SECURE", "dataCenterId": "EU-RO-1",
  "cudaVersion": null, "ssh": {"proxy": null, "direct": null},
  "cluster": {"id": "cluster_abc", "rank": 0, "role": "SLURM_CONTROLLER"},
  "template": null, "cost": 0, "locked": false, "globalNetworking": {"enabled": true},
  "runtime": null, "createdAt": "2026-06-01T14:00:00+02:00", "startedAt": null
}"""

# A CPU pod with the nullable fields absent and fields from a future API version.
CPU_POD = """{
  "id": "cpu42", "name": "etl", "image": "python:3.11-slim", "disk": 10, "env": {},
  "status": "PROVISIONING", "mounts": {}, "cpu": {"id": "cpu5c", "vcpuCount": 4, "memory": 16},
  "cloud": "COMMUNITY", "cost": 0.12, "createdAt": "2026-06-01T00:00:00.123456789Z",
  "someFutureField": {"nested": [1, 2, 3]}, "priority": "low"
}"""

VOLUMES = """{"networkVolumes": [
  {"id": "2q9m7x4c", "name": "training-dataset", "size": 100, "dataCenter": "US-KS-2",
   "type": "HIGH_PERFORMANCE"},
  {"id": "vol_std", "name": "scratch", "size": 1024, "dataCenter": "EU-RO-1", "type": "STANDARD",
   "extra": true}
]}"""

ENDPOINTS = """{"endpoints": [
  {"id": "4m7x2k9q", "name": "image-generator", "type": "QUEUE",
   "image": "runpod/pytorch:1.0.2", "args": "", "disk": 20, "ports": ["8000/http"],
   "env": {"MODEL_NAME": "sdxl"}, "registry": null,
   "gpu": {"pools": ["ADA_24", "AMPERE_48"], "excludedTypes": ["NVIDIA L40"], "count": 2,
           "allowedCudaVersions": [], "minCudaVersion": null},
   "workers": {"min": 0, "max": 5, "idleTimeout": 5},
   "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4}, "dataCenterIds": ["US-KS-2"],
   "networkVolumes": ["2q9m7x4c"], "timeout": 300000, "flashboot": "OFF",
   "createdAt": "2026-06-01T12:00:00Z"},
  {"id": "7c3v1n8p", "name": "cpu-inference", "type": "QUEUE", "image": "python:3.11-slim",
   "cpu": [{"id": "cpu5c", "vcpuCount": 4, "memory": 16}],
   "workers": {"min": 1, "max": 3}, "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
   "dataCenterIds": [], "networkVolumes": [], "timeout": 300000, "flashboot": "OFF",
   "createdAt": "2026-06-02T08:30:00Z"}
]}"""

CLUSTERS = """{"clusters": [
  {"id": "cluster_abc", "name": "my-training-cluster", "type": "TRAINING",
   "compute": {"gpuTypeId": "NVIDIA H100 80GB HBM3", "gpuCountPerPod": 8, "podCount": 4},
   "template": "tpl_abc", "dataCenterId": "US-TX-3",
   "pods": {"total": 4, "byStatus": {"RUNNING": 4}}, "network": {"cidr": "10.0.0.0/24"},
   "primary": {"podId": "c1node0", "status": "RUNNING"}, "createdAt": "2026-06-29T20:00:00Z"},
  {"id": "cluster_new", "name": "pending", "type": "SLURM",
   "compute": {"gpuTypeId": "NVIDIA A100 80GB PCIe", "gpuCountPerPod": 2, "podCount": 2},
   "pods": {"total": 0, "byStatus": {}}, "createdAt": "2026-06-30T09:00:00Z"}
]}"""

GPUS = """{"gpus": [
  {"id": "NVIDIA GeForce RTX 4090", "name": "RTX 4090", "pool": "ADA_24", "manufacturer": "NVIDIA",
   "memory": 24, "secure": true, "community": true,
   "price": {"secure": 0.44, "community": 0.31, "serverless": 1.1},
   "maxCount": {"secure": 8, "community": 4}, "availability": "HIGH",
   "dataCenters": [{"id": "US-KS-2", "name": "US Kansas 2", "availability": "HIGH"}]},
  {"id": "AMD Instinct MI300X OAM", "name": "MI300X", "pool": null, "manufacturer": "AMD",
   "memory": 192, "secure": true, "community": false, "price": {"secure": 2, "community": 0},
   "maxCount": {"secure": 8, "community": 0}}
]}"""


def billing_body(records: list[str], query: str = "{}") -> str:
    return (
        f'{{"records": [{", ".join(records)}], "metadata": {{"query": {query},'
        f' "recordCount": {len(records)}, "totals": {{"totalAmount": 0}}}}}}'
    )


class FakeTime:
    """A monotonic clock that only moves when the client sleeps (or a test moves it)."""

    def __init__(self):
        self.now = 5000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Server:
    """Answers requests from a script, in order; the last answer repeats. An answer is an
    httpx.Response, an exception to raise, or a callable taking the request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(request)
        return answer


class CutShort(httpx.SyncByteStream):
    """A body that ends early, as httpcore reports a short Content-Length."""

    def __init__(self, first_part: bytes):
        self.first_part = first_part

    def __iter__(self):
        yield self.first_part
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


def ok(text: str, status: int = 200, **headers) -> httpx.Response:
    return httpx.Response(
        status, content=text.encode(), headers={"Content-Type": "application/json", **headers}
    )


def problem(status: int, title: str, detail: str, errors=None, **headers) -> httpx.Response:
    body = {"title": title, "status": status, "detail": detail}
    if errors is not None:
        body["errors"] = errors
    return httpx.Response(
        status,
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/problem+json", **headers},
    )


def cut_short(first_part: bytes = b'{"pods": [{"id": "7h9') -> httpx.Response:
    return httpx.Response(200, headers={"Content-Length": "4096"}, stream=CutShort(first_part))


@pytest.fixture
def fake_time():
    return FakeTime()


@pytest.fixture
def connect(fake_time):
    clients = []

    def make(*answers, base_url="https://api.runpod.io", api_key=KEY, **options):
        server = Server(*answers)
        client = RunpodClient(
            base_url=base_url,
            api_key=api_key,
            transport=httpx.MockTransport(server),
            sleep=fake_time.sleep,
            clock=fake_time.clock,
            **options,
        )
        clients.append(client)
        return client, server

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def max_jitter(monkeypatch):
    """Backoff waits at the top of their jitter range, so they can be asserted exactly."""
    monkeypatch.setattr(session_module.random, "uniform", lambda low, high: high)


# -- Parsing ---------------------------------------------------------------------------------


def test_gpu_pod_is_parsed_from_the_contract_shape(connect):
    client, server = connect(ok(f'{{"pods": [{GPU_POD}]}}'))

    (pod,) = client.list_pods()

    assert pod == Pod(
        id="7h9k2m4n6p",
        name="pytorch-training",
        status="RUNNING",
        cost_per_hr_usd=Decimal("0.88"),
        image="runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404",
        env={"MODEL_NAME": "llama-3", "LABGOV_ALLOCATION": "17"},
        container_disk_gb=50,
        volume_disk_gb=20,
        network_volume_id=None,
        gpu_type_id="NVIDIA GeForce RTX 4090",
        gpu_count=2,
        cloud="SECURE",
        data_center_id="US-KS-2",
        template_id="9x4m2p7v",
        cluster_id=None,
        created_at=dt.datetime(2026, 6, 1, 12, 0, tzinfo=UTC),
        started_at=dt.datetime(2026, 6, 1, 12, 2, tzinfo=UTC),
        runtime=PodRuntime(uptime_s=3600, gpus=(), cpu_util=None, memory_util=None),
    )
    assert server.requests[0].url.path == "/v2/pods"
    assert server.requests[0].url.params["includeClusterPods"] == "true"


def test_cluster_pod_with_network_volume_offset_time_and_default_gpu_count(connect):
    client, _ = connect(ok(f'{{"pods": [{CLUSTER_POD}]}}'))

    (pod,) = client.list_cluster_pods("cluster_abc")

    assert pod.network_volume_id == "2q9m7x4c"
    assert pod.volume_disk_gb == 0
    assert pod.cluster_id == "cluster_abc"
    assert pod.gpu_count == 1  # `count` defaults to 1 when `gpu` is present
    assert pod.cost_per_hr_usd == Decimal(0)
    assert isinstance(pod.cost_per_hr_usd, Decimal)
    assert pod.template_id is None
    assert pod.started_at is None
    assert pod.created_at == dt.datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    assert pod.created_at.utcoffset() == dt.timedelta(0)


def test_cpu_pod_with_absent_optional_fields_and_unknown_extras(connect):
    client, _ = connect(ok(f'{{"pods": [{CPU_POD}]}}'))

    (pod,) = client.list_pods(include_cluster_pods=False)

    assert (pod.gpu_type_id, pod.gpu_count) == (None, 0)
    assert (pod.volume_disk_gb, pod.network_volume_id, pod.cluster_id) == (0, None, None)
    assert (pod.data_center_id, pod.template_id, pod.started_at) == (None, None, None)
    assert pod.created_at == dt.datetime(2026, 6, 1, 0, 0, 0, 123456, tzinfo=UTC)


def test_list_pods_can_leave_out_cluster_pods(connect):
    client, server = connect(ok('{"pods": []}'))

    assert client.list_pods(include_cluster_pods=False) == []
    assert server.requests[0].url.params["includeClusterPods"] == "false"


def test_get_pod_escapes_the_id_so_it_cannot_change_the_path(connect):
    client, server = connect(ok(GPU_POD))

    client.get_pod("7h9k2m4n6p")
    client.get_pod("../network-volumes/x")

    assert server.requests[0].url.raw_path == b"/v2/pods/7h9k2m4n6p"
    assert server.requests[1].url.raw_path == b"/v2/pods/..%2Fnetwork-volumes%2Fx"
    for bad_id in ["", "..", " "]:
        with pytest.raises(ValueError):
            client.get_pod(bad_id)


def test_network_volumes(connect):
    client, server = connect(ok(VOLUMES))

    assert client.list_network_volumes() == [
        NetworkVolume("2q9m7x4c", "training-dataset", 100, "US-KS-2", "HIGH_PERFORMANCE"),
        NetworkVolume("vol_std", "scratch", 1024, "EU-RO-1", "STANDARD"),
    ]
    assert server.requests[0].url.path == "/v2/network-volumes"


def test_serverless_endpoints_gpu_and_cpu(connect):
    client, server = connect(ok(ENDPOINTS))

    gpu_endpoint, cpu_endpoint = client.list_endpoints()

    assert server.requests[0].url.path == "/v2/serverless"
    assert gpu_endpoint == Endpoint(
        id="4m7x2k9q",
        name="image-generator",
        template_id=None,
        gpu_type_ids=[],
        gpu_count=2,
        workers_min=0,
        workers_max=5,
        network_volume_ids=["2q9m7x4c"],
        data_center_ids=["US-KS-2"],
        env={"MODEL_NAME": "sdxl"},
        created_at=dt.datetime(2026, 6, 1, 12, 0, tzinfo=UTC),
        gpu_pool_ids=["ADA_24", "AMPERE_48"],
        excluded_gpu_type_ids=["NVIDIA L40"],
        idle_timeout_seconds=5,
    )
    assert (cpu_endpoint.gpu_count, cpu_endpoint.gpu_pool_ids, cpu_endpoint.env) == (0, [], {})
    assert (cpu_endpoint.workers_min, cpu_endpoint.workers_max) == (1, 3)


def test_clusters_with_and_without_optional_fields(connect):
    client, server = connect(ok(CLUSTERS))

    full, pending = client.list_clusters()

    assert server.requests[0].url.path == "/v2/clusters"
    assert full == Cluster(
        id="cluster_abc",
        name="my-training-cluster",
        cluster_type="TRAINING",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count_per_pod=8,
        pod_count=4,
        data_center_id="US-TX-3",
        template_id="tpl_abc",
        created_at=dt.datetime(2026, 6, 29, 20, 0, tzinfo=UTC),
    )
    assert (pending.data_center_id, pending.template_id) == (None, None)


def test_gpu_catalog_prices_are_exact_decimals(connect):
    client, server = connect(ok(GPUS))

    rtx, mi300 = client.list_gpu_types()

    assert server.requests[0].url.path == "/v2/catalog/gpus"
    assert rtx == GpuType(
        id="NVIDIA GeForce RTX 4090",
        name="RTX 4090",
        memory_gb=24,
        secure_price_per_hr_usd=Decimal("0.44"),
        community_price_per_hr_usd=Decimal("0.31"),
        serverless_price_per_hr_usd=Decimal("1.1"),
        secure_available=True,
        community_available=True,
        max_count_secure=8,
        max_count_community=4,
        pool="ADA_24",
    )
    assert mi300.serverless_price_per_hr_usd is None
    assert mi300.pool is None
    assert mi300.secure_price_per_hr_usd == Decimal(2)
    assert isinstance(mi300.community_price_per_hr_usd, Decimal)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (GPU_POD.replace('"cost": 0.88, ', ""), ["pod '7h9k2m4n6p'", "'cost'"]),
        (GPU_POD.replace('"cost": 0.88', '"cost": "0.88"'), ["'7h9k2m4n6p'", "'cost'", "text"]),
        (GPU_POD.replace('"cost": 0.88', '"cost": true'), ["'cost'", "a boolean"]),
        (GPU_POD.replace('"name": "pytorch-training",', ""), ["'7h9k2m4n6p'", "'name'"]),
        (GPU_POD.replace('"disk": 50', '"disk": 50.5'), ["'disk'", "whole number"]),
        (GPU_POD.replace('"size": 20', '"size": null'), ["'mounts.persistent.size'"]),
        (GPU_POD.replace('"id": "NVIDIA GeForce RTX 4090", ', ""), ["'gpu.id'"]),
        (GPU_POD.replace('"MODEL_NAME": "llama-3"', '"MODEL_NAME": 3'), ["'env'"]),
        (GPU_POD.replace('"2026-06-01T12:00:00Z"', '"2026-06-01T12:00:00"'), ["'createdAt'"]),
        (GPU_POD.replace('"2026-06-01T12:00:00Z"', '"yesterday"'), ["'createdAt'", "RFC 3339"]),
        (GPU_POD.replace('"id": "7h9k2m4n6p", ', ""), ["pods[0]", "'id'"]),
        ('"not an object"', ["pods[0]", "text"]),
    ],
)
def test_a_missing_or_mistyped_pod_field_is_a_bad_response_naming_it(connect, body, words):
    client, server = connect(ok(f'{{"pods": [{body}]}}'))

    with pytest.raises(RunpodBadResponse) as caught:
        client.list_pods()

    for word in words:
        assert word in caught.value.message
    assert len(server.requests) == 1  # a complete answer that breaks the contract is not retried


@pytest.mark.parametrize(
    ("call", "body", "words"),
    [
        ("list_network_volumes", VOLUMES.replace('"size": 100, ', ""), ["'2q9m7x4c'", "'size'"]),
        (
            "list_clusters",
            CLUSTERS.replace('"podCount": 4', '"podCount": "4"'),
            ["compute.podCount"],
        ),
        ("list_gpu_types", GPUS.replace('"secure": 0.44, ', ""), ["RTX 4090", "'price.secure'"]),
        ("list_endpoints", ENDPOINTS.replace('"min": 0, ', ""), ["'4m7x2k9q'", "'workers.min'"]),
        ("list_pods", '{"items": []}', ["'pods'"]),
        ("list_pods", "[]", ["expected an object"]),
    ],
)
def test_contract_violations_in_other_lists(connect, call, body, words):
    client, _ = connect(ok(body))

    with pytest.raises(RunpodBadResponse) as caught:
        getattr(client, call)()

    for word in words:
        assert word in caught.value.message


# -- Billing ---------------------------------------------------------------------------------

BILLING_CASES = [
    (
        BillingKind.POD,
        "/v2/billing/pods",
        '"podId": "7h9k2m4n6p", "totalAmount": 12.34, "gpuAmount": 11.1, "cpuAmount": 0,'
        ' "diskAmount": 1.24',
        "7h9k2m4n6p",
        {"gpuAmount": Decimal("11.1"), "cpuAmount": Decimal(0), "diskAmount": Decimal("1.24")},
    ),
    (
        BillingKind.NETWORK_VOLUME,
        "/v2/billing/network-volumes",
        '"networkVolumeId": "2q9m7x4c", "totalAmount": 0.0095890411,'
        ' "standardAmount": 0.0095890411, "highPerformanceAmount": 0',
        "2q9m7x4c",
        {"standardAmount": Decimal("0.0095890411"), "highPerformanceAmount": Decimal(0)},
    ),
    (
        BillingKind.SERVERLESS,
        "/v2/billing/serverless",
        '"serverlessId": "4m7x2k9q", "totalAmount": 3.5, "gpuAmount": 3.1, "cpuAmount": 0,'
        ' "diskAmount": 0.1, "feeAmount": 0.3',
        "4m7x2k9q",
        {
            "gpuAmount": Decimal("3.1"),
            "cpuAmount": Decimal(0),
            "diskAmount": Decimal("0.1"),
            "feeAmount": Decimal("0.3"),
        },
    ),
    (
        BillingKind.CLUSTER,
        "/v2/billing/clusters",
        '"clusterId": "cluster_abc", "totalAmount": 100.5, "gpuAmount": 99, "diskAmount": 1,'
        ' "networkingAmount": 0.5',
        "cluster_abc",
        {"gpuAmount": Decimal(99), "diskAmount": Decimal(1), "networkingAmount": Decimal("0.5")},
    ),
    (BillingKind.ENDPOINT, "/v2/billing/endpoints", '"totalAmount": 0.02', "", {}),
]


@pytest.mark.parametrize(("kind", "path", "fields", "resource_id", "components"), BILLING_CASES)
def test_billing_records_of_every_kind(connect, kind, path, fields, resource_id, components):
    bucket = '"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z"'
    client, server = connect(ok(billing_body([f"{{{bucket}, {fields}}}"])))

    (record,) = client.billing_records(
        kind, start=dt.datetime(2026, 6, 1, tzinfo=UTC), end=dt.datetime(2026, 6, 2, tzinfo=UTC)
    )

    assert server.requests[0].url.path == path
    assert record.kind == kind
    assert record.resource_id == resource_id
    assert (record.start, record.end) == (
        dt.datetime(2026, 6, 1, 0, tzinfo=UTC),
        dt.datetime(2026, 6, 1, 1, tzinfo=UTC),
    )
    assert record.components == components
    assert all(isinstance(value, Decimal) for value in record.components.values())
    assert isinstance(record.total_usd, Decimal)


def test_billing_query_parameters(connect):
    client, server = connect(ok(billing_body([])))
    paris = dt.timezone(dt.timedelta(hours=2))

    client.billing_records(
        BillingKind.POD,
        start=dt.datetime(2026, 6, 1, 2, 0, tzinfo=paris),
        end=dt.datetime(2026, 6, 2, tzinfo=UTC),
        bucket_size="day",
        resource_id="7h9k2m4n6p",
    )
    client.billing_records(
        BillingKind.NETWORK_VOLUME,
        start=dt.datetime(2026, 6, 1, tzinfo=UTC),
        end=dt.datetime(2026, 6, 1, 1, tzinfo=UTC),
        resource_id="2q9m7x4c",
    )
    client.billing_records(
        BillingKind.SERVERLESS,
        start=dt.datetime(2026, 6, 1, tzinfo=UTC),
        end=dt.datetime(2026, 6, 1, 1, tzinfo=UTC),
        resource_id="4m7x2k9q",
    )
    client.billing_records(
        BillingKind.CLUSTER,
        start=dt.datetime(2026, 6, 1, tzinfo=UTC),
        end=dt.datetime(2026, 6, 1, 1, tzinfo=UTC),
        resource_id="cluster_abc",
    )

    pods, volumes, serverless, clusters = (dict(r.url.params) for r in server.requests)
    assert pods == {
        "startTime": "2026-06-01T00:00:00Z",
        "endTime": "2026-06-02T00:00:00Z",
        "bucketSize": "day",
        "podId": "7h9k2m4n6p",
    }
    assert volumes["bucketSize"] == "hour"
    assert volumes["networkVolumeId"] == "2q9m7x4c"
    assert serverless["serverlessId"] == "4m7x2k9q"
    assert clusters["clusterId"] == "cluster_abc"
    assert "startTime=2026-06-01T00%3A00%3A00Z" in str(server.requests[1].url)


def test_billing_arguments_are_checked_before_sending(connect):
    client, server = connect(ok(billing_body([])))
    start, end = dt.datetime(2026, 6, 1, tzinfo=UTC), dt.datetime(2026, 6, 2, tzinfo=UTC)

    with pytest.raises(ValueError, match="timezone-aware"):
        client.billing_records(BillingKind.POD, start=start.replace(tzinfo=None), end=end)
    with pytest.raises(ValueError, match="after start"):
        client.billing_records(BillingKind.POD, start=end, end=start)
    with pytest.raises(ValueError, match="bucket_size"):
        client.account_billing(start=start, end=end, bucket_size="minute")
    with pytest.raises(ValueError, match="no resource id"):
        client.billing_records(BillingKind.ENDPOINT, start=start, end=end, resource_id="x")
    assert server.requests == []


def test_tiny_amounts_stay_exact_and_sum_exactly(connect):
    # One GB of container disk for an hour: $0.10/GB/month over 730 hours.
    tiny = "0.0001369863"
    records = [
        f'{{"startTime": "2026-01-01T{h % 24:02d}:00:00Z", "endTime": "2026-01-01T{h % 24:02d}:'
        f'30:00Z", "podId": "p{h}", "totalAmount": {tiny}, "gpuAmount": 0, "cpuAmount": 0,'
        f' "diskAmount": {tiny}}}'
        for h in range(8760)
    ]
    client, _ = connect(ok(billing_body(records)))

    parsed = client.billing_records(
        BillingKind.POD,
        start=dt.datetime(2026, 1, 1, tzinfo=UTC),
        end=dt.datetime(2027, 1, 1, tzinfo=UTC),
    )

    assert parsed[0].total_usd == Decimal(tiny)
    assert str(parsed[0].components["diskAmount"]) == tiny
    total = sum((record.total_usd for record in parsed), Decimal(0))
    assert total == Decimal("1.1999999880")
    assert total == Decimal(tiny) * 8760
    assert sum(float(tiny) for _ in range(8760)) != float(total)  # what float would have done


ACCOUNT_RECORD = (
    '{"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z",'
    ' "totalAmount": 1.2345678901, "podGpuAmount": 1.1, "podCpuAmount": 0,'
    ' "podDiskAmount": 0.0001369863, "serverlessGpuAmount": 0, "serverlessCpuAmount": 0,'
    ' "serverlessDiskAmount": 0, "serverlessFeeAmount": 0, "storageStandardAmount": 0.1,'
    ' "storageHighPerformanceAmount": 0, "endpointAmount": 0, "clusterGpuAmount": 0.0344309038,'
    ' "clusterDiskAmount": 0, "clusterNetworkingAmount": 0}'
)


def test_account_billing_splits_by_product(connect):
    client, server = connect(ok(billing_body([ACCOUNT_RECORD])))

    (parsed,) = client.account_billing(
        start=dt.datetime(2026, 6, 1, tzinfo=UTC), end=dt.datetime(2026, 6, 1, 1, tzinfo=UTC)
    )

    assert server.requests[0].url.path == "/v2/billing"
    assert dict(server.requests[0].url.params) == {
        "startTime": "2026-06-01T00:00:00Z",
        "endTime": "2026-06-01T01:00:00Z",
        "bucketSize": "hour",
    }
    assert isinstance(parsed, AccountBillingRecord)
    assert parsed.total_usd == Decimal("1.2345678901")
    assert len(parsed.components) == 13
    assert "totalAmount" not in parsed.components
    assert parsed.components["podDiskAmount"] == Decimal("0.0001369863")
    assert parsed.components["clusterGpuAmount"] == Decimal("0.0344309038")


def test_billing_record_for_another_resource_than_asked_is_refused(connect):
    record = (
        '{"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z",'
        ' "podId": "someone-else", "totalAmount": 5, "gpuAmount": 5}'
    )
    client, _ = connect(ok(billing_body([record])))

    with pytest.raises(RunpodBadResponse, match="only '7h9k2m4n6p' was asked for"):
        client.billing_records(
            BillingKind.POD,
            start=dt.datetime(2026, 6, 1, tzinfo=UTC),
            end=dt.datetime(2026, 6, 2, tzinfo=UTC),
            resource_id="7h9k2m4n6p",
        )


@pytest.mark.parametrize(
    ("record", "words"),
    [
        ('{"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z",'
         ' "totalAmount": 1}', ["records[0]", "'podId'"]),
        ('{"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z",'
         ' "podId": "p1", "totalAmount": "1.00"}', ["'p1'", "'totalAmount'"]),
        ('{"startTime": "2026-06-01T01:00:00Z", "endTime": "2026-06-01T00:00:00Z",'
         ' "podId": "p1", "totalAmount": 1}', ["'p1'", "ends before it starts"]),
        ('{"endTime": "2026-06-01T01:00:00Z", "podId": "p1", "totalAmount": 1}',
         ["'startTime'"]),
    ],
)  # fmt: skip
def test_bad_billing_records(connect, record, words):
    client, _ = connect(ok(billing_body([record])))

    with pytest.raises(RunpodBadResponse) as caught:
        client.billing_records(
            BillingKind.POD,
            start=dt.datetime(2026, 6, 1, tzinfo=UTC),
            end=dt.datetime(2026, 6, 2, tzinfo=UTC),
        )
    for word in words:
        assert word in caught.value.message


def test_record_count_that_disagrees_with_the_records_is_refused(connect):
    body = billing_body([]).replace('"recordCount": 0', '"recordCount": 24')
    client, _ = connect(ok(body))

    with pytest.raises(RunpodBadResponse, match="24 records but carries 0"):
        client.account_billing(
            start=dt.datetime(2026, 6, 1, tzinfo=UTC), end=dt.datetime(2026, 6, 2, tzinfo=UTC)
        )


# -- Requests and errors ---------------------------------------------------------------------


def test_every_request_carries_the_key_and_asks_for_json(connect):
    client, server = connect(ok('{"pods": []}'))

    client.list_pods()

    headers = server.requests[0].headers
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["Accept"] == "application/json"
    assert headers["User-Agent"].startswith("labgov/")


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://api.runpod.io", "https://api.runpod.io/v2/pods?includeClusterPods=true"),
        ("https://api.runpod.io/v2/", "https://api.runpod.io/v2/pods?includeClusterPods=true"),
        ("http://simulator:8000/sim/", "http://simulator:8000/sim/v2/pods?includeClusterPods=true"),
    ],
)
def test_base_url_forms(connect, base_url, expected):
    client, server = connect(ok('{"pods": []}'), base_url=base_url)

    client.list_pods()

    assert str(server.requests[0].url) == expected


@pytest.mark.parametrize("base_url", ["api.runpod.io", "", "ftp://api.runpod.io", "https://"])
def test_unusable_base_url_is_refused_at_once(base_url):
    with pytest.raises(ValueError, match="base URL"):
        RunpodClient(base_url=base_url, api_key=KEY)


@pytest.mark.parametrize(
    ("response", "error_class", "message"),
    [
        (
            problem(409, "Conflict", "pod is not running"),
            RunpodConflict,
            "Runpod refused the request (409 Conflict): pod is not running.",
        ),
        (
            problem(401, "Unauthorized", "invalid api key"),
            RunpodAuthError,
            "Runpod refused the API key (401 Unauthorized): invalid api key. Check the API key"
            " was copied whole and is not revoked.",
        ),
        (
            problem(403, "Forbidden", "key is read-only"),
            RunpodAuthError,
            "Runpod refused the request (403 Forbidden): key is read-only. The API key may lack"
            " this permission: a read-only key can sync, but creating or changing resources"
            " needs a key with write access.",
        ),
        (
            problem(402, "Payment Required", "insufficient balance"),
            RunpodInsufficientBalance,
            "Runpod refused the request (402 Payment Required): insufficient balance. The"
            " Runpod account needs more credit (deploying needs at least an hour's worth).",
        ),
        (
            problem(404, "Not Found", "pod 7h9k2m4n6p not found"),
            RunpodNotFound,
            "Runpod refused the request (404 Not Found): pod 7h9k2m4n6p not found.",
        ),
        (
            problem(400, "Bad Request", "invalid JSON in body"),
            RunpodRequestInvalid,
            "Runpod refused the request (400 Bad Request): invalid JSON in body.",
        ),
        (
            problem(422, "Unprocessable Entity", "validation failed", ["gpuCount: must be >= 1"]),
            RunpodRequestInvalid,
            "Runpod refused the request (422 Unprocessable Entity): validation failed - gpuCount:"
            " must be >= 1.",
        ),
        (
            problem(405, "Method Not Allowed", "use GET", Allow="GET"),
            RunpodRequestInvalid,
            "Runpod refused the request (405 Method Not Allowed): use GET.",
        ),
        (
            httpx.Response(403, text="<html><body>Access denied by proxy</body></html>"),
            RunpodAuthError,
            "Runpod refused the request (403 Forbidden): the answer was not a JSON error,"
            " perhaps a proxy's page. The API key may lack this permission: a read-only key can"
            " sync, but creating or changing resources needs a key with write access.",
        ),
    ],
)
def test_each_error_status_raises_its_exception_without_retrying(
    connect, fake_time, response, error_class, message
):
    client, server = connect(response)

    with pytest.raises(error_class) as caught:
        client.get_pod("7h9k2m4n6p")

    assert caught.value.message == message
    assert str(caught.value) == message
    assert caught.value.status == response.status_code
    assert len(server.requests) == 1
    assert fake_time.sleeps == []


def test_problem_fields_are_kept_on_the_exception(connect):
    client, _ = connect(problem(422, "Unprocessable Entity", "invalid body", ["a", "b"]))

    with pytest.raises(RunpodRequestInvalid) as caught:
        client.create_pod({"name": "x"})

    assert (caught.value.title, caught.value.detail) == ("Unprocessable Entity", "invalid body")
    assert caught.value.errors == ["a", "b"]
    assert caught.value.transient is False


def test_a_redirect_is_not_followed(connect):
    client, server = connect(
        httpx.Response(301, headers={"Location": "https://www.runpod.io/"}, text="moved")
    )

    with pytest.raises(RunpodBadResponse, match="redirected .* is the base URL right"):
        client.list_pods()
    assert len(server.requests) == 1


# -- Retries ---------------------------------------------------------------------------------


def test_429_retry_after_seconds_is_honoured(connect, fake_time):
    client, server = connect(
        problem(429, "Too Many Requests", "minute quota", **{"Retry-After": "7"}),
        ok('{"pods": []}'),
    )

    assert client.list_pods() == []
    assert fake_time.sleeps == [7.0]
    assert len(server.requests) == 2


def test_429_retry_after_http_date_is_honoured(connect, fake_time):
    client, _ = connect(
        problem(
            429,
            "Too Many Requests",
            "minute quota",
            **{
                "Retry-After": "Mon, 30 Nov 2026 10:00:12 GMT",
                "Date": "Mon, 30 Nov 2026 10:00:00 GMT",
            },
        ),
        ok('{"pods": []}'),
    )

    client.list_pods()

    assert fake_time.sleeps == [12.0]


def test_429_asking_for_longer_than_the_deadline_gives_up_at_once(connect, fake_time):
    client, server = connect(
        problem(429, "Too Many Requests", "hour quota", **{"Retry-After": "600"}),
        deadline_s=120.0,
    )

    with pytest.raises(RunpodUnavailable) as caught:
        client.list_pods()

    assert fake_time.sleeps == []
    assert len(server.requests) == 1
    assert caught.value.status == 429
    assert caught.value.retry_after_s == 600
    assert caught.value.transient is True
    assert "rate-limiting" in caught.value.message
    assert "asked to wait 600 s" in caught.value.message


def test_429_every_time_stops_at_max_attempts(connect, fake_time):
    client, server = connect(
        problem(429, "Too Many Requests", "slow down", **{"Retry-After": "1"}), max_attempts=3
    )

    with pytest.raises(RunpodUnavailable) as caught:
        client.list_pods()

    assert len(server.requests) == 3
    assert fake_time.sleeps == [1.0, 1.0]
    assert caught.value.status == 429


def test_backoff_grows_exponentially_up_to_its_cap(connect, fake_time, max_jitter):
    client, server = connect(
        problem(503, "Service Unavailable", "maintenance"), max_attempts=10, deadline_s=10_000
    )

    with pytest.raises(RunpodUnavailable) as caught:
        client.list_network_volumes()

    assert fake_time.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert len(server.requests) == 10
    assert caught.value.status == 503
    assert "10 attempts" in caught.value.message
    assert "503 Service Unavailable: maintenance" in caught.value.message


def test_backoff_is_jittered_within_the_upper_half_of_each_step(connect, fake_time):
    client, _ = connect(httpx.Response(502), max_attempts=9, deadline_s=10_000)

    with pytest.raises(RunpodUnavailable):
        client.list_clusters()

    steps = [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert len(fake_time.sleeps) == len(steps)
    for waited, step in zip(fake_time.sleeps, steps, strict=True):
        assert step / 2 <= waited <= step


def test_deadline_bounds_the_whole_call(connect, fake_time, max_jitter):
    client, server = connect(httpx.Response(503), max_attempts=100, deadline_s=10.0)
    started = fake_time.now

    with pytest.raises(RunpodUnavailable):
        client.list_pods()

    # 0.5 + 1 + 2 + 4 = 7.5 s of waiting; the next 8 s wait would pass the deadline.
    assert fake_time.sleeps == [0.5, 1.0, 2.0, 4.0]
    assert fake_time.now - started <= 10.0
    assert len(server.requests) == 5


def test_each_attempt_timeout_is_cut_to_the_time_left(connect, fake_time):
    def slow_failure(request):
        fake_time.now += 4.0  # the server takes 4 s to fail
        return httpx.Response(500)

    client, server = connect(
        slow_failure, timeout=httpx.Timeout(15.0, connect=5.0), deadline_s=12.0, max_attempts=5
    )

    with pytest.raises(RunpodUnavailable):
        client.list_pods()

    timeouts = [request.extensions["timeout"] for request in server.requests]
    assert timeouts[0] == {"connect": 5.0, "read": 12.0, "write": 12.0, "pool": 12.0}
    assert all(max(t.values()) <= 12.0 for t in timeouts)
    assert timeouts[-1]["read"] < 12.0
    assert fake_time.now - 5000.0 <= 12.0 + 4.0  # no attempt starts after the deadline


def test_server_error_then_success(connect, fake_time):
    client, server = connect(problem(500, "Internal Server Error", "oops"), ok(GPU_POD))

    assert client.get_pod("7h9k2m4n6p").id == "7h9k2m4n6p"
    assert len(server.requests) == 2
    assert len(fake_time.sleeps) == 1


def test_connect_error_then_success(connect):
    client, server = connect(httpx.ConnectError("[Errno 111] Connection refused"), ok(VOLUMES))

    assert len(client.list_network_volumes()) == 2
    assert len(server.requests) == 2


def test_read_timeout_of_a_get_is_retried(connect):
    client, server = connect(httpx.ReadTimeout("timed out"), ok(CLUSTERS))

    assert len(client.list_clusters()) == 2
    assert len(server.requests) == 2


def test_network_failures_every_time_become_unavailable(connect):
    client, server = connect(httpx.ConnectError("[Errno 111] Connection refused"), max_attempts=3)

    with pytest.raises(RunpodUnavailable) as caught:
        client.list_pods()

    assert len(server.requests) == 3
    assert caught.value.status is None
    assert "connection refused" in caught.value.message
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_body_cut_short_is_fetched_again(connect):
    client, server = connect(cut_short(), ok(f'{{"pods": [{GPU_POD}]}}'))

    assert len(client.list_pods()) == 1
    assert len(server.requests) == 2


def test_invalid_json_is_fetched_again(connect):
    client, server = connect(ok('{"pods": [{"id": "7h9'), ok(GPUS))

    assert len(client.list_gpu_types()) == 2
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "answer",
    [
        ok('{"records": [{"startTime": "2026'),
        ok("<html>Bad gateway</html>", 200),
        ok(""),
        ok('{"records": [], "metadata": {"recordCount": NaN}}'),
    ],
)
def test_unreadable_answers_every_time_become_a_bad_response(connect, answer):
    client, server = connect(answer, max_attempts=3)

    with pytest.raises(RunpodBadResponse) as caught:
        client.account_billing(
            start=dt.datetime(2026, 6, 1, tzinfo=UTC), end=dt.datetime(2026, 6, 2, tzinfo=UTC)
        )

    assert len(server.requests) == 3
    assert "unreadable after 3 attempts" in caught.value.message
    assert caught.value.transient is True


def test_cut_short_every_time_becomes_unavailable(connect):
    client, server = connect(lambda request: cut_short(), max_attempts=2)

    with pytest.raises(RunpodUnavailable, match="closed before the answer was complete"):
        client.list_pods()
    assert len(server.requests) == 2


def test_retries_are_logged_without_key_or_body(connect, caplog, max_jitter):
    client, _ = connect(problem(503, "Service Unavailable", "busy"), ok('{"pods": []}'))

    with caplog.at_level(logging.INFO, logger="labgov.runpod.client"):
        client.list_pods()

    (record,) = [r for r in caplog.records if r.name == "labgov.runpod.client"]
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "Runpod GET /v2/pods: 503 Service Unavailable; retrying in 0.50 s (attempt 2 of 5)"
    )


# -- Creating a pod, pod actions, deleting ---------------------------------------------------

CREATE_BODY = {
    "name": "labgov-vision-alice",
    "imageName": "runpod/pytorch:2",
    "gpuTypeIds": ["NVIDIA GeForce RTX 4090"],
    "env": {"LABGOV_ALLOCATION": "17"},
}


def test_create_pod_posts_the_body_and_returns_the_pod(connect):
    client, server = connect(ok(GPU_POD.replace("RUNNING", "PROVISIONING"), 201))

    pod = client.create_pod(CREATE_BODY)

    assert pod.status == "PROVISIONING"
    request = server.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v2/pods")
    assert json.loads(request.content) == CREATE_BODY
    assert request.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("Server disconnected without sending a response"),
        httpx.WriteTimeout("timed out"),
        problem(503, "Service Unavailable", "try later"),
        httpx.Response(500),
        httpx.Response(504, text="<html>Gateway Timeout</html>"),
        cut_short(b'{"id": "7h9k'),
    ],
)
def test_create_pod_is_not_retried_when_the_pod_may_exist(connect, fake_time, failure):
    client, server = connect(failure, ok(GPU_POD, 201))

    with pytest.raises(RunpodOutcomeUnknown) as caught:
        client.create_pod(CREATE_BODY)

    assert len(server.requests) == 1
    assert fake_time.sleeps == []
    assert isinstance(caught.value, RunpodUnavailable)
    assert caught.value.transient is False  # a blind retry could create a second pod
    assert "unknown" in caught.value.message
    assert "Look for the pod" in caught.value.message


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectTimeout("timed out"),
        problem(429, "Too Many Requests", "slow down", **{"Retry-After": "2"}),
    ],
)
def test_create_pod_is_retried_when_it_certainly_did_not_reach_runpod(connect, failure):
    client, server = connect(failure, ok(GPU_POD, 201))

    assert client.create_pod(CREATE_BODY).id == "7h9k2m4n6p"
    assert len(server.requests) == 2


def test_create_pod_unreadable_201_says_the_pod_exists(connect):
    client, server = connect(ok('{"id": "7h9k2m4n6p", "name": "x"}', 201))

    with pytest.raises(RunpodOutcomeUnknown, match="created the pod .* Look for the pod"):
        client.create_pod(CREATE_BODY)
    assert len(server.requests) == 1


def test_create_pod_with_low_balance(connect):
    client, _ = connect(problem(402, "Payment Required", "balance below one hour of spend"))

    with pytest.raises(RunpodInsufficientBalance):
        client.create_pod(CREATE_BODY)


def test_pod_action_returns_the_updated_pod(connect):
    client, server = connect(ok(GPU_POD.replace('"RUNNING"', '"EXITED"')))

    pod = client.pod_action("7h9k2m4n6p", "stop")

    assert pod.status == "EXITED"
    request = server.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v2/pods/7h9k2m4n6p/action")
    assert json.loads(request.content) == {"action": "stop"}


def test_terminate_answers_204_and_returns_none(connect):
    client, _ = connect(httpx.Response(204))

    assert client.pod_action("7h9k2m4n6p", "terminate") is None


def test_pod_action_is_retried_after_a_server_error_and_a_repeat_can_conflict(connect):
    client, server = connect(httpx.Response(502), problem(409, "Conflict", "pod is not running"))

    with pytest.raises(RunpodConflict, match="pod is not running"):
        client.pod_action("7h9k2m4n6p", "stop")
    assert len(server.requests) == 2


def test_pod_action_names_are_checked(connect):
    client, server = connect(httpx.Response(204))

    with pytest.raises(ValueError, match="not a pod action"):
        client.pod_action("7h9k2m4n6p", "pause")
    assert server.requests == []


def test_delete_network_volume(connect):
    client, server = connect(httpx.ReadTimeout("timed out"), httpx.Response(204))

    assert client.delete_network_volume("2q9m7x4c") is None
    assert [(r.method, r.url.path) for r in server.requests] == [
        ("DELETE", "/v2/network-volumes/2q9m7x4c"),
        ("DELETE", "/v2/network-volumes/2q9m7x4c"),
    ]


# -- Raw bodies ------------------------------------------------------------------------------


def test_get_json_bytes_returns_the_raw_body_after_retrying_a_cut_one(connect):
    body = billing_body([]).encode()
    client, server = connect(
        cut_short(b'{"records": ['), ok('{"records": [{"startTime": "2026'), ok(body.decode())
    )

    raw = client.get_json_bytes("/v2/billing/pods", {"bucketSize": "hour"})

    assert raw == body
    assert len(server.requests) == 3
    assert server.requests[-1].url.params["bucketSize"] == "hour"


def test_get_json_bytes_only_calls_the_api(connect):
    client, server = connect(ok("{}"))

    for path in ["https://elsewhere.example/v2/pods", "//elsewhere.example/v2/pods", "pods"]:
        with pytest.raises(ValueError):
            client.get_json_bytes(path)
    assert server.requests == []


# -- The key stays secret --------------------------------------------------------------------


def test_key_is_in_no_repr_log_or_message(connect, caplog):
    echoing = problem(401, "Unauthorized", f"token {KEY} is revoked")
    client, _ = connect(
        httpx.ConnectError("[Errno 111] Connection refused"),
        problem(503, "Service Unavailable", f"upstream said: Bearer {KEY}"),
        echoing,
    )
    caplog.set_level(logging.DEBUG)

    with pytest.raises(RunpodAuthError) as caught:
        client.list_pods()

    assert repr(client) == "RunpodClient(base_url='https://api.runpod.io', api_key='…WXYZ')"
    assert KEY not in repr(client)
    assert KEY not in caught.value.message
    assert KEY not in caught.value.detail
    assert "[API key]" in caught.value.message
    assert len(caplog.records) >= 2  # the retries were logged
    assert KEY not in caplog.text
    assert KEY[4:-4] not in caplog.text


def test_short_key_shows_no_characters_in_repr():
    client = RunpodClient(base_url="https://api.runpod.io", api_key="abcd1234")

    assert repr(client) == "RunpodClient(base_url='https://api.runpod.io', api_key='…')"
    client.close()


def test_key_pasted_with_a_line_break_around_it_works(connect):
    client, server = connect(ok('{"pods": []}'), api_key=f"  {KEY}\n")

    client.list_pods()
    assert server.requests[0].headers["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("api_key", ["", "rpa_abc def", "rpa_abc\ndef", "rpa_clé"])
def test_malformed_key_is_refused_before_anything_is_sent(connect, api_key):
    client, server = connect(ok('{"pods": []}'), api_key=api_key)

    with pytest.raises(RunpodAuthError):
        client.list_pods()
    assert server.requests == []
    if api_key.strip():
        assert api_key.strip() not in repr(client)


# -- Connection check ------------------------------------------------------------------------


def test_check_connection_ok(connect):
    pods = ", ".join([GPU_POD, CLUSTER_POD, CPU_POD])
    client, server = connect(ok(f'{{"pods": [{pods}]}}'))

    check = client.check_connection()
    assert check == ConnectionCheck(
        ok=True,
        message="Connected: the key can read this account's pods (3 found). A read-only key is"
        " enough for syncing; provisioning needs a key with write access.",
        pod_ids=check.pod_ids,
    )
    assert len(check.pod_ids) == 3
    assert server.requests[0].url.path == "/v2/pods"


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            problem(401, "Unauthorized", "invalid token"),
            "Runpod refused the API key (401): check it was copied whole and is not revoked.",
        ),
        (
            problem(403, "Forbidden", "no access"),
            "Runpod accepted the API key but refused to list pods with it (403): give the key"
            " read access to pods (a read-only key is enough for syncing).",
        ),
        (
            httpx.ConnectError("[Errno 111] Connection refused"),
            "Could not reach https://api.runpod.io: connection refused (is the base URL right?).",
        ),
        (
            httpx.ConnectTimeout("timed out"),
            "Could not reach https://api.runpod.io: timed out while connecting (is the base URL"
            " right?).",
        ),
        (
            httpx.ConnectError("[Errno -2] Name or service not known"),
            "Could not reach https://api.runpod.io: name not found (is the base URL right?).",
        ),
        (
            httpx.Response(200, text="<!doctype html><title>Welcome to nginx</title>"),
            "The server at https://api.runpod.io did not answer like the Runpod API (is the"
            " base URL right?).",
        ),
        (
            ok('{"status": "ok"}'),
            "The server at https://api.runpod.io did not answer like the Runpod API (is the"
            " base URL right?).",
        ),
        (
            httpx.Response(404, text="Not Found"),
            "The server at https://api.runpod.io did not answer like the Runpod API (404 for"
            " /v2/pods) (is the base URL right?).",
        ),
        (
            problem(503, "Service Unavailable", "maintenance"),
            "Runpod answered with a server error (503): it may be down or busy; try again in a"
            " few minutes.",
        ),
        (
            problem(429, "Too Many Requests", "slow down", **{"Retry-After": "3600"}),
            "Runpod is rate-limiting this API key right now (429): try again in a minute.",
        ),
    ],
)
def test_check_connection_explains_failures(connect, answer, message):
    client, _ = connect(answer)

    check = client.check_connection()

    assert check == ConnectionCheck(ok=False, message=message)


def test_check_connection_is_quick_and_never_raises(connect, fake_time):
    client, server = connect(httpx.Response(500), max_attempts=5, deadline_s=120.0)

    assert client.check_connection().ok is False
    assert len(server.requests) == 2  # a button should not spin for two minutes

    client, _ = connect(RuntimeError("something nobody expected"))
    check = client.check_connection()
    assert check.ok is False
    assert "RuntimeError" in check.message


def test_check_connection_with_a_malformed_key(connect):
    client, server = connect(ok('{"pods": []}'), api_key="rpa_abc def")

    check = client.check_connection()

    assert check.ok is False
    assert "spaces, line breaks" in check.message
    assert server.requests == []


def test_check_connection_reports_a_pod_that_breaks_the_contract(connect):
    without_cost = GPU_POD.replace('"cost": 0.88, ', "")
    client, _ = connect(ok(f'{{"pods": [{without_cost}]}}'))

    check = client.check_connection()

    assert check.ok is False
    assert "'cost'" in check.message


# -- Lifecycle -------------------------------------------------------------------------------


def test_context_manager_closes_the_connection_pool(fake_time):
    server = Server(ok('{"pods": []}'))
    with RunpodClient(
        base_url="https://api.runpod.io",
        api_key=KEY,
        transport=httpx.MockTransport(server),
        sleep=fake_time.sleep,
        clock=fake_time.clock,
    ) as client:
        client.list_pods()
        client.list_pods()
        pool = client._session._http

    assert pool.is_closed
    assert len(server.requests) == 2


def test_exceptions_share_one_base_class():
    for cls in [
        RunpodAuthError,
        RunpodBadResponse,
        RunpodConflict,
        RunpodInsufficientBalance,
        RunpodNotFound,
        RunpodOutcomeUnknown,
        RunpodRequestInvalid,
        RunpodUnavailable,
    ]:
        assert issubclass(cls, RunpodError)


def test_billing_record_type_is_returned(connect):
    record = (
        '{"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z",'
        ' "podId": "p1", "totalAmount": 1, "gpuAmount": 1, "cpuAmount": 0, "diskAmount": 0}'
    )
    client, _ = connect(ok(billing_body([record])))

    (parsed,) = client.billing_records(
        "pod", start=dt.datetime(2026, 6, 1, tzinfo=UTC), end=dt.datetime(2026, 6, 2, tzinfo=UTC)
    )

    assert isinstance(parsed, BillingRecord)
    assert parsed.kind is BillingKind.POD


# -- The fixtures follow Runpod's contract ---------------------------------------------------

OPENAPI = Path(__file__).resolve().parents[2].parent / "shared" / "runpod" / "openapi-v2.json"
BUCKET = '"startTime": "2026-06-01T00:00:00Z", "endTime": "2026-06-01T01:00:00Z"'
BILLING_QUERY = f'{{{BUCKET}, "bucketSize": "hour"}}'


@pytest.mark.skipif(not OPENAPI.exists(), reason="Runpod's OpenAPI description is not beside")
@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ("ListPodsResponse", f'{{"pods": [{GPU_POD}, {CLUSTER_POD}]}}'),
        ("Pod", GPU_POD),
        ("ListNetworkVolumesResponse", VOLUMES),
        ("ListEndpointsResponse", ENDPOINTS),
        ("ListClustersResponse", CLUSTERS),
        ("ListGpuTypesResponse", GPUS),
        ("BillingRecord", ACCOUNT_RECORD),
        *[
            (
                f"{name}BillingRecord",
                f"{{{BUCKET}, {fields}}}",
            )
            for (_, _, fields, _, _), name in zip(
                BILLING_CASES,
                ["Pod", "NetworkVolume", "Serverless", "Cluster", "Endpoint"],
                strict=True,
            )
        ],
    ],
)
def test_fixtures_follow_runpods_openapi_description(schema, text):
    jsonschema = pytest.importorskip("jsonschema")
    spec = json.loads(OPENAPI.read_text())
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"#/components/schemas/{schema}", "components": spec["components"]}
    )

    errors = sorted(validator.iter_errors(json.loads(text)), key=str)

    assert errors == [], errors[0].message if errors else ""
