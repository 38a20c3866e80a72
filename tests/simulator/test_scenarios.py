"""Scenarios: loading, checking, generating, shifting; and serving speed at scale."""

import datetime as dt
import json
import time

import pytest

from labgov.simulator import SimulatorServer, generate_scenario, load_scenario
from labgov.simulator.scenario import SCENARIO_DIR, epoch, scenario_from_dict
from tests.simulator.conftest import NOW, UTC, Api


def test_default_scenario_has_every_kind_of_resource_the_sync_must_handle():
    scenario = load_scenario("default")
    assert scenario.now == NOW
    final = {p.name: p.status_at(epoch(NOW)) for p in scenario.pods}
    assert {"RUNNING", "EXITED", "ERROR", "PROVISIONING", "STARTING", "TERMINATED"} <= set(
        final.values()
    )
    stopped = [p for p in scenario.pods if final[p.name] == "EXITED"]
    assert any(p.volume_gb for p in stopped) and any(not p.volume_gb for p in stopped)
    assert any(p.network_volume_id for p in scenario.pods)
    assert any("LABGOV_ALLOCATION" in p.env for p in scenario.pods)
    assert any(p.template_id for p in scenario.pods)
    assert any(p.name.startswith(("vision-", "nlp-")) for p in scenario.pods)
    assert any(
        not p.name.startswith(("vision-", "nlp-", "dl101-")) and not p.env and not p.template_id
        for p in scenario.pods
    )
    volumes = scenario.network_volumes
    assert {v.type for v in volumes} == {"STANDARD", "HIGH_PERFORMANCE"}
    assert sum(v.size for v in volumes if v.type == "STANDARD" and v.deleted is None) > 1024
    assert scenario.endpoints and scenario.clusters and scenario.public_endpoints


def test_generated_scenarios_are_deterministic_and_sized_as_asked():
    first = generate_scenario(pods=30, volumes=10, days=5, seed=3)
    again = generate_scenario(pods=30, volumes=10, days=5, seed=3)
    other = generate_scenario(pods=30, volumes=10, days=5, seed=4)
    assert first == again
    assert first.pods != other.pods
    assert (len(first.pods), len(first.network_volumes)) == (30, 10)
    assert load_scenario("generated:pods=30,volumes=10,days=5,seed=3") == first


def test_scenario_files_are_checked():
    data = json.loads((SCENARIO_DIR / "default.json").read_text())
    data["pods"][0]["history"].reverse()
    with pytest.raises(ValueError, match="out of order"):
        scenario_from_dict(data)
    data = json.loads((SCENARIO_DIR / "default.json").read_text())
    data["pods"][0]["cpu"] = {"id": "cpu3c", "vcpuCount": 2}
    with pytest.raises(ValueError, match="exactly one of gpu or cpu"):
        scenario_from_dict(data)
    with pytest.raises(FileNotFoundError, match="default, empty"):
        load_scenario("no-such-scenario")


def test_anchored_scenario_keeps_minutes_and_moves_whole_hours():
    scenario = load_scenario("default")
    later = dt.datetime(2027, 3, 1, 9, 5, tzinfo=UTC)
    moved = scenario.anchored(later)
    assert moved.now == dt.datetime(2027, 3, 1, 9, 30, tzinfo=UTC)
    delta = moved.pods[0].history[0][0] - scenario.pods[0].history[0][0]
    assert delta % 3600 == 0 and delta == epoch(moved.now) - epoch(scenario.now)


def test_wall_clock_mode_follows_real_time():
    with SimulatorServer(scenario=load_scenario("default"), now="wall") as sim:
        assert abs((sim.scenario.now - dt.datetime.now(UTC)).total_seconds()) < 3600
        drift = abs((sim.state.now - dt.datetime.now(UTC)).total_seconds())
        assert drift < 5
        sim.advance(hours=1)
        ahead = (sim.state.now - dt.datetime.now(UTC)).total_seconds()
        assert 3590 < ahead < 3610
        api = Api(sim)
        assert api.json("/v2/billing", bucketSize="hour", lastN="2")["records"]
        api.close()


def test_one_day_of_hourly_billing_for_500_pods_is_quick():
    scenario = generate_scenario(pods=500, volumes=200, days=90, seed=1)
    with SimulatorServer(scenario=scenario, warm_up=False) as sim:  # the cold case
        api = Api(sim)
        day = (scenario.now - dt.timedelta(days=40)).replace(hour=0, minute=0, second=0)
        params = {"bucketSize": "hour", "startTime": day.isoformat()}
        params["endTime"] = (day + dt.timedelta(days=1)).isoformat()
        started = time.perf_counter()
        response = api.get("/v2/billing/pods", **params)
        elapsed = time.perf_counter() - started
        count = response.json()["metadata"]["recordCount"]
        api.close()
    assert 10_000 < count <= 12_000
    # About 20 ms on a laptop; the bound leaves room for a busy CI machine.
    assert elapsed < 0.5, f"{count} records took {elapsed * 1000:.0f} ms"


def test_a_generated_scenario_carries_none_of_the_demos_allocation_tags():
    """A second simulator for trying a second connection charged the demo's students: its pods
    took the default scenario's templates, whose env tags the demo's course allocation."""
    assert any(
        v.startswith("lga-demo-")
        for t in load_scenario("default").templates
        for v in t.env.values()
    )
    scenario = generate_scenario(pods=300, volumes=10, endpoints=20, days=5, seed=2)
    assert any(p.template_id for p in scenario.pods)
    envs = [p.env for p in scenario.pods] + [e.env for e in scenario.endpoints]
    envs += [t.env for t in scenario.templates]
    assert not [env for env in envs if str(env.get("LABGOV_ALLOCATION", "")).startswith("lga-")]
