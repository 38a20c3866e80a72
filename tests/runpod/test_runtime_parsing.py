"""Pod.runtime (PodRuntime in Runpod's OpenAPI): live utilization of a running pod, null when
it is not running; every field of it optional."""

import json

import pytest

from labgov.runpod.errors import RunpodBadResponse
from labgov.runpod.parsing import decode_json, parse_pod
from labgov.runpod.schema import errors
from labgov.runpod.types import GpuUtilization, PodRuntime

BASE = {
    "id": "pod1",
    "name": "train",
    "status": "RUNNING",
    "cost": 35.12,
    "image": "img",
    "env": {},
    "disk": 50,
    "mounts": {},
    "cloud": "SECURE",
    "createdAt": "2026-06-01T12:00:00Z",
    "startedAt": "2026-06-01T12:02:00Z",
    "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 8},
}


def pod_with(**fields):
    body = {**BASE, **fields}
    return parse_pod(decode_json(json.dumps(body).encode()))


def test_present_runtime_is_read_per_gpu():
    runtime = {
        "uptime": 7200,
        "gpus": [{"util": 94, "memoryUtil": 78}, {"util": 0, "memoryUtil": 1}],
        "cpu": {"util": 45},
        "memory": {"util": 12},
        "ports": [{"private": 22, "public": 34446, "type": "tcp", "ip": "1.2.3.4"}],
    }
    pod = pod_with(runtime=runtime)
    assert pod.runtime == PodRuntime(
        uptime_s=7200,
        gpus=(GpuUtilization(94, 78), GpuUtilization(0, 1)),
        cpu_util=45,
        memory_util=12,
    )


@pytest.mark.parametrize("body", [{"runtime": None}, {}])
def test_null_or_absent_runtime_is_none(body):
    assert pod_with(**body).runtime is None


def test_empty_runtime_and_missing_fields_are_unknown_not_zero():
    assert pod_with(runtime={}).runtime == PodRuntime(None, (), None, None)
    pod = pod_with(runtime={"gpus": [{"util": 3}, {}], "cpu": {}})
    assert pod.runtime.gpus == (GpuUtilization(3, None), GpuUtilization(None, None))
    assert pod.runtime.cpu_util is None


def test_a_gpu_list_shorter_than_the_count_keeps_only_what_was_reported():
    pod = pod_with(runtime={"uptime": 60, "gpus": [{"util": 0, "memoryUtil": 0}]})
    assert pod.gpu_count == 8
    assert len(pod.runtime.gpus) == 1


def test_readings_out_of_range_are_clamped():
    pod = pod_with(runtime={"gpus": [{"util": 130, "memoryUtil": -4}]})
    assert pod.runtime.gpus == (GpuUtilization(100, 0),)


@pytest.mark.parametrize(
    "runtime, where",
    [
        ({"gpus": [{"util": "94"}]}, "runtime.gpus[0].util"),
        ({"gpus": {"util": 1}}, "runtime.gpus"),
        ({"gpus": ["x"]}, "runtime.gpus[0]"),
        ({"uptime": 1.5}, "runtime.uptime"),
        ("busy", "runtime"),
    ],
)
def test_wrong_types_are_refused_naming_the_field(runtime, where):
    with pytest.raises(RunpodBadResponse, match=r"pod 'pod1'.*" + where.replace("[", r"\[")):
        pod_with(runtime=runtime)


def test_our_schema_describes_runtime_as_the_contract_does():
    body = {**BASE, "actions": [], "args": "", "ports": [], "registry": None}
    body |= {"dataCenterId": "US", "cudaVersion": None, "ssh": {}, "template": None}
    body |= {"locked": False, "globalNetworking": {}, "runtime": None}
    assert errors("Pod", body) == []
    body["runtime"] = {"gpus": [{"util": 5, "memoryUtil": 7}], "cpu": {"util": 1}}
    assert errors("Pod", body) == []
    body["runtime"] = {"gpus": [{"util": "5"}]}
    assert errors("Pod", body)
