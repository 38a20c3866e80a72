"""The dashboards' page cache (labgov/dashboard/page_cache.py): a repeated request is served
from it; every write, governance or sync, shows on the very next request; no person ever
receives another's page; refusals are never cached; forms on a cached page still post."""

import datetime as dt
import re
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labgov.accounts.models import Membership, Role
from labgov.accounts.services import membership_end
from labgov.funding.models import Allocation
from labgov.runpod.services import resource_assign
from labgov.runpod.sync import account_sync
from tests.dashboard.conftest import NOW, TODAY
from tests.factories import AllocationFactory, MembershipFactory

ME = reverse("dashboard:me")


def _lab_url(world) -> str:
    return reverse("dashboard:lab", args=[world.lab.pk])


def _main(response) -> str:
    """The page below the menu (the menu's CSRF token differs on every render)."""
    html = response.content.decode()
    return html[html.index("<main") :]


def _computed(response) -> bool:
    """Whether this response was rendered (a page taken from the cache renders no template)."""
    return response.context is not None


def _get(client, url, **extra):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, **extra)
    return response, len(queries)


def test_a_repeated_request_is_served_from_the_cache(world, spend, client_for):
    client = client_for(world.lab_admin)
    first, computed = _get(client, _lab_url(world))
    second, cached = _get(client, _lab_url(world))
    assert first.status_code == second.status_code == 200
    assert _main(second) == _main(first)
    # Only what the view asks before the cache: the session, the person, their roles, and
    # may they see this lab; none of the page's own reads.
    assert cached == 4 < computed
    assert not _computed(second)  # nothing was computed for it


def test_the_student_page_repeats_from_the_cache_too_and_as_its_fragment(world, spend, client_for):
    client = client_for(world.member)
    first, _ = _get(client, ME)
    second, cached = _get(client, ME)
    assert _main(second) == _main(first)
    assert cached == 2  # session and person: the menu comes with the cached page
    # The htmx fragment is another entry: it is not the whole page.
    fragment, _ = _get(client, ME, HTTP_HX_REQUEST="true")
    assert fragment.content.decode().lstrip().startswith('<div id="dash-body">')
    again, cached = _get(client, ME, HTTP_HX_REQUEST="true")
    assert again.content == fragment.content
    assert cached == 2  # the fragment has no menu: session and person only


def test_filters_and_sorting_are_part_of_the_key(world, spend, client_for):
    client = client_for(world.lab_admin)
    client.get(_lab_url(world))
    week = client.get(_lab_url(world), {"start": str(TODAY - dt.timedelta(days=6))})
    assert week.context["data"].period.first == TODAY - dt.timedelta(days=6)
    assert _computed(client.get(_lab_url(world), {"people_sort": "-total"}))


def test_an_allocation_cap_change_shows_on_the_next_request(world, spend, client_for):
    client = client_for(world.member)
    assert "$1,000.00" in client.get(ME).content.decode()
    client.get(ME)  # cached now
    client_for(world.lab_admin)
    response = client.post(
        reverse("funding:allocation_edit", args=[world.allocation.pk]),
        {
            "user": world.member.pk,
            "project_name": world.allocation.project_name,
            "cap_usd": "4321.00",
            "start_date": world.allocation.start_date,
            "end_date": world.allocation.end_date,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Allocation.objects.get(pk=world.allocation.pk).cap_usd == Decimal("4321.00")
    client_for(world.member)
    page = client.get(ME).content.decode()
    assert "$4,321.00" in page and "$1,000.00" not in page


def test_a_reattribution_shows_on_the_next_request(world, spend, client_for):
    other = AllocationFactory(
        funding_source=world.funding_source,
        user=MembershipFactory(role=Role.MEMBER, lab=world.lab).user,
        start_date=world.allocation.start_date,
        end_date=world.allocation.end_date,
    )
    client = client_for(world.lab_admin)
    before = client.get(_lab_url(world)).context["data"].tables["running"]
    assert client.get(_lab_url(world)).content  # cached
    resource_assign(actor=world.lab_admin, resource=spend.running, allocation=other)
    after = client.get(_lab_url(world))
    assert _computed(after)  # computed again, not the cached page
    assert after.context["data"].tables["running"].rows != before.rows
    assert other.user.get_full_name() in after.content.decode()


def test_a_sync_shows_on_the_next_request(world, sim, sim_account, fast_clients, client_for):
    with time_machine.travel(sim.state.now, tick=False):
        client = client_for(world.finance)
        url = reverse("dashboard:institution")
        before = client.get(url)
        assert before.context["data"].total_usd == 0
        assert not _computed(client.get(url))  # served from the cache
        account_sync(account_id=sim_account.pk, client_factory=fast_clients)
        after = client.get(url)
        assert after.context["data"].total_usd > 0
        assert after.content != before.content


def _tag(allocation) -> str:
    return f"LABGOV_ALLOCATION={allocation.tag_code}"


@pytest.mark.parametrize("htmx", [False, True])
def test_a_person_never_receives_another_persons_page(world, spend, client_for, htmx):
    colleague = MembershipFactory(role=Role.MEMBER, lab=world.lab).user
    theirs = AllocationFactory(
        funding_source=world.funding_source,
        user=colleague,
        cap_usd=Decimal("777.00"),
        start_date=world.allocation.start_date,
        end_date=world.allocation.end_date,
    )
    extra = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    client = client_for(colleague)
    warm = client.get(ME, **extra)
    assert "$777.00" in warm.content.decode()
    if not htmx:
        assert _tag(theirs) in warm.content.decode()
    assert not _computed(client.get(ME, **extra))  # the colleague's page is cached

    client = client_for(world.member)
    mine = client.get(ME, **extra).content.decode()
    assert "$777.00" not in mine and _tag(theirs) not in mine
    assert "$1,000.00" in mine
    if not htmx:
        assert _tag(world.allocation) in mine


def test_a_revoked_person_loses_the_cached_page_at_once(world, spend, client_for):
    client = client_for(world.lab_admin)
    assert client.get(_lab_url(world)).status_code == 200
    assert client.get(_lab_url(world)).status_code == 200  # cached
    membership = Membership.objects.get(user=world.lab_admin, lab=world.lab)
    membership_end(actor=world.inst_admin, membership=membership, end_date=TODAY - dt.timedelta(1))
    response = client.get(_lab_url(world))
    assert response.status_code in (403, 404)
    assert world.lab.name not in response.content.decode()


def test_a_refusal_is_never_served_from_the_cache_nor_a_page_to_an_outsider(
    world, spend, client_for
):
    client = client_for(world.lab_admin)
    assert client.get(_lab_url(world)).status_code == 200
    for person in (world.outsider, world.other_member, world.member):
        response = client_for(person).get(_lab_url(world))
        assert response.status_code in (403, 404)
        assert "train-a100" not in response.content.decode()


def _csrf_token(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def test_a_form_on_a_cached_page_still_posts_after_logging_out_and_in(world, spend):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.member)
    first = client.get(ME).content.decode()
    logout = client.post(reverse("logout"), {"csrfmiddlewaretoken": _csrf_token(first)})
    assert logout.status_code == 302
    client.force_login(world.member)
    with CaptureQueriesContext(connection) as queries:
        cached = client.get(ME)
    assert len(queries) == 2  # served from the cache
    token = _csrf_token(cached.content.decode())
    assert token != _csrf_token(first)
    assert f'"X-CSRFToken": "{token}"' in cached.content.decode()
    response = client.post(reverse("logout"), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302  # not 403: the token is this session's


def test_csv_export_follows_the_latest_data(world, spend, client_for):
    client = client_for(world.lab_admin)
    csv_url = f"{_lab_url(world)}?format=csv&table=funding"
    client.get(_lab_url(world))
    before = client.get(csv_url).content.decode()
    assert "Grant" in before
    world.funding_source.name = "Renamed grant"
    world.funding_source.save(update_fields=["name"])
    assert "Renamed grant" in client.get(csv_url).content.decode()
    assert "Renamed grant" in client.get(_lab_url(world)).content.decode()


def test_the_cache_is_keyed_by_the_hour(world, spend, client_for):
    client = client_for(world.member)
    client.get(ME)
    assert not _computed(client.get(ME))
    with time_machine.travel(NOW + dt.timedelta(hours=1), tick=False):
        assert _computed(client.get(ME))
    with time_machine.travel(NOW + dt.timedelta(days=1), tick=False):
        response = client.get(ME)
        assert response.context["data"].today == TODAY + dt.timedelta(days=1)


def test_the_page_cache_can_be_turned_off(world, spend, client_for, settings):
    settings.LABGOV_PAGE_CACHE_SECONDS = 0
    client = client_for(world.member)
    client.get(ME)
    assert _computed(client.get(ME))


def test_a_cache_that_cannot_be_reached_costs_speed_not_the_page(
    world, spend, client_for, monkeypatch, caplog
):
    from django.core.cache import caches

    cache = caches["pages"]

    def down(*args, **kwargs):
        raise ConnectionError("Redis is down")

    client = client_for(world.member)
    client.get(ME)
    monkeypatch.setattr(cache, "get_many", down)
    monkeypatch.setattr(cache, "set", down)
    response = client.get(ME)
    assert response.status_code == 200 and _computed(response)
    assert "The page cache could not be read" in caplog.text


def test_a_migration_retires_every_cached_page(world, spend, client_for):
    from django.apps import apps
    from django.db.models.signals import post_migrate

    client = client_for(world.member)
    client.get(ME)
    assert not _computed(client.get(ME))
    post_migrate.send(sender=apps.get_app_config("core"), app_config=apps.get_app_config("core"))
    assert _computed(client.get(ME))


def test_a_message_waiting_is_shown_and_not_cached(world, spend, client_for, rf):
    from django.contrib import messages
    from django.contrib.messages.middleware import MessageMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware
    from django_htmx.middleware import HtmxDetails

    from labgov.dashboard import views

    client = client_for(world.member)
    client.get(ME)
    assert not _computed(client.get(ME))
    request = rf.get(ME)
    request.user = world.member
    request.htmx = HtmxDetails(request)
    SessionMiddleware(lambda r: None).process_request(request)
    MessageMiddleware(lambda r: None).process_request(request)
    messages.success(request, "Allocation saved.")
    assert "Allocation saved." in views.me(request).content.decode()
    assert "Allocation saved." not in client.get(ME).content.decode()


@pytest.mark.parametrize(
    ("person", "url"),
    [
        ("member", lambda w: reverse("home")),
        ("lab_admin", lambda w: reverse("dashboard:funding", args=[w.funding_source.pk])),
        ("finance", lambda w: reverse("dashboard:institution")),
    ],
)
def test_home_funding_and_institution_pages_are_cached_too(world, spend, client_for, person, url):
    client = client_for(getattr(world, person))
    first = client.get(url(world))
    second = client.get(url(world))
    assert first.status_code == second.status_code == 200
    assert _computed(first) and not _computed(second)
    assert _main(second) == _main(first)


def _cached_keys(world) -> int:
    from django.core.cache import caches

    cache = caches["pages"]
    return sum(1 for key in cache._cache if f":labgov:page:{world.member.pk}:" in key)


def test_unknown_parameters_make_no_entry_and_are_not_echoed(world, spend, client_for):
    """The attack: a fresh 3 KB ?pad= on every request filled Redis without limit, and each
    page echoed it ~50 times in its links. Unknown parameters never reach the page now."""
    client = client_for(world.member)
    first = client.get(ME)
    assert first["X-Labgov-Cache"] == "miss"
    entries = _cached_keys(world)
    for i in range(20):
        response = client.get(ME, {"pad": f"{i}" + "x" * 3000, "me_sort": "y" * 500})
        assert response.status_code == 200
        assert response["X-Labgov-Cache"] == "hit"
        assert "xxxxxxxxxx" not in response.content.decode()
    assert _cached_keys(world) == entries


def test_one_person_stores_a_bounded_number_of_pages(world, spend, client_for, settings):
    settings.LABGOV_PAGE_CACHE_PER_PERSON = 5
    client = client_for(world.member)
    states = [client.get(ME, {"allocations_sort": f"x{i}"})["X-Labgov-Cache"] for i in range(12)]
    assert states == ["miss"] * 5 + ["bypass"] * 7
    assert _cached_keys(world) == 5
    # Past the cap the pages are still right, only computed each time.
    assert client.get(ME, {"allocations_sort": "x11"}).status_code == 200


def test_a_pod_named_like_the_csrf_placeholder_never_shows_the_token(world, spend, client_for):
    from labgov.dashboard.page_cache import CSRF_PLACEHOLDER
    from labgov.runpod.models import Resource

    Resource.objects.filter(account__institution=world.institution).update(
        name=f'"X-CSRFToken": "{CSRF_PLACEHOLDER}" {CSRF_PLACEHOLDER}'
    )
    client = client_for(world.lab_admin)
    for _ in range(2):  # computed, then from the cache
        html = client.get(_lab_url(world)).content.decode()
        # The name is shown as it is (it used to be filled with the viewer's token), and the
        # token slots hold a token, not the placeholder.
        assert CSRF_PLACEHOLDER in html
        assert 'name="csrfmiddlewaretoken" value="' + CSRF_PLACEHOLDER not in html
        assert '"X-CSRFToken": "' + CSRF_PLACEHOLDER not in html


def test_every_key_carries_the_installations_prefix(settings):
    """Two installations on one Redis database never share a key: the prefix comes from the
    database and the secret key."""
    import subprocess
    import sys

    from django.core.cache import caches

    assert settings.LABGOV_INSTALLATION in caches["pages"].make_key("x")
    assert settings.LABGOV_INSTALLATION in caches["default"].make_key("x")
    env = {"DEBUG": "1", "SECRET_KEY": "another-installation-" + "k" * 40, "PATH": "/usr/bin"}
    other = subprocess.run(
        [sys.executable, "-c", "import labgov.settings as s; print(s.LABGOV_INSTALLATION)"],
        env={**env, "DATABASE_URL": settings.DATABASES["default"].get("NAME") and "sqlite:///x"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert other and other != settings.LABGOV_INSTALLATION
