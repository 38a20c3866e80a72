"""The menu: one list of entries, each with who may open it, so a person is shown only the
pages they may open and a new page is one line here (base.html renders whatever this holds).

`show` receives the person's Scope (labgov/accounts/access.py) and the user; an entry shown to
someone must not answer them with a 403 or a 404."""

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from django.utils.safestring import mark_safe

from labgov.accounts.access import Scope, scope_for
from labgov.core.reversing import url_for


@dataclass(frozen=True)
class Entry:
    label: str
    url_name: str
    show: Callable[[Scope, object], bool] = lambda scope, user: True
    # An htmx fragment loaded after the page (an unread count): the element's id and url name.
    badge: tuple[str, str] | None = None


def _money(scope, user) -> bool:
    return bool(scope.money_institutions)


def _manages_labs(scope, user) -> bool:
    return bool(scope.managed_labs)


def _lab_or_money(scope, user) -> bool:
    return bool(scope.managed_labs or scope.money_institutions)


MENU: list[Entry] = [
    Entry("Home", "home"),
    Entry("Funding", "funding:list"),
    Entry("Spend", "dashboard:institution", _money),
    Entry("My spend", "dashboard:me", lambda s, u: not s.money_institutions),
    Entry("Resources", "runpod:resources"),
    Entry("Alerts", "alerts:list", badge=("alert-badge", "alerts:badge")),
    Entry("Requests", "provisioning:list"),
    Entry("Review", "provisioning:review", _manages_labs),
    Entry(
        "Policies",
        "provisioning:policies",
        lambda s, _: bool(s.managed_labs or s.admin_institutions),
    ),
    Entry(
        "Unattributed",
        "runpod:unattributed",
        _lab_or_money,
    ),
    Entry("Retention", "retention:list"),
    Entry(
        "Invoices",
        "invoicing:periods",
        lambda s, u: bool(s.money_institutions or s.admin_labs),
    ),
    Entry(
        "My invoices",
        "invoicing:mine",
        lambda s, u: not (s.money_institutions or s.admin_labs),
    ),
    Entry(
        "Transfers",
        "transfers:list",
        lambda s, u: bool(s.admin_labs or s.money_institutions),
    ),
    Entry("Labs", "accounts:lab_list", _lab_or_money),
    Entry("Runpod", "runpod:account_list", lambda s, u: bool(s.money_institutions or s.admin_labs)),
    Entry("Audit log", "audit", _money),
    Entry("Admin", "admin:index", lambda s, u: u.is_staff),
    Entry("Notifications", "notifications:list", badge=("unread-badge", "notifications:badge")),
]


@dataclass(frozen=True)
class Item:
    label: str
    url: str
    current: bool
    badge_id: str | None
    badge_url: str | None


def menu_for(request) -> list[Item]:
    user = request.user
    if not user.is_authenticated:
        return []
    scope = scope_for(user)
    shown = [(entry, url_for(entry.url_name)) for entry in MENU if entry.show(scope, user)]
    # The current page is the entry with the longest URL the path starts with (Review's
    # /provisioning/review/ rather than Requests' /provisioning/).
    matching = [url for _entry, url in shown if request.path.startswith(url) and url != "/"]
    current = max(matching, key=len) if matching else ("/" if request.path == "/" else None)
    items = []
    for entry, url in shown:
        badge_id, badge_url = (
            (entry.badge[0], url_for(entry.badge[1])) if entry.badge else (None, None)
        )
        items.append(Item(entry.label, url, url == current, badge_id, badge_url))
    return items


def menu_html(items: list[Item]) -> str:
    """The menu's links, as base.html shows them. Built here, not by a template loop: every
    page renders the menu, and its loop of ~16 entries with their conditions took about
    0.4 ms of each page's time (a tenth of the student's page); this takes a twentieth of
    that. Every text is escaped."""
    out = []
    for item in items:
        current = ' aria-current="page"' if item.current else ""
        out.append(f'<a href="{escape(item.url)}"{current}>{escape(item.label)}')
        if item.badge_id:
            out.append(
                f' <span id="{escape(item.badge_id)}" hx-get="{escape(item.badge_url or "")}" '
                'hx-trigger="load" hx-swap="outerHTML"></span>'
            )
        out.append("</a>\n      ")
    return mark_safe("".join(out))  # noqa: S308 - assembled from escaped parts only


def menu(request):
    from django.utils.functional import SimpleLazyObject

    return {"menu_html": SimpleLazyObject(lambda: menu_html(menu_for(request)))}
