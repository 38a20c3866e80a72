"""The API's docs page (Swagger UI from vendored files) runs in Chromium under the site's
strict CSP, unchanged: no violation, no request to another origin, and a signed-in person
can try a call with their session."""

import pytest

from tests.core.test_csp_browser import RECORD_VIOLATIONS
from tests.fixtures_browser import login
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]


def test_docs_page_runs_under_the_csp_and_tries_a_call(browser, live_server, world):
    page = login(browser, live_server, world.lab_admin)
    page.context.add_init_script(RECORD_VIOLATIONS)
    errors, origins = [], set()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: origins.add(r.url.split("/")[2]))
    page.goto(f"{live_server.url}/api/v1/docs/")
    page.locator("#operations-labs-labs_list").wait_for()
    assert page.locator(".opblock").count() >= 25

    page.click("#operations-labs-labs_list .opblock-summary")
    page.click("#operations-labs-labs_list button.try-out__btn")
    page.click("#operations-labs-labs_list button.execute")
    status = page.locator(
        "#operations-labs-labs_list .live-responses-table tbody .response-col_status"
    )
    status.first.wait_for()
    assert status.first.inner_text().strip() == "200"

    violations = page.evaluate("window.__csp") + [e for e in errors if "Content Security" in e]
    assert violations == [], violations
    assert origins == {live_server.url.split("/")[2]}
