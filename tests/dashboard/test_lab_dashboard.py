"""The lab dashboard against known rollups."""

import csv
import datetime as dt
import io
from decimal import Decimal

from django.urls import reverse

from labgov.accounts import access
from labgov.accounts.models import Lab, User
from labgov.dashboard.selectors.lab import lab_for_spend
from tests.dashboard.conftest import TODAY, add_spend, count_queries, grow, past_rate_only
from tests.factories import AllocationFactory, LabFactory, ResourceFactory, RunpodAccountFactory

D = Decimal


def _url(world, **params):
    from urllib.parse import urlencode

    url = reverse("dashboard:lab", args=[world.lab.pk])
    return f"{url}?{urlencode(params)}" if params else url


def test_funding_sources_with_burn_and_forecast(world, spend, client_for):
    past_rate_only(spend)
    data = client_for(world.lab_admin).get(_url(world)).context["data"]
    [row] = data.tables["funding"].rows
    assert row.cells[0] == world.funding_source.name
    assert row.href == reverse("dashboard:funding", args=[world.funding_source.pk])
    assert row.cells[2:7] == [D("10000"), 0, D("110"), D("9890"), D("11")]
    assert row.cells[8].startswith("Lasts past its end")
    assert data.totals["burn"] == D("11")
    # The other lab's funding never shows here.
    page = client_for(world.lab_admin).get(_url(world)).content.decode()
    assert f">{world.funding_source.name}<" in page
    assert f">{world.other_funding_source.name}<" not in page


def test_spend_by_category_day_and_person_over_the_range(world, spend, client_for):
    other = AllocationFactory(
        funding_source=world.funding_source, user=None, project_name="shared-eval"
    )
    add_spend(
        spend.account,
        TODAY - dt.timedelta(days=2),
        "4.00",
        allocation=other,
        category="network_standard",
    )
    data = (
        client_for(world.lab_admin)
        .get(_url(world, start=(TODAY - dt.timedelta(days=2)).isoformat()))
        .context["data"]
    )
    assert {r.cells[0]: r.cells[1] for r in data.tables["categories"].rows} == {
        "GPU compute": D("20"),
        "Pod disk (container + volume)": D("2"),
        "Network storage (standard)": D("4"),
    }
    people = {r.cells[0]: r.cells[-2] for r in data.tables["people"].rows}
    assert people == {str(world.member): D("22"), "shared-eval": D("4")}
    assert data.totals["period"] == D("26")
    day = data.daily_chart["labels"].index((TODAY - dt.timedelta(days=2)).isoformat())
    by_label = {d["label"]: d["data"][day] for d in data.daily_chart["datasets"]}
    assert by_label == {
        "GPU compute": D("10.00"),
        "Pod disk (container + volume)": D("1.00"),
        "Network storage (standard)": D("4.00"),
    }


def test_people_are_named_as_their_allocations_name_them(world, spend, client_for):
    thesis = AllocationFactory(
        funding_source=world.funding_source, user=world.member, project_name="thesis"
    )
    add_spend(spend.account, TODAY - dt.timedelta(days=1), "1.00", allocation=thesis)
    data = client_for(world.lab_admin).get(_url(world)).context["data"]
    names = {r.cells[0] for r in data.tables["people"].rows}
    assert names == {world.allocation.holder_name, thesis.holder_name}
    assert thesis.holder_name == f"{world.member} – thesis"


def test_unattributed_spend_on_the_labs_own_account_is_pointed_out(world, spend, client_for):
    own = RunpodAccountFactory(institution=world.institution, lab=world.lab, name="Vision team")
    add_spend(own, TODAY - dt.timedelta(days=1), "7.00")
    response = client_for(world.lab_admin).get(_url(world))
    assert response.context["data"].unattributed_usd == D("7")
    page = response.content.decode()
    assert "$7.00 unattributed on the lab" in page and reverse("runpod:unattributed") in page


def test_running_and_idle_storage_name_their_funding(world, spend, client_for):
    ResourceFactory(account=spend.account, status="RUNNING")  # nobody's: not this lab's
    data = client_for(world.lab_admin).get(_url(world)).context["data"]
    assert [r.cells[0] for r in data.tables["running"].rows] == ["train-a100"]
    assert data.tables["running"].rows[0].cells[3] == world.funding_source.name
    assert data.totals["running_rate"] == D("1.89")
    assert data.totals["idle_monthly"] == D("75.00")


def test_csv_of_the_people_table(world, spend, client_for):
    response = client_for(world.inst_admin).get(
        _url(world, format="csv", table="people", start="2026-03-16", end="2026-03-17")
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "Person",
        "GPU compute",
        "Pod disk (container + volume)",
        "Total",
        "Share",
    ]
    assert rows[1] == [str(world.member), "20.00", "2.00", "22.00", "100.0"]
    assert rows[-1][0] == "Total"


def test_query_count_is_pinned_and_independent_of_data_size(world, spend, client_for):
    client = client_for(world.lab_admin)
    small, _ = count_queries(client, _url(world))
    grow(world, spend, 10)
    large, response = count_queries(client, _url(world))
    # session, user, scope; the lab; its funding sources with figures; the burn window per
    # funding source; spend per category and allocation; the holders of those allocations;
    # spend per day and category; resources running, billing idle or costing money now (the
    # tables, and the forecasts' second rate), in one query. (Its alerts load in a request of
    # their own.)
    assert small == large == 10
    assert len(response.context["data"].tables["funding"].rows) == 11


def test_a_lab_is_seen_by_exactly_whom_labs_q_lets_see_it(world, client_for):
    """lab_for_spend checks labs_q's rule in Python on the lab it has read: the two agree for
    every person and lab, and a lab one may not see is a 404 (a huge id too)."""
    elsewhere = LabFactory()
    labs = list(Lab.objects.all())
    for user in User.objects.all():
        seen = set(Lab.objects.filter(access.labs_q(user)).values_list("pk", flat=True))
        for lab in labs:
            rule = access.can_see_lab(user, lab_id=lab.pk, institution_id=lab.institution_id)
            assert rule == (lab.pk in seen), (user.username, lab.name)
    assert lab_for_spend(world.lab_admin, world.lab.pk) == world.lab
    assert lab_for_spend(world.lab_admin, world.lab.pk).name == world.lab.name
    client = client_for(world.lab_admin)
    for lab in (world.other_lab, elsewhere):
        assert client.get(f"/spend/labs/{lab.pk}/").status_code == 404
    assert client.get(f"/spend/labs/{2**64}/").status_code == 404
