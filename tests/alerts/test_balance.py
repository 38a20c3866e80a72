"""The account balance: Runpod's GraphQL `myself` (while it exists) read by the client from
the simulator, its absence or failure never failing a sync."""

from decimal import Decimal as D

import httpx
import pytest

from labgov.runpod.client import RunpodClient
from labgov.runpod.errors import RunpodBadResponse


def test_client_reads_the_balance_from_the_simulator(sim):
    sim.state.set_balance(D("842.17"))
    with RunpodClient(sim.base_url, sim.api_key) as client:
        balance = client.account_balance()
    assert balance.balance_usd == D("842.17")
    assert isinstance(balance.spend_per_hr_usd, D) and balance.spend_per_hr_usd > 0
    assert balance.spend_limit_usd == D(80)


def _client(handler) -> RunpodClient:
    return RunpodClient(
        "https://api.example",
        "rp_key_123456",
        transport=httpx.MockTransport(handler),
        sleep=lambda s: None,
    )


def test_no_graphql_api_means_no_balance():
    client = _client(
        lambda request: httpx.Response(
            404,
            json={"title": "Not Found", "status": 404, "detail": "no route"},
            headers={"content-type": "application/problem+json"},
        )
    )
    assert client.account_balance() is None


def test_graphql_errors_are_said_in_words():
    client = _client(
        lambda request: httpx.Response(200, json={"errors": [{"message": "Unauthorized"}]})
    )
    with pytest.raises(RunpodBadResponse, match="refused the balance query: Unauthorized"):
        client.account_balance()


def test_balance_amounts_are_decimals_never_floats():
    client = _client(
        lambda request: httpx.Response(
            200,
            content=b'{"data":{"myself":{"clientBalance":0.1,"currentSpendPerHr":null}}}',
        )
    )
    balance = client.account_balance()
    assert balance.balance_usd == D("0.1") and balance.spend_per_hr_usd is None


def test_a_failing_balance_never_fails_the_sync(world, sim, sim_account, at_sim_now, fast_clients):
    from labgov.runpod.sync import account_sync

    sim.inject_fault("/graphql", "500", times=None)
    run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == "succeeded", run.error
    assert run.counts["balance_read"] is False
    sim_account.refresh_from_db()
    assert sim_account.balance_usd is None
