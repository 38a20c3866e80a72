"""Pages work under the Content-Security-Policy in a real browser (Debian's Chromium): no
violation is reported, the confirmation that used to be an inline onsubmit still asks, and
htmx (which would otherwise inject its own style element) loads its fragments."""

import pytest

from labgov.accounts.models import Membership, Role
from tests.fixtures_browser import login
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


@pytest.fixture
def page(browser, live_server, world):
    page = login(browser, live_server, world.inst_admin)
    page.context.add_init_script(RECORD_VIOLATIONS)
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    return page


def _violations(page) -> list[str]:
    return page.evaluate("window.__csp") + [e for e in page.errors if "Content Security" in e]


def test_pages_report_no_violation(page, live_server, world):
    for path in (
        "/",
        f"/spend/labs/{world.lab.pk}/",
        "/spend/institution/",
        "/funding/",
        "/alerts/",
        "/provisioning/new/",
        "/notifications/",
    ):
        page.goto(f"{live_server.url}{path}")
        # The menu's badges are htmx fragments loaded after the page.
        page.locator("#unread-badge[title]").wait_for(state="attached")
        page.locator("#alert-badge[title]").wait_for(state="attached")
        assert _violations(page) == [], path
        assert page.evaluate("document.querySelectorAll('style').length") == 0, path


def test_ending_a_role_still_asks_first(page, live_server, world):
    finance = Membership.objects.get(user=world.finance, role=Role.FINANCE)
    page.goto(f"{live_server.url}/institution/")
    row = page.locator("tr", has_text=world.finance.username)
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="End role").click()
    page.wait_for_timeout(300)
    finance.refresh_from_db()
    assert finance.end_date is None
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        row.get_by_role("button", name="End role").click()
    finance.refresh_from_db()
    assert finance.end_date is not None
    assert _violations(page) == []
