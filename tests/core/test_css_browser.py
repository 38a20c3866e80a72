"""labgov.css in a real browser, on a page of its own (no server needed)."""

from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "static" / "css" / "labgov.css"

pytestmark = pytest.mark.browser


def test_an_empty_menu_badge_leaves_no_gap(browser):
    """A member with nothing to count sees "Alerts", not "Alerts" and an empty pill."""
    page = browser.new_page()
    page.set_content(
        f"<style>{CSS.read_text()}</style><nav id='menu'>"
        "<a id='empty' href='#'>Alerts <span class='badge' title='alerts'></span></a>"
        "<a id='counted' href='#'>Notifications <span class='badge info'>3</span></a></nav>"
    )
    assert page.locator("#empty .badge").bounding_box() is None  # not drawn at all
    counted = page.locator("#counted .badge").bounding_box()
    assert counted is not None and counted["width"] > 0
    page.close()


def test_reduced_motion_turns_the_loading_fade_off(browser):
    """htmx fades what it is loading; who asks for reduced motion gets no transition."""
    html = f"<style>{CSS.read_text()}</style><div class='htmx-request' id='x'>loading</div>"
    durations = {}
    for motion in ("no-preference", "reduce"):
        context = browser.new_context(reduced_motion=motion)
        page = context.new_page()
        page.set_content(html)
        durations[motion] = page.evaluate("getComputedStyle(x).transitionDuration")
        context.close()
    assert durations == {"no-preference": "0.2s", "reduce": "0s"}
