"""The production static files, collected once and kept for later runs: the web unit's
collectstatic (deploy/smoke.py's collect_static, DEBUG=0, the compressed manifest storage) is
the slowest step there is (about 27 s of one core on the 2-core test machine: every file
hashed, then compressed with gzip and Brotli), and two tests read its output: the manifest
test and the deploy smoke test.

Its output depends only on what it reads, so it is kept under a digest of that, as
tests/fixtures_db.py keeps the migrated template: every file the static finders find (name
and bytes), the settings, the script and the unit that run it, and the versions of Python,
Django, WhiteNoise and Brotli. A run whose digest is kept reads the same files; a static file,
a setting or a version changed gives a new digest, so collectstatic runs again (and fails the
run if it fails). The first test process to ask makes it under a file lock; the others wait
and read the same files. Kept in $LABGOV_TEST_CACHE_DIR (else ~/.cache/labgov-tests); entries
of other digests unused for a day are removed. `LABGOV_TEST_STATIC_CACHE=0` collects into the
run's temporary directory instead, every run. Loaded by tests/conftest.py."""

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHED = os.environ.get("LABGOV_TEST_STATIC_CACHE", "1") != "0"
UNUSED_FOR = 24 * 3600  # seconds after which another digest's entry is removed


def smoke_module():
    """deploy/smoke.py (a script, not a package) as a module."""
    path = ROOT / "deploy" / "smoke.py"
    spec = importlib.util.spec_from_file_location("labgov_deploy_smoke", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def static_digest() -> str:
    """What collectstatic's output depends on, as a short hex digest."""
    from django.contrib.staticfiles import finders

    digest = hashlib.sha256(sys.version.encode())
    for package in ("django", "whitenoise", "brotli"):
        digest.update(f"{package}={importlib.metadata.version(package)}\0".encode())
    for path in ("labgov/settings.py", "deploy/smoke.py", "deploy/systemd/labgov-web.service"):
        digest.update(f"{path}\0".encode() + (ROOT / path).read_bytes())
    found = {}
    for finder in finders.get_finders():
        for name, storage in finder.list([]):
            found.setdefault(name, storage.path(name))  # the first finder's file wins
    for name in sorted(found):
        digest.update(f"{name}\0".encode() + Path(found[name]).read_bytes())
    return digest.hexdigest()[:12]


def _cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "labgov-tests"
    return Path(os.environ.get("LABGOV_TEST_CACHE_DIR") or default)


def _remove_unused(folder: Path, keep: str) -> None:
    for entry in folder.glob("production-static-*"):
        if entry.name.startswith(keep) or not entry.is_dir():
            continue
        if time.time() - entry.stat().st_mtime > UNUSED_FOR:
            shutil.rmtree(entry, ignore_errors=True)
            entry.with_name(f"{entry.name}.lock").unlink(missing_ok=True)


@pytest.fixture(scope="session")
def production_static(request, tmp_path_factory) -> Path:
    """STATIC_ROOT as the web unit's collectstatic leaves it, made once for these inputs."""
    if CACHED:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        name = f"production-static-{static_digest()}"
    else:
        folder = tmp_path_factory.getbasetemp()
        if getattr(request.config, "workerinput", None) is not None:
            folder = folder.parent  # this run's directory, shared by its xdist workers
        name = "production-static"
    target = folder / name
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "staticfiles.json").is_file():
            building = folder / f"{name}.building"
            shutil.rmtree(building, ignore_errors=True)
            smoke = smoke_module()
            try:
                static = smoke.collect_static(building)
            except smoke.SmokeFailure as exc:
                pytest.fail(str(exc))
            shutil.rmtree(target, ignore_errors=True)
            static.rename(target)
            shutil.rmtree(building)
        os.utime(target)  # in use: not removed as unused by another checkout's run
        if CACHED:
            _remove_unused(folder, keep=name)
    return target
