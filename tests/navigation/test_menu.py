"""The menu shows a person only the pages they may open, and says which page they are on;
a page closed to their role says why in words that fit."""

import re

import pytest
from django.urls import reverse

from labgov.navigation.menu import MENU, Entry

ROLES = ["inst_admin", "finance", "lab_admin", "member", "outsider"]


def _menu_links(html: str) -> list[str]:
    nav = html.split('<nav id="menu"')[1].split("</nav>")[0]
    return re.findall(r'<a href="([^"]+)"', nav)


@pytest.mark.parametrize("role", ROLES)
def test_every_menu_entry_opens_for_the_person_shown_it(world, client_for, role):
    client = client_for(getattr(world, role))
    links = _menu_links(client.get(reverse("home")).content.decode())
    assert links[0] == "/"
    for url in links:
        assert client.get(url).status_code == 200, (role, url)


def test_a_member_is_not_shown_pages_of_other_roles(world, client_for):
    links = _menu_links(client_for(world.member).get(reverse("home")).content.decode())
    for closed in ("accounts:lab_list", "runpod:unattributed", "provisioning:review", "audit"):
        assert reverse(closed) not in links
    assert reverse("dashboard:me") in links


def test_the_current_page_is_marked_once(world, client_for):
    html = client_for(world.lab_admin).get(reverse("provisioning:review")).content.decode()
    nav = html.split('<nav id="menu"')[1].split("</nav>")[0]
    assert nav.count('aria-current="page"') == 1
    assert f'<a href="{reverse("provisioning:review")}" aria-current="page">Review' in nav


def test_a_new_page_is_one_entry(world, client_for, monkeypatch):
    monkeypatch.setattr(
        "labgov.navigation.menu.MENU",
        [*MENU, Entry("Audit again", "audit", lambda scope, user: bool(scope.money_institutions))],
    )
    assert "Audit again" in client_for(world.finance).get("/").content.decode()
    assert "Audit again" not in client_for(world.member).get("/").content.decode()


def test_a_page_closed_to_a_role_says_so_in_its_words(world, client_for):
    response = client_for(world.member).get(reverse("accounts:lab_detail", args=[world.lab.pk]))
    assert response.status_code == 403
    text = response.content.decode()
    assert "You can see this" not in text
    assert "for its lab admins, finance and institution admins" in text
    response = client_for(world.member).get(reverse("runpod:unattributed"))
    assert "All spend is attributed" not in response.content.decode()
    assert "your own resources are under Resources" in response.content.decode()


def test_a_member_funding_page_lists_their_allocations(world, client_for):
    text = client_for(world.member).get(reverse("funding:list")).content.decode()
    assert "No funding sources match" not in text
    assert "My allocations" in text
    assert world.allocation.funding_source.name in text


# The menu's loop as base.html had it: menu_html must give the very same links.
_TEMPLATE_LOOP = (
    '{% for item in menu %}<a href="{{ item.url }}"{% if item.current %} aria-current="page"'
    '{% endif %}>{{ item.label }}{% if item.badge_id %} <span id="{{ item.badge_id }}" '
    'hx-get="{{ item.badge_url }}" hx-trigger="load" hx-swap="outerHTML"></span>{% endif %}'
    "</a>\n      {% endfor %}"
)


@pytest.mark.parametrize("path", ["/", "/provisioning/review/", "/alerts/", "/nowhere/"])
def test_menu_html_is_what_the_templates_loop_gave(world, rf, path):
    from django.template import engines

    from labgov.navigation.menu import menu_for, menu_html

    loop = engines["django"].from_string(_TEMPLATE_LOOP)
    for role in ROLES:
        request = rf.get(path)
        request.user = getattr(world, role)
        items = menu_for(request)
        assert menu_html(items) == loop.render({"menu": items}), (role, path)


def test_menu_text_is_escaped(world, client_for, monkeypatch):
    """Labels and links are escaped as a template would escape them."""
    monkeypatch.setattr(
        "labgov.navigation.menu.MENU", [*MENU, Entry("<b>\"Odd\" & 'odd'</b>", "audit")]
    )
    html = client_for(world.member).get("/").content.decode()
    assert "<b>" not in html.split('<nav id="menu"')[1].split("</nav>")[0]
    assert "&lt;b&gt;&quot;Odd&quot; &amp; &#x27;odd&#x27;&lt;/b&gt;" in html
