"""`make run` (DEBUG on) serves labgov's own 404 and 500 pages, not Django's technical ones;
htmx restoring a page from history gets the whole page, not its fragment; a chart's figures
are there as a table too."""

import logging

import pytest
from django.test import override_settings
from django.urls import reverse

from labgov.dashboard.templatetags.dashboard import chart_table


@override_settings(DEBUG=True)
def test_debug_serves_the_real_404_page(world, client_for):
    client = client_for(world.member)
    for url in ("/no-such-page/", reverse("funding:detail", args=[world.other_funding_source.pk])):
        response = client.get(url)
        assert response.status_code == 404
        text = response.content.decode()
        assert "There is nothing here, or it is not yours to see." in text
        assert "Using the URLconf" not in text and "technical" not in text.lower()


@override_settings(DEBUG=True)
def test_debug_still_adds_the_slash(world, client_for):
    response = client_for(world.member).get("/funding")
    assert response.status_code == 301 and response.url == "/funding/"


@override_settings(DEBUG=True)
def test_debug_serves_the_real_500_page_and_logs_the_traceback(
    world, client_for, monkeypatch, caplog
):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("labgov.funding.views.funding_source_list_for_user", broken)
    client = client_for(world.member)
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get(reverse("funding:list"))
    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()
    assert "boom" not in response.content.decode()
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)


def test_history_restore_gets_the_whole_page(world, client_for):
    client = client_for(world.finance)
    url = reverse("funding:list") + "?q=Grant"
    fragment = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment
    page = client.get(
        url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true"
    ).content.decode()
    assert "<html" in page and 'id="funding-table"' in page


@pytest.mark.parametrize("n", [3, 900])
def test_a_chart_table_keeps_every_point_or_a_sample_with_the_forecast(n):
    spec = {
        "labels": [f"d{i}" for i in range(n)],
        "datasets": [
            {"label": "Budget", "data": ["10.00"] * n},
            {"label": "Forecast", "data": [None] * (n - 1) + ["1.00"]},
        ],
    }
    table = chart_table(spec)
    assert table["headers"] == ["Budget", "Forecast"]
    labels = [label for label, _values in table["rows"]]
    assert labels[0] == "d0" and labels[-1] == f"d{n - 1}"
    assert len(labels) == n if n <= 31 else len(labels) <= 32
    assert table["rows"][-1][1] == ["10.00", "1.00"]
