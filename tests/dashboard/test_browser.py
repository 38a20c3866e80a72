"""The lab dashboard in a real browser (Debian's Chromium through Playwright): the charts are
drawn, and sorting and a new date range update the page in place, with the URL following."""

import datetime as dt
import re

import pytest

from tests.dashboard.conftest import TODAY
from tests.fixtures_browser import htmx_settled, login
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]


@pytest.fixture
def page(browser, live_server, world, spend):
    return login(browser, live_server, world.lab_admin)


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
    # The table's default order (-monthly) already marks a column, so a wait for any mark
    # is met at once: wait for the Resource column's own, which only the sorted table has.
    resource = page.locator("#table-storage th", has=page.locator("a:text('Resource')"))
    resource.locator(".sort").wait_for()
    assert page.locator(storage).all_inner_texts() == ["forgotten", "old-checkpoints"]
    htmx_settled(page)  # the link just swapped in must be htmx's before it is clicked
    page.click("#table-storage th a:text('Resource')")
    page.wait_for_url(re.compile(r".*storage_sort=-name"))
    page.wait_for_function(
        "() => document.querySelector('#table-storage tbody td').textContent === 'old-checkpoints'"
    )
    # The range form came with the swap: changed before htmx settled it, it sent nothing (the
    # test waited 15 s for a URL that never came, in about one run in three after other tests).
    htmx_settled(page)

    first = (TODAY - dt.timedelta(days=2)).isoformat()
    page.fill("input[name=start]", first)
    page.dispatch_event("input[name=start]", "change")
    page.wait_for_url(
        re.compile(rf".*start={first}.*storage_sort=-name|.*storage_sort=-name.*start={first}")
    )
    page.get_by_text("Spend 16 Mar 2026 – 18 Mar 2026").wait_for()
    assert page.evaluate("window.notReloaded") is True
    # Drawn again after the swap (htmx settles a moment after the new text is in).
    page.wait_for_function(
        "() => !!Chart.getChart(document.querySelector('canvas[data-chart=chart-daily]'))"
    )
    assert page.locator(storage).first.inner_text() == "old-checkpoints"
