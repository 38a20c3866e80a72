"""The production static files, collected once per test run: the web unit's collectstatic
(deploy/smoke.py's collect_static, DEBUG=0, the compressed manifest storage) is the slowest
step there is (about 20 s of hashing and compressing on the 2-core test machine), and two
tests read its output: the manifest test and the deploy smoke test. The first test process
to ask makes it, under a file lock, in the run's temporary directory that every xdist worker
shares; the others wait for it and read the same files. Loaded by tests/conftest.py."""

import fcntl
import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def smoke_module():
    """deploy/smoke.py (a script, not a package) as a module."""
    path = ROOT / "deploy" / "smoke.py"
    spec = importlib.util.spec_from_file_location("labgov_deploy_smoke", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def production_static(request, tmp_path_factory) -> Path:
    """STATIC_ROOT as the web unit's collectstatic leaves it, made once for the whole run."""
    base = tmp_path_factory.getbasetemp()
    if getattr(request.config, "workerinput", None) is not None:
        base = base.parent  # this run's directory, shared by its xdist workers
    target = base / "production-static"
    with open(base / "production-static.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "staticfiles.json").is_file():
            building = base / "production-static.building"
            shutil.rmtree(building, ignore_errors=True)
            smoke = smoke_module()
            try:
                static = smoke.collect_static(building)
            except smoke.SmokeFailure as exc:
                pytest.fail(str(exc))
            static.rename(target)
            shutil.rmtree(building)
    return target
