"""The production stack as it ships (deploy/smoke.py): gunicorn, the Celery worker and beat as
their systemd units run them, nginx with deploy/nginx.conf, DEBUG=0, on this machine's
PostgreSQL and Redis, checked through nginx and stopped again."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("LABGOV_REQUIRE_SERVICES") == "1"


@pytest.mark.deploy
def test_the_production_stack_starts_answers_through_nginx_and_stops(db, request):
    redis_url = os.environ.get("LABGOV_TEST_REDIS_URL")
    if connection.vendor != "postgresql" or not redis_url:
        if REQUIRE:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but PostgreSQL or Redis is not configured")
        pytest.skip("needs PostgreSQL and Redis (make test sets them up when they answer)")
    # The script creates and drops a database of its own next to the test database, and uses
    # a queue of its own in the test run's Redis database. The web unit's collectstatic ran
    # once for the files it reads (tests/fixtures_static.py); the script copies its output.
    static = request.getfixturevalue("production_static")
    env = {
        **os.environ,
        "LABGOV_SMOKE_REDIS_URL": redis_url,
        "LABGOV_SMOKE_COLLECTED_STATIC": str(static),
    }
    # Its database is a copy of the migrated template the test databases were cloned from
    # (tests/fixtures_db.py), so the web unit's migrate finds nothing left to apply.
    from tests import fixtures_db

    if fixtures_db.TEMPLATE:
        env["LABGOV_SMOKE_DATABASE_TEMPLATE"] = fixtures_db.TEMPLATE
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "deploy" / "smoke.py")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: the script then stops everything it started before exiting.
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
        pytest.fail(f"the deploy smoke test did not finish in 150 s:\n{output[-6000:]}")
    assert process.returncode == 0, output[-8000:]
    assert "passed in" in output
    if fixtures_db.TEMPLATE:
        assert f"a copy of the migrated {fixtures_db.TEMPLATE}" in output
