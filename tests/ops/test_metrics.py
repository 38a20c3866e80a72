"""/metrics: Prometheus text with the installation's state and request latency, for the
operator's token or an allowed address only."""

import datetime as dt
import json
import logging
import sys

import pytest
import time_machine
from django.urls import reverse

from labgov.alerts.models import Alert
from labgov.core.log_json import JsonFormatter
from labgov.runpod.models import RunpodAccount, SyncRun

NOW = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)
TOKEN = "metrics-token-0123456789"


@pytest.fixture
def metrics_settings(settings):
    settings.LABGOV_METRICS_TOKEN = TOKEN
    settings.LABGOV_METRICS_ALLOWED_IPS = []
    return settings


def _scrape(client, **headers):
    return client.get(reverse("metrics"), **headers)


def test_metrics_refuse_without_the_token_or_an_allowed_address(db, client, metrics_settings):
    assert _scrape(client).status_code == 403
    assert _scrape(client, HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert _scrape(client, HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 403
    metrics_settings.LABGOV_METRICS_TOKEN = ""  # nothing configured: nobody
    assert _scrape(client, HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_an_allowed_address_is_judged_behind_the_proxy(db, client, metrics_settings):
    metrics_settings.LABGOV_METRICS_ALLOWED_IPS = ["10.1.2.0/24"]
    # Through nginx (127.0.0.1): the client is the right-most untrusted forwarded address,
    # so writing an allowed one into X-Forwarded-For yourself does not help.
    spoofed = _scrape(client, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="10.1.2.3, 8.8.8.8")
    assert spoofed.status_code == 403
    allowed = _scrape(client, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="10.1.2.3")
    assert allowed.status_code == 200


def test_metrics_report_sync_lag_failures_alerts_and_latency(world, client, metrics_settings):
    account = RunpodAccount.objects.create(
        institution=world.institution, name='Lab "A"', api_key_encrypted="x", created_at=NOW
    )
    never = RunpodAccount.objects.create(
        institution=world.institution, name="New", api_key_encrypted="x", created_at=NOW
    )
    for minutes, status in [(60, "succeeded"), (30, "failed"), (15, "failed")]:
        at = NOW - dt.timedelta(minutes=minutes)
        SyncRun.objects.create(account=account, status=status, started_at=at, finished_at=at)
    SyncRun.objects.create(account=never, status="failed", started_at=NOW, finished_at=NOW)
    Alert.objects.create(
        institution=world.institution, kind="sync_failing", subject_key="a", title="t"
    )
    Alert.objects.create(
        institution=world.institution,
        kind="sync_failing",
        subject_key="b",
        title="t",
        state=Alert.State.RESOLVED,
    )
    client.get(reverse("login"))
    with time_machine.travel(NOW + dt.timedelta(minutes=5), tick=False):
        response = _scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    labels = (
        f'account="Lab \\"A\\"",account_id="{account.pk}",institution="{world.institution.slug}"'
    )
    assert f"labgov_sync_lag_seconds{{{labels}}} 3900.0" in text
    assert f"labgov_sync_consecutive_failures{{{labels}}} 2.0" in text
    assert f'labgov_sync_runs{{{labels},status="failed"}} 2.0' in text
    new = f'account="New",account_id="{never.pk}",institution="{world.institution.slug}"'
    assert f"labgov_sync_lag_seconds{{{new}}} 300.0" in text  # since it was connected
    assert f"labgov_sync_consecutive_failures{{{new}}} 1.0" in text
    assert 'labgov_alerts_open{kind="sync_failing"} 1.0' in text
    assert 'labgov_alerts_open{kind="stopped_pod_disk"} 0.0' in text
    assert "labgov_queue_depth" in text and "labgov_broker_up 1.0" in text
    assert (
        'labgov_http_request_duration_seconds_count{method="GET",route="login/",status="2xx"}'
        in text
    )


def test_json_log_lines_carry_the_extras_and_the_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x",
            logging.ERROR,
            __file__,
            1,
            "failed %s",
            ("sync",),
            sys.exc_info(),
            extra={"status_code": 500},
        )
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "failed sync" and line["level"] == "ERROR"
    assert line["status_code"] == 500 and line["logger"] == "x"
    assert line["time"].endswith("+00:00")
    assert "ValueError: boom" in line["exception"]
