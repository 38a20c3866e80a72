"""Browser tests' fixtures: Debian's Chromium driven by Playwright, and logging a person in.
Loaded for the whole suite by tests/conftest.py; tests using them are marked `browser`."""

import os
import re

import pytest

# Debian's chromium-headless-shell: Chromium's headless build, without the desktop browser's
# user interface and services that a headless window still runs (the a11y sweep: 21 % less
# CPU per page than /usr/bin/chromium --headless). .ci/run installs both; Debian's full
# Chromium stands in where only it is installed.
HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM = HEADLESS_SHELL if os.path.exists(HEADLESS_SHELL) else "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Not among them: --disable-threaded-compositing. It took a quarter off Chromium's CPU per page
# load (20 loads: 2.1-2.3 against 2.9-3.1 CPU-s) only because headless then draws no frame at
# all: requestAnimationFrame, ResizeObserver and IntersectionObserver never fire (Chart.js
# sizes its canvas from a ResizeObserver), and Playwright's click, which waits for an element
# to be stable over two frames, times out.


def require_chromium() -> None:
    """Skip the test where no Chromium is installed, fail it where CI requires one."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("LABGOV_REQUIRE_SERVICES") == "1":
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but Debian's Chromium is not installed")
        pytest.skip(f"Debian's Chromium is not installed at {CHROMIUM}")


@pytest.fixture
def browser(monkeypatch):
    require_chromium()
    from django.db import connections
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # still plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        browser.close()
        # ORM calls made while Playwright's loop runs get their own connection; close it, or
        # it outlives the test database.
        connections.close_all()


def htmx_settled(page) -> None:
    """Wait until htmx has settled what it swapped in: new content is plain HTML until htmx
    processes it, in its settle step (20 ms after the swap, when it takes the `htmx-added`
    class off). A field changed or a link clicked before that is not htmx's yet: the change
    sends nothing, the click loads the whole page."""
    busy = ".htmx-added, .htmx-settling, .htmx-swapping, .htmx-request"
    page.wait_for_function("busy => !document.querySelector(busy)", arg=busy)


def login(browser, live_server, user):
    """A new page logged in as `user` (every test user's password is "pw")."""
    page = browser.new_context().new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", "pw")
    page.click("button:text('Log in')")
    page.wait_for_url(re.compile(r".*/$"))
    return page
