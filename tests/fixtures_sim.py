"""Fixtures for tests that talk to the Runpod simulator: a running simulator on the default
scenario's fixed clock, a connected account pointed at it, and a client factory that never
really waits between retries. Loaded for the whole suite by tests/conftest.py."""

import datetime as dt
from collections.abc import Iterator

import pytest

from labgov.simulator import SimulatorServer, load_scenario


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    with SimulatorServer(scenario=load_scenario("default")) as server:
        yield server


SIM_KEY = "sim-key"  # the simulator's default key


@pytest.fixture
def at_sim_now(sim):
    """Run the test at the simulator's clock, so windows computed from "now" agree."""
    import time_machine

    with time_machine.travel(sim.state.now, tick=True):
        yield sim.state.now


@pytest.fixture
def sim_account(world, sim):
    from labgov.runpod.services import account_connect

    return account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name="Sim",
        api_key=sim.api_key,
        write_key=sim.api_key,
        base_url=sim.base_url,
    )


@pytest.fixture
def fast_clients(sim):
    """A client factory that never really waits between retries."""
    from labgov.runpod.client import RunpodClient

    def factory(account):
        return RunpodClient(
            base_url=sim.base_url,
            api_key=sim.api_key,
            sleep=lambda seconds: None,
            max_attempts=4,
            deadline_s=30,
        )

    return factory


def hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)
