"""A Runpod REST API v2 simulator: a real HTTP server over scenario data kept in the repo.

    from labgov.simulator import SimulatorServer, load_scenario

    with SimulatorServer(scenario=load_scenario("default"), api_key="sim-key") as sim:
        sim.base_url, sim.state, sim.set_now(...), sim.advance(hours=3)
        sim.inject_fault(path_prefix="/v2/billing/pods", kind="429", times=2, retry_after=1)

`scenario.py` describes the scenario format; `meters.py` and `billing.py` how billing amounts
are derived from histories; `windows.py` and `records.py` how a billing query is answered;
`state.py` the account's resources and actions; `routes.py` the /v2 routes; `server.py` the
HTTP behaviour, faults and the /_sim/ control routes. `python manage.py runpod_simulator`
runs it on its own.
"""

from labgov.simulator.generate import generate_scenario
from labgov.simulator.loader import load_scenario
from labgov.simulator.scenario import Scenario
from labgov.simulator.server import FAULT_KINDS, Fault, SimulatorServer
from labgov.simulator.state import SimState

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "Scenario",
    "SimState",
    "SimulatorServer",
    "generate_scenario",
    "load_scenario",
]
