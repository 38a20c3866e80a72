"""A lab's page for a calendar month says what the lab's invoices of it say (direct and F&A),
or shows the difference and why, each reason its own amount adding up to it in cents."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.urls import reverse

from labgov.invoicing.services import invoice_line_add, invoices_generate
from labgov.usage.services import rollups_rebuild
from tests.factories import ResourceFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)
NOW = at(2026, 11, 5, 12)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(NOW, tick=False):
        yield


def _october_page(world, client_for):
    url = reverse("dashboard:lab", args=[world.lab.pk]) + "?start=2026-10-01&end=2026-10-31"
    response = client_for(world.lab_admin).get(url)
    return response.context["data"].invoiced, response.content.decode()


def _bill(world, account, amounts):
    days = []
    for n, amount in enumerate(amounts):
        pod = ResourceFactory(account=account, kind="pod", name=f"train-{n}", runpod_id=f"p{n}")
        bill(pod, at(2026, 10, 3 + n, 4), allocation=world.allocation, gpu=amount)
        days.append(dt.date(2026, 10, 3 + n))
    rollups_rebuild(account=account, days=days)
    synced(account, at(2026, 9, 30), at(2026, 11, 2))


def test_the_lab_month_page_says_what_its_invoices_say(world, account, grant, client_for):
    _bill(world, account, ["0.69", "1.25"])
    (invoice,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    month, page = _october_page(world, client_for)
    assert (month.direct_usd, month.indirect_usd, month.total_usd) == (
        D("1.94"),
        D("0.19"),
        invoice.total_usd,
    )
    assert month.agrees and month.reasons == [] and month.drafts == 1
    assert "direct $1.94 + F&amp;A $0.19" in page and "is what the invoices charge directly" in page


def test_the_lab_month_page_shows_the_difference_and_why(world, account, grant, client_for):
    _bill(world, account, ["1.005", "1.005", "1.005"])  # each line rounds to $1.00
    (draft,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    invoice_line_add(
        actor=world.inst_admin, invoice=draft, kind="credit", amount_usd=D("1.00"), reason="Pilot"
    )
    month, page = _october_page(world, client_for)
    assert month.page_spend_usd == D("3.015")
    assert (month.direct_usd, month.indirect_usd) == (D("2.00"), D("0.20"))
    assert month.difference_usd == D("-1.02") and not month.agrees
    assert {r.key: r.amount_usd for r in month.reasons} == {
        "credits": D("-1.00"),
        "rounding": D("-0.02"),
    }
    assert sum(r.amount_usd for r in month.reasons) == month.difference_usd
    assert 'data-reason="credits"' in page and "the invoices charge $1.02 less" in page

    # Spend synced after the drafts: on no invoice yet, and said so.
    late = ResourceFactory(account=account, kind="pod", name="late", runpod_id="late")
    bill(late, at(2026, 10, 20, 1), allocation=world.allocation, gpu="2.50")
    rollups_rebuild(account=account, days=[dt.date(2026, 10, 20)])
    month, _ = _october_page(world, client_for)
    reasons = {r.key: r.amount_usd for r in month.reasons}
    assert reasons["not_invoiced"] == D("-2.50")
    assert sum(reasons.values()) == month.difference_usd == D("-3.52")


def test_a_range_that_is_no_calendar_month_offers_last_month(world, account, client_for):
    url = reverse("dashboard:lab", args=[world.lab.pk]) + "?start=2026-10-02&end=2026-10-31"
    response = client_for(world.lab_admin).get(url)
    assert response.context["data"].invoiced is None
    assert "?start=2026-10-01&amp;end=2026-10-31" in response.content.decode()
