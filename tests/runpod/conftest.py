import datetime as dt

import pytest
import time_machine

from labgov.runpod.client import RunpodClient
from labgov.runpod.services import account_connect

SIM_KEY = "sim-key-0123456789"


@pytest.fixture
def sim():
    from labgov.runpod.simulator import SimulatorServer, load_scenario

    with SimulatorServer(scenario=load_scenario("default"), api_key=SIM_KEY) as server:
        yield server


@pytest.fixture
def at_sim_now(sim):
    """Run the test at the simulator's clock, so windows computed from "now" agree."""
    with time_machine.travel(sim.state.now, tick=True):
        yield sim.state.now


@pytest.fixture
def sim_account(world, sim):
    return account_connect(
        actor=world.inst_admin, institution=world.institution, name="Sim", api_key=SIM_KEY,
        base_url=sim.base_url,
    )


@pytest.fixture
def fast_clients(sim):
    """A client factory that never really waits between retries."""

    def factory(account):
        return RunpodClient(
            base_url=sim.base_url, api_key=SIM_KEY, sleep=lambda seconds: None,
            max_attempts=4, deadline_s=30,
        )

    return factory


def hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)
