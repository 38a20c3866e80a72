"""Only what can succeed on a retry is retried: 429, 5xx other than 501, 408 and timeouts. A
server that says it does not do something (501) or has no such route (404) is believed at once:
the balance query, posted on every sync, costs one request there, not five and seven seconds."""

import datetime as dt

import pytest

from labgov.runpod.errors import RunpodError, RunpodUnavailable
from labgov.runpod.models import SyncRun
from labgov.runpod.sync import account_sync
from tests.runpod import test_client as client_tests
from tests.runpod.test_client import ok, problem

connect, fake_time = client_tests.connect, client_tests.fake_time  # its fixtures

PODS = '{"pods": []}'


def test_501_is_not_retried(connect, fake_time):
    client, server = connect(problem(501, "Not Implemented", "no such thing here"), ok(PODS))
    with pytest.raises(RunpodError, match="501 Not Implemented") as raised:
        client.list_pods()
    assert raised.value.status == 501
    assert len(server.requests) == 1
    assert fake_time.sleeps == []


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
def test_what_can_pass_on_a_retry_is_still_retried(connect, fake_time, status):
    client, server = connect(problem(status, "Failing", "for now"), ok(PODS))
    assert client.list_pods() == []
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [404, 405, 410, 501])
def test_a_server_without_graphql_answers_the_balance_at_once(connect, fake_time, status):
    client, server = connect(problem(status, "Absent", "no GraphQL here"))
    assert client.account_balance() is None
    assert len(server.requests) == 1
    assert fake_time.sleeps == []


def test_a_failing_graphql_is_retried_and_then_said(connect, fake_time):
    client, server = connect(problem(503, "Service Unavailable", "down"))
    with pytest.raises(RunpodUnavailable):
        client.account_balance()
    assert len(server.requests) == 5


@pytest.mark.parametrize("kind", ["501", "404"])
def test_a_sync_against_a_server_without_graphql_asks_once(
    world, sim, sim_account, at_sim_now, kind
):
    """Through the real client and its real waits: one /graphql request, and the balance
    recorded as unavailable, not as an error, while the sync succeeds."""
    sim.inject_fault("/graphql", kind, times=None)
    run = account_sync(
        account_id=sim_account.pk,
        start=sim.state.now - dt.timedelta(hours=2),
        end=sim.state.now,
    )
    assert run.status == SyncRun.Status.SUCCEEDED, run.error
    assert run.counts["balance_read"] is False
    assert [r for r in sim.requests if r[1] == "/graphql"] == [("POST", "/graphql")]
    sim_account.refresh_from_db()
    assert sim_account.balance_usd is None
