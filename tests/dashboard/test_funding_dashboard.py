"""The funding-source dashboard against known rollups."""

import csv
import datetime as dt
import io
from decimal import Decimal

from django.urls import reverse

from labgov.dashboard.forecast import Outlook
from tests.dashboard.conftest import TODAY, count_queries, grow, past_rate_only

D = Decimal


def _url(world, **params):
    from urllib.parse import urlencode

    url = reverse("dashboard:funding", args=[world.funding_source.pk])
    return f"{url}?{urlencode(params)}" if params else url


def _cells(table):
    return [row.cells for row in table.rows]


def test_figures_burn_rate_and_forecast(world, spend, client_for):
    past_rate_only(spend)
    data = client_for(world.lab_admin).get(_url(world)).context["data"]
    fs = data.fs
    assert (fs.amount_usd, fs.committed_usd, fs.spent_usd) == (D("10000"), 0, D("110"))
    assert fs.remaining_usd == D("9890")
    f = data.forecast
    assert f.burn_rate_usd == D("11")  # 7 days of $11 ÷ 7
    assert f.outlook == Outlook.LASTS
    assert f.left_at_end_usd == D("9890") - D("11") * 266
    # The member's allocation: $890 left at $11/day runs out in 80 whole days.
    [allocation] = data.tables["allocations"].rows
    assert allocation.cells[5] == D("890") and allocation.cells[6] == D("11")
    assert allocation.cells[7] == TODAY + dt.timedelta(days=80)
    assert allocation.cells[8].startswith("Runs out 6 June 2026, 6 months before it ends")


def test_page_states_the_definitions(world, spend, client_for):
    past_rate_only(spend)
    page = client_for(world.lab_admin).get(_url(world)).content.decode()
    assert "the spend of the last 7 full UTC days (11 Mar – 17 Mar) ÷ 7" in page
    assert "today + remaining ÷ burn rate" in page
    assert "Lasts past its end (8 December 2026) at this rate, with $6,964.00 left" in page


def test_burndown_chart_lines(world, spend, client_for):
    past_rate_only(spend)
    chart = client_for(world.lab_admin).get(_url(world)).context["data"].burndown_chart
    labels = chart["labels"]
    budget, actual, projected = (d["data"] for d in chart["datasets"])
    assert labels[0] == world.funding_source.start_date.isoformat()
    assert labels[-1] == world.funding_source.end_date.isoformat()
    assert budget[0] == D("10000.00") and budget[-1] == D("0.00")
    assert all(v is None for v in budget[1:-1])
    today = labels.index(TODAY.isoformat())
    assert actual[today - 11] == D("10000.00")
    assert actual[today - 1] == D("9890.00")  # after ten days of $11
    assert actual[today] == D("9890.00") and actual[today + 1] is None
    assert projected[today] == D("9890.00")
    assert projected[-1] == D("6964.00")  # $11/day through the end date


def test_categories_people_running_and_idle_storage(world, spend, client_for):
    data = client_for(world.lab_admin).get(_url(world)).context["data"]
    assert _cells(data.tables["categories"]) == [
        ["GPU compute", D("100"), D("100") * 100 / 110],
        ["Pod disk (container + volume)", D("10"), D("10") * 100 / 110],
    ]
    [person] = _cells(data.tables["people"])
    assert person[0] == str(world.member) and person[-2] == D("110")
    assert [r.cells[0] for r in data.tables["running"].rows] == ["train-a100"]
    assert data.running_rate_usd == D("1.89")
    storage = {r.cells[0]: r.cells[-1] for r in data.tables["storage"].rows}
    # The mounted network volume is in use; the other one and the stopped pod's disk bill idle.
    assert storage == {"forgotten": D("40.00"), "old-checkpoints": D("35.00")}
    assert data.idle_monthly_usd == D("75.00")


def test_date_range_filters_the_breakdown(world, spend, client_for):
    first, last = TODAY - dt.timedelta(days=3), TODAY - dt.timedelta(days=1)
    data = (
        client_for(world.lab_admin)
        .get(_url(world, start=first.isoformat(), end=last.isoformat()))
        .context["data"]
    )
    assert (data.period.first, data.period.last) == (first, last)
    assert {r.cells[0]: r.cells[1] for r in data.tables["categories"].rows} == {
        "GPU compute": D("30"),
        "Pod disk (container + volume)": D("3"),
    }


def test_bad_dates_fall_back_to_the_default_with_a_message(world, spend, client_for):
    response = client_for(world.lab_admin).get(_url(world, start="yesterday"))
    assert response.status_code == 200
    assert "Dates are YYYY-MM-DD." in response.content.decode()
    response = client_for(world.lab_admin).get(_url(world, start="2026-03-10", end="2026-03-01"))
    assert "The start comes after the end." in response.content.decode()


def test_sorting_and_the_htmx_fragment(world, spend, client_for):
    client = client_for(world.lab_admin)
    response = client.get(_url(world, storage_sort="name"), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "<html" not in body and 'id="dash-body"' in body
    assert "HX-Request" in response["Vary"]
    names = [r.cells[0] for r in response.context["data"].tables["storage"].rows]
    assert names == ["forgotten", "old-checkpoints"]
    names = [
        r.cells[0]
        for r in client.get(_url(world, storage_sort="-name"))
        .context["data"]
        .tables["storage"]
        .rows
    ]
    assert names == ["old-checkpoints", "forgotten"]
    # Every link keeps the filters: the header links and the CSV link carry the range.
    page = client.get(_url(world, start="2026-03-10")).content.decode()
    assert "?start=2026-03-10&amp;format=csv&amp;table=categories" in page
    assert "?start=2026-03-10&amp;categories_sort=category" in page


def test_csv_downloads_with_the_same_filters(world, spend, client_for):
    response = client_for(world.lab_admin).get(
        _url(world, start="2026-03-15", end="2026-03-17", format="csv", table="categories")
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == (
        f'attachment; filename="labgov-funding-{world.funding_source.pk}-categories-'
        '20260315-20260317.csv"'
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows == [
        ["Category", "Spend", "Share"],
        ["GPU compute", "30.00", "90.9"],
        ["Pod disk (container + volume)", "3.00", "9.1"],
        ["Total", "33.00", "100.0"],
    ]


def test_csv_money_is_rounded_half_even_to_cents(world, spend, client_for):
    from tests.dashboard.conftest import add_spend

    add_spend(
        spend.account,
        TODAY - dt.timedelta(days=1),
        "0.005",
        allocation=world.allocation,
        category="network_standard",
    )
    add_spend(
        spend.account,
        TODAY - dt.timedelta(days=1),
        "0.015",
        allocation=world.allocation,
        category="cpu_compute",
    )
    response = client_for(world.lab_admin).get(
        _url(world, start="2026-03-17", end="2026-03-17", format="csv", table="categories")
    )
    rows = {r[0]: r[1] for r in csv.reader(io.StringIO(response.content.decode()))}
    assert rows["Network storage (standard)"] == "0.00"  # 0.005 → 0.00 (half to even)
    assert rows["CPU compute"] == "0.02"  # 0.015 → 0.02


def test_unknown_csv_table_is_404(world, spend, client_for):
    response = client_for(world.lab_admin).get(_url(world, format="csv", table="nope"))
    assert response.status_code == 404


def test_query_count_is_pinned_and_independent_of_data_size(world, spend, client_for):
    client = client_for(world.lab_admin)
    small, _ = count_queries(client, _url(world))
    grow(world, spend, 10)
    large, response = count_queries(client, _url(world))
    # session, user, scope; may the person see it (asked before the page cache, which is cold
    # here); the funding source with its figures; its allocations with theirs;
    # spend per day; spend per category and allocation in the range; the burn window per
    # allocation; resources running, billing idle or costing money now per allocation (the
    # tables, and the forecasts' second rate, including storage the idle table leaves out),
    # in one query.
    assert small == large == 10
    assert len(response.context["data"].tables["allocations"].rows) == 21
