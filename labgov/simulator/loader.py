"""Any scenario by its name: above both scenario.py (the files) and generate.py, which starts
from the default file."""

from pathlib import Path

from labgov.simulator.generate import generate_scenario
from labgov.simulator.scenario import Scenario, read_scenario


def load_scenario(name_or_path: str | Path = "default") -> Scenario:
    """A scenario by name (a file in `scenarios/`), by path, or "generated[:k=v,...]"."""
    text = str(name_or_path)
    if text == "generated" or text.startswith("generated:"):
        options = dict(part.split("=", 1) for part in text.partition(":")[2].split(",") if part)
        return generate_scenario(**{key: int(value) for key, value in options.items()})
    return read_scenario(text)
