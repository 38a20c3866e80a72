"""Fixtures for the Runpod simulator tests: a running simulator and a client for it.

Every simulator runs on the scenario's fixed `now` (2026-11-20T14:30:00Z for the default one),
so nothing depends on the wall clock.
"""

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal

import httpx
import pytest

from labgov.core.tls import default_context
from labgov.simulator import SimulatorServer, generate_scenario

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 20, 14, 30, tzinfo=UTC)  # the default scenario's now


class Api:
    """An httpx client for one simulator that reads JSON numbers as Decimal."""

    def __init__(self, sim: SimulatorServer, key: str | None = None):
        self.sim = sim
        token = sim.api_key if key is None else key
        self.http = httpx.Client(
            base_url=sim.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            # The process's one TLS context: httpx otherwise makes one for every client,
            # parsing the whole CA bundle (~50 ms of CPU, 5 s over this folder's tests).
            verify=default_context(),
        )

    def get(self, path: str, **params) -> httpx.Response:
        return self.http.get(path, params=params)

    def json(self, path: str, **params) -> dict:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        return json.loads(response.text, parse_float=Decimal)

    def post(self, path: str, body=None) -> httpx.Response:
        return self.http.post(path, json=body)

    def delete(self, path: str) -> httpx.Response:
        return self.http.delete(path)

    def close(self) -> None:
        self.http.close()


def decoded(response: httpx.Response) -> dict:
    return json.loads(response.text, parse_float=Decimal)


@pytest.fixture
def api(sim) -> Iterator[Api]:
    client = Api(sim)
    yield client
    client.close()


@pytest.fixture(scope="session")
def small_generated():
    return generate_scenario(pods=40, volumes=15, endpoints=4, clusters=2, days=12, seed=7)
