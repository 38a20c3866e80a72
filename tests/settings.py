"""Test settings: the real settings module, with the environment a test run needs."""

import os

os.environ.setdefault("DEBUG", "1")  # dev defaults (plain static storage); tests run with DEBUG off
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-" + "x" * 40)

from labgov.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405 - silences WhiteNoise

# A week a slice: the simulator's 30 days of history sync in five slices instead of thirty,
# still enough to exercise slicing and the fetch-ahead pipeline.
LABGOV_SYNC_SLICE_HOURS = 24 * 7

# One writer: tests run inside a transaction another thread's connection could not see.
# tests/runpod/test_sync_parallel.py covers several writers on PostgreSQL.
LABGOV_SYNC_WRITERS = 1
