"""Test settings: the real settings module, with the environment a test run needs."""

import os

os.environ.setdefault("DEBUG", "1")  # dev defaults (plain static storage); tests run with DEBUG off
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-" + "x" * 40)

from labgov.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The page cache on, in each test process's own memory (a test and the pages it reads share
# it), so every dashboard test also checks that writes retire cached pages.
LABGOV_PAGE_CACHE_SECONDS = 300
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405 - silences WhiteNoise

# A first sync fetches the last 8 days of the simulator's month of history, in two slices of
# four days: enough to exercise slicing and the fetch-ahead pipeline, at a quarter of the
# cost. Each slice has a fixed cost (its locks, statements, ledger and rollup pass) whatever
# it holds: slices of two days made the sync-heavy test files 22 % slower (123 -> 101 s of
# pytest, 36 files). tests/runpod/test_sync_parallel.py and test_sync_deadlock.py slice by
# the day, tests/runpod/test_sync_windows_property.py any way.
LABGOV_SYNC_FIRST_DAYS = 8
LABGOV_SYNC_SLICE_HOURS = 96

# "Sync now" runs the sync in the request: a test reads what it wrote in its own transaction
# (tests/runpod/test_sync_now.py turns the embedded mode's thread on).
LABGOV_SYNC_NOW_BESIDE = False

# One writer: tests run inside a transaction another thread's connection could not see.
# tests/runpod/test_sync_parallel.py covers several writers on PostgreSQL.
LABGOV_SYNC_WRITERS = 1

# The webhook tests' receiver listens on plain http on this machine.
LABGOV_WEBHOOK_HTTP_HOSTS = ["127.0.0.1", "localhost", "::1"]
# The simulator listens on this machine (tests of the production rule override it).
LABGOV_RUNPOD_HOSTS = ["127.0.0.1", "localhost", "::1"]

# Export files go to a directory of this test process, never the project's var/, removed when
# the process ends (each worker and subprocess made one and left it in /tmp).
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

LABGOV_EXPORT_DIR = Path(tempfile.mkdtemp(prefix="labgov-test-exports-"))  # noqa: F405
atexit.register(shutil.rmtree, LABGOV_EXPORT_DIR, ignore_errors=True)
