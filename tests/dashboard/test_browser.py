"""The lab dashboard in a real browser (Debian's Chromium through Playwright): the charts are
drawn, and sorting and a new date range update the page in place, with the URL following."""

import datetime as dt
import re

import pytest

from tests.dashboard.conftest import TODAY
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture
from tests.provisioning.test_browser import ARGS, CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]


@pytest.fixture
def page(monkeypatch, live_server, world, spend):
    import os

    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium")
    from django.db import connections
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_context().new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", world.lab_admin.username)
        page.fill("input[name=password]", "pw")
        page.click("button:text('Log in')")
        page.wait_for_url(re.compile(r".*/$"))
        yield page
        browser.close()
        connections.close_all()


def _drawn(page, chart_id: str) -> bool:
    return page.evaluate(
        "id => !!Chart.getChart(document.querySelector(`canvas[data-chart=${id}]`))", chart_id
    )


def test_sorting_and_dates_update_the_page_in_place(page, live_server, world):
    page.goto(f"{live_server.url}/spend/labs/{world.lab.pk}/")
    page.wait_for_function("() => typeof Chart !== 'undefined'")
    assert _drawn(page, "chart-daily") and _drawn(page, "chart-categories")
    storage = "#table-storage tbody tr td:first-child"
    assert page.locator(storage).all_inner_texts() == ["forgotten", "old-checkpoints"]
    # Mark the document: a full reload would lose the mark.
    page.evaluate("window.notReloaded = true")

    page.click("#table-storage th a:text('Resource')")
    page.wait_for_url(re.compile(r".*storage_sort=name"))
    page.locator("#table-storage th .sort").wait_for()
    assert page.locator(storage).all_inner_texts() == ["forgotten", "old-checkpoints"]
    page.click("#table-storage th a:text('Resource')")
    page.wait_for_url(re.compile(r".*storage_sort=-name"))
    page.wait_for_function(
        "() => document.querySelector('#table-storage tbody td').textContent === 'old-checkpoints'"
    )

    first = (TODAY - dt.timedelta(days=2)).isoformat()
    page.fill("input[name=start]", first)
    page.dispatch_event("input[name=start]", "change")
    page.wait_for_url(
        re.compile(rf".*start={first}.*storage_sort=-name|.*storage_sort=-name.*start={first}")
    )
    page.get_by_text("Spend 16 Mar 2026 – 18 Mar 2026").wait_for()
    assert page.evaluate("window.notReloaded") is True
    assert _drawn(page, "chart-daily")  # drawn again after the swap
    assert page.locator(storage).first.inner_text() == "old-checkpoints"
