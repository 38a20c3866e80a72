"""The simulator serves each running pod's utilization from its scenario's pattern."""

import dataclasses
import datetime as dt

from labgov.simulator.loader import load_scenario
from labgov.simulator.render import IDLE_UTIL_MAX, _runtime
from labgov.simulator.scenario import PodSpec, UtilizationSpec

T = 1_800_000_000


def pod(pattern: str, idle_from: int | None = None, gpus: int = 8) -> PodSpec:
    base = load_scenario("default").pods[0]
    return dataclasses.replace(
        base, gpu_count=gpus, utilization=UtilizationSpec(pattern, idle_from)
    )


def utils(spec: PodSpec, now: int) -> list[int]:
    return [g["util"] for g in _runtime(spec, now, 60)["gpus"]]


def test_busy_pods_work_on_every_gpu():
    assert all(u >= 35 for u in utils(pod("busy"), T))


def test_idle_from_a_time_on():
    spec = pod("idle_from", idle_from=T)
    assert all(u >= 35 for u in utils(spec, T - 1))
    readings = _runtime(spec, T + 3600, 60)["gpus"]
    assert all(g["util"] <= IDLE_UTIL_MAX and g["memoryUtil"] <= 2 for g in readings)


def test_bursty_works_a_quarter_of_each_hour():
    hour = T - T % 3600
    spec = pod("bursty")
    assert min(utils(spec, hour + 60)) >= 35
    assert max(utils(spec, hour + 30 * 60)) <= IDLE_UTIL_MAX


def test_one_gpu_of_eight_busy():
    readings = utils(pod("one_gpu_busy"), T)
    assert readings[0] >= 35 and max(readings[1:]) <= IDLE_UTIL_MAX and len(readings) == 8


def test_shifting_a_scenario_moves_idle_from_with_it():
    scenario = load_scenario("default")
    shifted = scenario.shifted(dt.timedelta(hours=5))
    before = {p.id: p.utilization for p in scenario.pods}
    for p in shifted.pods:
        if p.utilization.idle_from is not None:
            assert p.utilization.idle_from == before[p.id].idle_from + 5 * 3600


def test_set_utilization_changes_a_pod_served_over_http(sim):
    pod_id = "vq7m2k4x9p1b3c"  # 2 x H100, running at the scenario's now
    sim.state.set_utilization(pod_id, "idle_from", sim.state.now - dt.timedelta(hours=1))
    gpus = sim.state.get_pod(pod_id)["runtime"]["gpus"]
    assert len(gpus) == 2 and max(g["util"] for g in gpus) <= IDLE_UTIL_MAX
