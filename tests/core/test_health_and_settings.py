import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from labgov.env import env_bool, env_int, env_list

ROOT = Path(__file__).resolve().parents[2]


def test_healthz_names_database_and_broker(db, client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    body = response.json()
    assert body["database"]["state"] == "ok"
    assert body["database"]["vendor"] in ("sqlite", "postgresql")
    assert body["broker"]["state"] in ("ok", "in-process")


def test_healthz_reports_an_unreachable_broker(db, client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    from labgov.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get(reverse("healthz"))
    finally:
        app.conf.broker_url = original
    assert response.status_code == 503
    assert response.json()["broker"]["state"].startswith("error")


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_env_bool_fails_loudly(monkeypatch, value):
    monkeypatch.setenv("X_FLAG", value)
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG")


def test_env_int_fails_loudly(monkeypatch):
    monkeypatch.setenv("X_INT", "ten")
    with pytest.raises(ImproperlyConfigured, match="X_INT"):
        env_int("X_INT", 1)
    monkeypatch.setenv("X_INT", "-1")
    with pytest.raises(ImproperlyConfigured, match="at least 0"):
        env_int("X_INT", 1, minimum=0)


def test_env_list(monkeypatch):
    monkeypatch.setenv("X_LIST", "a.example, b.example,,")
    assert env_list("X_LIST") == ["a.example", "b.example"]


PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "k" * 30 + "Z9#@" + "q" * 30,
    "ALLOWED_HOSTS": "labgov.example.edu",
    "LABGOV_ENCRYPTION_KEYS": "zTLJpGi6bPSY5uOYiY1eDyQNZ0ZsRgDOM37YEZZ0aQ4=",
    "DATABASE_URL": "sqlite:///:memory:",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
}


def _manage(*args, env):
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in PRODUCTION_ENV and k != "DJANGO_SETTINGS_MODULE"
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_production_settings_pass_check_deploy_without_warnings():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS", "LABGOV_ENCRYPTION_KEYS"])
def test_production_refuses_to_start_without(missing):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != missing}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert missing in result.stderr


def test_bad_boolean_stops_startup():
    result = _manage("check", env={**PRODUCTION_ENV, "DEBUG": "perhaps"})
    assert result.returncode != 0
    assert "DEBUG='perhaps' is not a boolean" in result.stderr


@pytest.mark.parametrize(
    ("cache_url", "expected"), [("", "0"), ("redis://127.0.0.1:6379/9", "300")]
)
def test_the_page_cache_is_on_only_with_a_cache_every_process_shares(cache_url, expected):
    """Each process's own memory would keep its own data version: a sync in the worker would
    not retire the pages a web process keeps, so without a shared cache the pages are not
    kept at all."""
    env = {**PRODUCTION_ENV, "LABGOV_CACHE_URL": cache_url}
    result = _manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.LABGOV_PAGE_CACHE_SECONDS)",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == expected
