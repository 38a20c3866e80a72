"""Issue 9: a Content-Security-Policy on every response that allows no inline script, no eval
and no inline style; and no template that would need them."""

import re
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

ROOT = Path(__file__).resolve().parents[2]

# <script> without src, unless it is data (json_script) rather than code.
INLINE_SCRIPT = re.compile(
    r"<script\b(?![^>]*\bsrc=)(?![^>]*\btype=[\"']application/(?:ld\+)?json[\"'])[^>]*>", re.I
)
# onclick=, onsubmit=, … and htmx's hx-on attributes are inline script too.
EVENT_HANDLER = re.compile(r"<[^>]*\s(?:on[a-z]+|hx-on[:\-][\w:\-]*)\s*=", re.I)
STYLE = re.compile(r"<style\b|<[^>]*\sstyle\s*=", re.I)
JS_URL = re.compile(r"""(?:href|src|action)\s*=\s*["']?\s*javascript:""", re.I)


def _policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


def _assert_strict(response, where: str) -> None:
    assert "Content-Security-Policy" in response, where
    policy = _policy(response)
    for directive in ("script-src", "style-src"):
        sources = policy.get(directive, policy["default-src"])
        assert "'unsafe-inline'" not in sources and "'unsafe-eval'" not in sources, where
        assert "*" not in sources and "data:" not in sources, where
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]


def _assert_no_inline_code(html: str, where: str) -> None:
    for pattern in (INLINE_SCRIPT, EVENT_HANDLER, STYLE, JS_URL):
        found = pattern.search(html)
        assert found is None, f"{where}: {found and found[0]}"


def _routes(patterns=None, namespace="", converters=None):
    """(name, kwargs) for every named URL in the URL conf, int parameters filled with 1."""
    for p in get_resolver().url_patterns if patterns is None else patterns:
        found = {**(converters or {}), **p.pattern.converters}
        if isinstance(p, URLResolver):
            ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
            yield from _routes(p.url_patterns, ns, found)
        elif isinstance(p, URLPattern) and p.name:
            yield (
                namespace + p.name,
                {k: 1 if "Int" in type(c).__name__ else "x" for k, c in found.items()},
            )


ADMIN_PAGES = {"admin:index", "admin:login", "admin:password_change"}
ROUTES = sorted(
    {(name, tuple(kw.items())) for name, kw in _routes() if not name.startswith("admin:")}
    | {(name, ()) for name in ADMIN_PAGES}
)


@pytest.mark.parametrize(("name", "kwargs"), ROUTES, ids=[r[0] for r in ROUTES])
def test_every_page_has_a_strict_policy_and_no_inline_code(world, client, name, kwargs):
    """Every URL of the URL conf, as a superuser (pages out of scope answer 404 or 405: they
    carry the header too)."""
    world.inst_admin.is_staff = world.inst_admin.is_superuser = True
    world.inst_admin.save()
    client.force_login(world.inst_admin)
    try:
        url = reverse(name, kwargs=dict(kwargs))
    except Exception:  # noqa: BLE001 - a converter that takes neither 1 nor "x"
        pytest.fail(f"cannot build a URL for {name}")
    response = client.get(url)
    _assert_strict(response, url)
    if response.get("Content-Type", "").startswith("text/html"):
        _assert_no_inline_code(response.content.decode(), url)


def test_pages_with_content_have_no_inline_code(world, client_for):
    """Pages that render lists, forms and the menu, for each kind of person."""
    pages = [
        reverse("home"),
        reverse("dashboard:lab", args=[world.lab.pk]),
        reverse("dashboard:institution"),
        reverse("accounts:institution"),
        reverse("accounts:lab_detail", args=[world.lab.pk]),
        reverse("funding:list"),
        reverse("provisioning:new"),
        reverse("alerts:list"),
    ]
    for user in (world.inst_admin, world.lab_admin, world.finance, world.member):
        client = client_for(user)
        for url in pages:
            response = client.get(url)
            _assert_strict(response, url)
            if response.status_code == 200:
                _assert_no_inline_code(response.content.decode(), f"{url} as {user}")


def test_the_login_page_and_a_404_for_anyone(client):
    for url in (reverse("login"), "/no-such-page/"):
        response = client.get(url)
        _assert_strict(response, url)
        _assert_no_inline_code(response.content.decode(), url)


def test_no_template_has_inline_script_or_style():
    """json_script's data blocks come from the filter, not the template text, so any <script>
    without src in a template is code the policy would block."""
    templates = list((ROOT / "templates").rglob("*.html")) + list(
        (ROOT / "labgov").rglob("templates/**/*.html")
    )
    assert templates
    offenders = [
        f"{path.relative_to(ROOT)}: {match[0][:80]}"
        for path in templates
        for pattern in (INLINE_SCRIPT, EVENT_HANDLER, STYLE, JS_URL)
        for match in pattern.finditer(path.read_text())
    ]
    assert offenders == []
