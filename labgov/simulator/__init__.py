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

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labgov.simulator.generate import generate_scenario
    from labgov.simulator.loader import load_scenario
    from labgov.simulator.scenario import Scenario
    from labgov.simulator.server import FAULT_KINDS, Fault, SimulatorServer
    from labgov.simulator.state import SimState

# Loaded when first named, not with the package: Django imports the package for the app in
# every process (gunicorn's workers, Celery's worker and beat, every manage.py command), and
# the server's routes load jsonschema and the scenario machinery, which only what runs a
# simulator needs (`manage.py check` with production settings: 1.67 -> 1.54 CPU-s).
_MODULE_OF = {
    "FAULT_KINDS": "server",
    "Fault": "server",
    "Scenario": "scenario",
    "SimState": "state",
    "SimulatorServer": "server",
    "generate_scenario": "generate",
    "load_scenario": "loader",
}

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "Scenario",
    "SimState",
    "SimulatorServer",
    "generate_scenario",
    "load_scenario",
]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
