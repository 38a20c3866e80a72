"""Each API action and its page twin: the same service, the same outcome, the same audit
rows."""

import datetime as dt

import pytest
from django.urls import reverse

from labgov.alerts.models import Alert
from labgov.audit.models import AuditEvent
from labgov.provisioning.models import ProvisioningRequest
from tests.api.fixtures import make_alert
from tests.factories import ResourceFactory, RunpodAccountFactory
from tests.provisioning.conftest import POD_VALUES, catalog, draft, submitted  # noqa: F401

V1 = "/api/v1/"


def _audit(obj) -> list[tuple]:
    return list(
        AuditEvent.objects.filter(target_type=obj._meta.label_lower, target_id=str(obj.pk))
        .order_by("id")
        .values_list("action", "actor_id")
    )


def _twins(page_client, api_client, make, page_url, page_data, api_url, api_data):
    """Do the action on one object through its page and on its twin through the API."""
    by_page, by_api = make(), make()
    page = page_client.post(page_url(by_page), page_data)
    assert page.status_code in (200, 302), page.content[:300]
    answer = api_client.post(api_url(by_api), api_data, content_type="application/json")
    assert answer.status_code == 200, answer.content[:300]
    by_page.refresh_from_db()
    by_api.refresh_from_db()
    assert _audit(by_page) == _audit(by_api) and _audit(by_api)
    return by_page, by_api, answer.json()


@pytest.fixture
def both(world, client, api):
    """A page client and an API client (a token) for a person."""
    from django.test import Client

    def make(user):
        page = Client()
        page.force_login(user)
        return page, api(user)

    return make


def test_submit(world, both, draft):  # noqa: F811
    page, api = both(world.member)
    by_page, by_api, body = _twins(
        page,
        api,
        draft,
        lambda r: reverse("provisioning:submit", args=[r.pk]),
        {},
        lambda r: f"{V1}provisioning-requests/{r.pk}/submit/",
        {},
    )
    assert by_page.state == by_api.state == body["state"] == "submitted"


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_approve_and_deny(world, both, submitted, verb):  # noqa: F811
    page, api = both(world.lab_admin)
    data = {"reason": "Not this month"} if verb == "deny" else {}
    by_page, by_api, body = _twins(
        page,
        api,
        submitted,
        lambda r: reverse(f"provisioning:{verb}", args=[r.pk]),
        data,
        lambda r: f"{V1}provisioning-requests/{r.pk}/{verb}/",
        data,
    )
    assert by_page.state == by_api.state == body["state"]
    assert by_page.commitment_usd == by_api.commitment_usd
    assert body["state"] in (("approved", "provisioning") if verb == "approve" else ("denied",))


def test_create_and_submit_with_its_estimate(world, both, catalog):  # noqa: F811
    page, api = both(world.member)
    values = {k: str(v) for k, v in POD_VALUES.items()}
    page.post(
        reverse("provisioning:new"), {**values, "allocation": world.allocation.pk, "submit": "1"}
    )
    by_page = ProvisioningRequest.objects.get()
    answer = api.post(
        f"{V1}provisioning-requests/",
        {**POD_VALUES, "allocation": world.allocation.pk, "submit": True},
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    by_api = ProvisioningRequest.objects.get(pk=body["id"])
    assert by_page.state == by_api.state == body["state"] == "submitted"
    assert body["submission_refused"] == []
    # The seeds' example: 8 × H100 at $4.39 for 10 h.
    assert body["estimate"]["compute"].startswith("351.2")
    assert body["estimate"]["currency"] == "USD"
    assert by_page.estimate_total_usd == by_api.estimate_total_usd
    assert _audit(by_page) == _audit(by_api)


def test_create_refused_submission_keeps_the_draft_and_says_why(world, both, catalog):  # noqa: F811
    _page, api = both(world.member)
    answer = api.post(
        f"{V1}provisioning-requests/",
        {**POD_VALUES, "allocation": world.allocation.pk, "expected_hours": "5000", "submit": 1},
        content_type="application/json",
    )
    assert answer.status_code == 201
    body = answer.json()
    assert body["state"] == "draft" and body["submission_refused"]


def test_create_validates_like_the_form(world, both, catalog):  # noqa: F811
    _page, api = both(world.member)
    answer = api.post(
        f"{V1}provisioning-requests/",
        {**POD_VALUES, "allocation": world.allocation.pk, "volume_disk_gb": 5},
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert answer["Content-Type"] == "application/problem+json"
    assert {e["field"] for e in answer.json()["errors"]} == {"volume_disk_gb"}
    # Someone else's allocation is not one to choose.
    answer = api.post(
        f"{V1}provisioning-requests/",
        {**POD_VALUES, "allocation": world.allocation.pk + 999},
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert not ProvisioningRequest.objects.exists()


@pytest.mark.parametrize(
    ("verb", "data", "state"),
    [
        ("acknowledge", {}, "acknowledged"),
        ("snooze", {"until": "2099-01-01"}, "snoozed"),
        ("resolve", {"note": "Raised the budget"}, "resolved"),
    ],
)
def test_alert_transitions(world, both, verb, data, state):
    page, api = both(world.lab_admin)
    if verb == "snooze":
        until = (dt.datetime.now(dt.UTC) + dt.timedelta(days=5)).date().isoformat()
        data = {"until": until}
    by_page, by_api, body = _twins(
        page,
        api,
        lambda: make_alert(world),
        lambda a: reverse("alerts:transition", args=[a.pk, verb]),
        data,
        lambda a: f"{V1}alerts/{a.pk}/{verb}/",
        data,
    )
    assert by_page.state == by_api.state == body["state"] == state
    assert by_page.snoozed_until == by_api.snoozed_until


def test_alert_snooze_refused_in_words(world, both):
    _page, api = both(world.lab_admin)
    alert = make_alert(world)
    answer = api.post(
        f"{V1}alerts/{alert.pk}/snooze/", {"until": "2020-01-01"}, content_type="application/json"
    )
    assert answer.status_code == 409
    assert answer["Content-Type"] == "application/problem+json"
    assert "future" in answer.json()["detail"]
    assert Alert.objects.get(pk=alert.pk).state == "open"


def test_assign(world, both):
    page, api = both(world.lab_admin)
    account = RunpodAccountFactory(institution=world.institution)
    by_page, by_api, body = _twins(
        page,
        api,
        lambda: ResourceFactory(account=account),
        lambda r: reverse("runpod:resource_assign", args=[r.pk]),
        {"allocation": world.allocation.pk},
        lambda r: f"{V1}resources/{r.pk}/assign/",
        {"allocation": world.allocation.pk},
    )
    assert by_page.current_allocation_id == by_api.current_allocation_id == world.allocation.pk
    assert body["current_allocation"] == world.allocation.pk
    assert [a["source"] for a in body["assignments"]] == ["manual"]


def test_assign_to_an_allocation_not_theirs_is_refused(world, both):
    _page, api = both(world.lab_admin)
    account = RunpodAccountFactory(institution=world.institution)
    resource = ResourceFactory(account=account)
    other = world.other_funding_source.allocations.create(
        project_name="x", cap_usd=1, start_date="2026-01-01", end_date="2026-12-31"
    )
    answer = api.post(
        f"{V1}resources/{resource.pk}/assign/",
        {"allocation": other.pk},
        content_type="application/json",
    )
    assert answer.status_code == 400
    resource.refresh_from_db()
    assert resource.current_allocation_id is None


def test_sync_queues_like_the_page(world, both, django_capture_on_commit_callbacks):
    page, api = both(world.inst_admin)
    account = RunpodAccountFactory(institution=world.institution)
    with django_capture_on_commit_callbacks() as by_page:
        page.post(reverse("runpod:account_sync", args=[account.pk]))
    with django_capture_on_commit_callbacks() as by_api:
        answer = api.post(f"{V1}runpod-accounts/{account.pk}/sync/")
    assert answer.status_code == 202 and answer.json() == {"account": account.pk, "queued": True}
    assert len(by_page) == len(by_api) == 1
    account.is_active = False
    account.save()
    answer = api.post(f"{V1}runpod-accounts/{account.pk}/sync/")
    assert answer.status_code == 409 and "deactivated" in answer.json()["detail"]


def test_runpod_account_never_shows_a_key(world, api):
    account = RunpodAccountFactory(institution=world.institution)
    text = api(world.inst_admin).get(f"{V1}runpod-accounts/{account.pk}/").content.decode()
    assert "rp_test_key" not in text and "0000" not in text and "encrypted" not in text
