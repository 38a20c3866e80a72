"""The period page's queries do not grow with the funding sources and invoices it shows."""

import datetime as dt

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labgov.invoicing.services import invoices_generate
from tests.factories import AllocationFactory, FundingSourceFactory, ResourceFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


def _add_sources(world, account, n: int, offset: int) -> None:
    for i in range(offset, offset + n):
        fs = FundingSourceFactory(lab=world.lab if i % 2 else world.other_lab, cost_center=f"C{i}")
        allocation = AllocationFactory(funding_source=fs, user=world.member)
        pod = ResourceFactory(account=account, name=f"pod-{i}", runpod_id=f"p{i}")
        bill(pod, at(2026, 10, 3 + i % 20, 1), allocation=allocation, gpu="1.25")


def _period_queries(client, world) -> int:
    url = reverse("invoicing:period", args=[world.institution.pk, 2026, 10])
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_period_page_reads_a_fixed_number_of_queries(world, account, client_for):
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _add_sources(world, account, 2, 0)
    invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    client = client_for(world.finance)
    few = _period_queries(client, world)
    _add_sources(world, account, 12, 2)
    invoices = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    assert len(invoices) == 14
    many = _period_queries(client, world)
    assert many == few, f"{few} queries for 2 invoices, {many} for 14"
    assert few <= 16
