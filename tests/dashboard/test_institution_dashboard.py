"""Finance's and institution admins' dashboard from the monthly rollups."""

import csv
import datetime as dt
import io
from decimal import Decimal

from django.urls import reverse

from labgov.dashboard.selectors.institution import NO_COST_CENTER, UNATTRIBUTED
from tests.dashboard.conftest import add_spend, count_queries, grow
from tests.factories import AllocationFactory, RunpodAccountFactory

D = Decimal
FEB = dt.date(2026, 2, 10)


def _url(**params):
    from urllib.parse import urlencode

    url = reverse("dashboard:institution")
    return f"{url}?{urlencode(params)}" if params else url


def _by_name(table):
    return {r.cells[0]: r.cells for r in table.rows}


def _february(world, spend):
    """NLP spends $40 in February on a second account; $2.50 nobody owns."""
    lab_account = RunpodAccountFactory(
        institution=world.institution, lab=world.other_lab, name="NLP team"
    )
    allocation = AllocationFactory(
        funding_source=world.other_funding_source, user=world.other_member
    )
    add_spend(lab_account, FEB, "40.00", allocation=allocation)
    add_spend(lab_account, FEB, "2.50")
    return lab_account


def test_spend_by_lab_funding_source_cost_center_and_account_per_month(world, spend, client_for):
    _february(world, spend)
    world.other_funding_source.cost_center = ""
    world.other_funding_source.save()
    data = client_for(world.finance).get(_url(start="2026-02", end="2026-03")).context["data"]
    labs = _by_name(data.tables["labs"])
    # Columns: lab, Feb, Mar, total.
    assert labs["Vision"][1:] == [0, D("110"), D("110")]
    assert labs["NLP"][1:] == [D("40"), 0, D("40")]
    assert labs[UNATTRIBUTED][1:] == [D("2.50"), D("5"), D("7.50")]
    assert data.tables["labs"].footer[1:] == [D("42.50"), D("115"), D("157.50")]
    funding = _by_name(data.tables["funding"])
    assert funding[world.funding_source.name][1:] == [
        world.funding_source.award_number,
        "Vision",
        world.funding_source.cost_center,
        0,
        D("110"),
        D("110"),
    ]
    centers = _by_name(data.tables["cost_centers"])
    assert centers[NO_COST_CENTER][1:] == [D("40"), 0, D("40")]
    accounts = _by_name(data.tables["accounts"])
    assert accounts["Main"][1:] == [0, D("115"), D("115")]
    assert accounts["NLP team"][1:] == [D("42.50"), 0, D("42.50")]
    unattributed = _by_name(data.tables["unattributed"])
    assert unattributed["Main"][1:] == [0, D("5"), D("5")]
    assert unattributed["NLP team"][1:] == [D("2.50"), 0, D("2.50")]
    # Every table adds up to the accounts' total.
    for name in ("labs", "funding", "cost_centers", "accounts"):
        assert data.tables[name].footer[-1] == D("157.50"), name
    assert data.total_usd == D("157.50") and data.unattributed_usd == D("7.50")


def test_a_grant_whose_month_nets_to_zero_is_still_listed(world, spend, client_for):
    """A grant that ended in 2025 got a charge and its credit back in February: nothing in
    sum, but spend in the range, so finance's page lists it with $0 (its monthly rollups by
    funding source keep a row of zero)."""
    from tests.factories import FundingSourceFactory

    ended = FundingSourceFactory(
        lab=world.lab,
        name="Ended grant",
        start_date=dt.date(2024, 1, 1),
        end_date=dt.date(2025, 12, 31),
    )
    allocation = AllocationFactory(funding_source=ended, user=world.member)
    add_spend(spend.account, FEB, "12.00", allocation=allocation)
    add_spend(spend.account, FEB, "-12.00", allocation=allocation, category="cloud_credit")
    data = client_for(world.finance).get(_url(start="2026-02", end="2026-02")).context["data"]
    funding = _by_name(data.tables["funding"])
    assert funding["Ended grant"][-2:] == [D("0"), D("0")]


def test_unattributed_spend_links_to_the_queue(world, spend, client_for):
    page = client_for(world.inst_admin).get(_url()).content.decode()
    assert reverse("runpod:unattributed") in page


def test_month_filter(world, spend, client_for):
    _february(world, spend)
    data = client_for(world.finance).get(_url(start="2026-02", end="2026-02")).context["data"]
    assert data.total_usd == D("42.50")
    assert [c.label for c in data.tables["labs"].columns] == ["Lab", "Feb 2026", "Total"]
    bad = client_for(world.finance).get(_url(start="02/2026"))
    assert "Months are YYYY-MM." in bad.content.decode()


def test_pinned_unattributed_row_stays_last_whatever_the_sort(world, spend, client_for):
    data = client_for(world.finance).get(_url(labs_sort="total")).context["data"]
    assert data.tables["labs"].rows[-1].cells[0] == UNATTRIBUTED


def test_csv_of_spend_by_funding_source(world, spend, client_for):
    _february(world, spend)
    response = client_for(world.finance).get(
        _url(start="2026-02", end="2026-03", format="csv", table="funding")
    )
    assert response["Content-Disposition"] == (
        'attachment; filename="labgov-institution-funding-202602-202603.csv"'
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "Funding source",
        "Award",
        "Lab",
        "Cost center",
        "Feb 2026",
        "Mar 2026",
        "Total",
    ]
    assert rows[1][0] == world.funding_source.name and rows[1][-1] == "110.00"
    assert rows[-2] == [UNATTRIBUTED, "", "", "", "2.50", "5.00", "7.50"]
    assert rows[-1] == ["Total", "", "", "", "42.50", "115.00", "157.50"]


def test_outsider_sees_only_their_own_institution(world, spend, client_for):
    data = client_for(world.outsider).get(_url()).context["data"]
    assert data.total_usd == 0
    assert world.funding_source.name not in client_for(world.outsider).get(_url()).content.decode()


def test_query_count_is_pinned_and_independent_of_data_size(world, spend, client_for):
    client = client_for(world.finance)
    small, _ = count_queries(client, _url())
    grow(world, spend, 10)
    large, response = count_queries(client, _url())
    # session, user, scope; spend per account, funding source and month; the funding sources
    # with their labs; the accounts.
    assert small == large == 6
    assert len(response.context["data"].tables["funding"].rows) == 23
