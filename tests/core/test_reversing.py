"""URLs reversed once per process (labgov/core/reversing.py): what Django's reverse() and
{% url %} give, for every argument, prefix and form of the tag."""

import pytest
from django.template import engines
from django.urls import NoReverseMatch, path, reverse, set_script_prefix

from labgov.core.reversing import CachedURLNode, url_for


@pytest.fixture
def prefix():
    """Restores the script prefix a test moved (it is the thread's, not the test's)."""
    yield set_script_prefix
    set_script_prefix("/")


def render(source: str, **context) -> str:
    return engines["django"].from_string(source).render(context)


def test_url_for_is_reverse_for_args_kwargs_and_none():
    assert url_for("home") == reverse("home") == "/"
    assert url_for("dashboard:lab", 7) == reverse("dashboard:lab", args=[7])
    assert url_for("dashboard:lab", pk=7) == reverse("dashboard:lab", kwargs={"pk": 7})
    assert url_for("dashboard:lab", 8) == "/spend/labs/8/"  # another argument, another link
    with pytest.raises(NoReverseMatch):
        url_for("dashboard:lab")
    with pytest.raises(NoReverseMatch):
        url_for("no-such-view")


def test_an_argument_that_cannot_be_a_key_is_reversed_each_time():
    class Unhashable(int):
        __hash__ = None

    assert url_for("dashboard:lab", Unhashable(9)) == "/spend/labs/9/"


def test_another_script_prefix_gets_its_own_links(prefix):
    """A link remembered under one prefix is never served under another (an installation
    behind /labgov/ would link out of itself)."""
    assert url_for("dashboard:lab", 3) == "/spend/labs/3/"
    assert render("{% url 'dashboard:me' %}") == "/spend/me/"
    prefix("/labgov/")
    assert url_for("dashboard:lab", 3) == "/labgov/spend/labs/3/"
    assert render("{% url 'dashboard:me' %}") == "/labgov/spend/me/"
    prefix("/")
    assert url_for("dashboard:lab", 3) == "/spend/labs/3/"


def test_another_url_conf_gets_its_own_links():
    """A link remembered under one URL conf is never served under another (a test's
    override_settings(ROOT_URLCONF=…), which makes Django build its resolver anew)."""
    from django.test import override_settings

    assert url_for("home") == "/"
    with override_settings(ROOT_URLCONF=__name__):
        assert url_for("home") == "/elsewhere/"
        assert render("{% url 'home' %}") == "/elsewhere/"
    assert url_for("home") == "/"
    assert render("{% url 'home' %}") == "/"


def test_every_templates_url_tag_is_the_cached_one_and_answers_as_djangos():
    template = engines["django"].from_string("{% url 'dashboard:lab' 5 %}")
    nodes = template.template.nodelist.get_nodes_by_type(CachedURLNode)
    assert len(nodes) == 1
    assert render("{% url 'dashboard:lab' pk %}", pk=5) == reverse("dashboard:lab", args=[5])
    assert render("{% url 'dashboard:lab' pk=pk %}", pk=6) == "/spend/labs/6/"
    assert render("{% url name pk %}", name="dashboard:lab", pk=4) == "/spend/labs/4/"
    # `as`: into the context, nothing written; a view that does not reverse gives "".
    assert render("{% url 'dashboard:lab' 5 as link %}[{{ link }}]") == "[/spend/labs/5/]"
    assert render("{% url 'no-such-view' as link %}[{{ link }}]") == "[]"
    with pytest.raises(NoReverseMatch):
        render("{% url 'no-such-view' %}")


def test_a_link_is_escaped_as_djangos_tag_escapes_it():
    """A stranger's text in a link's argument (a str path converter): what reverse() leaves
    unquoted (& and ') comes out escaped, as Django's own tag gives it; `as` keeps it raw
    for the template to escape where it is used."""
    from django.utils.html import conditional_escape

    action = "a&b'c\"><script>"
    raw = reverse("alerts:own_pod_action", args=[1, action])
    assert "&" in raw and "<" not in raw  # reverse quoted the rest
    tag = "{% url 'alerts:own_pod_action' 1 action %}"
    assert render(tag, action=action) == conditional_escape(raw)
    assert render(tag, action=action) == render(tag, action=action)  # the remembered one too
    assert render("{% url 'alerts:own_pod_action' 1 action as u %}{{ u }}", action=action) == (
        conditional_escape(raw)
    )
    assert render("{% autoescape off %}" + tag + "{% endautoescape %}", action=action) == raw


def _nowhere(request):  # pragma: no cover - only reversed, never called
    raise AssertionError


# The URL conf test_another_url_conf_gets_its_own_links switches to.
urlpatterns = [path("elsewhere/", _nowhere, name="home")]
