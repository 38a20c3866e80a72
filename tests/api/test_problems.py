"""Refusals say why, in problem+json (RFC 9457); throttling is per token."""

import pytest
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle


def _problem(response, status):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == "about:blank" and body["status"] == status
    assert body["title"] and body["detail"]
    return body


def test_unknown_path_and_object(world, api):
    client = api(world.member)
    _problem(client.get("/api/v1/no-such-thing/"), 404)
    body = _problem(client.get(f"/api/v1/funding-sources/{world.funding_source.pk}/"), 404)
    # Not visible and not there read the same: existence is not told.
    assert body == _problem(client.get("/api/v1/funding-sources/999999999/"), 404)
    # Ids past what any column holds are not there either (never a 500).
    for huge in ("9223372036854775808", "99999999999999999999999"):
        _problem(client.get(f"/api/v1/labs/{huge}/"), 404)
        _problem(client.post(f"/api/v1/alerts/{huge}/acknowledge/"), 404)


def test_bad_json_and_media_type(world, api):
    from tests.api.fixtures import make_alert

    client = api(world.lab_admin)
    url = f"/api/v1/alerts/{make_alert(world).pk}/snooze/"
    _problem(client.post(url, "{nope", content_type="application/json"), 400)
    _problem(client.post(url, "x", content_type="text/plain"), 415)
    body = _problem(client.post(url, {"until": "someday"}, content_type="application/json"), 400)
    assert body["errors"][0]["field"] == "until"
    body = _problem(
        client.post("/api/v1/provisioning-requests/", "[1, 2]", content_type="application/json"),
        403,  # a lab admin without an allocation may not request, whatever the body
    )
    assert body["code"] == "permission_denied"


@pytest.fixture
def tight_rates(monkeypatch):
    monkeypatch.setattr(
        SimpleRateThrottle,
        "THROTTLE_RATES",
        {**api_settings.DEFAULT_THROTTLE_RATES, "api_read": "3/min", "api_write": "1/min"},
    )


def test_throttled_per_token(world, api, make_token, client, tight_rates):
    first, second = make_token(world.member, "read"), make_token(world.member, "read")
    for _ in range(3):
        assert client.get("/api/v1/labs/", HTTP_AUTHORIZATION=f"Bearer {first}").status_code == 200
    body = _problem(client.get("/api/v1/labs/", HTTP_AUTHORIZATION=f"Bearer {first}"), 429)
    assert body["code"] == "throttled"
    response = client.get("/api/v1/labs/", HTTP_AUTHORIZATION=f"Bearer {first}")
    assert int(response["Retry-After"]) > 0
    # Another token of the same person shares the person's budget: 20 live tokens are not 20
    # budgets.
    _problem(client.get("/api/v1/labs/", HTTP_AUTHORIZATION=f"Bearer {second}"), 429)
    # Another person has their own.
    other = make_token(world.lab_admin, "read")
    assert client.get("/api/v1/labs/", HTTP_AUTHORIZATION=f"Bearer {other}").status_code == 200


def test_many_calls_at_once_never_pass_more_than_the_rate(world, make_token, monkeypatch):
    """The attack: 12 threads with a 600/min budget got 691 of 2,000 calls through (DRF's
    throttle reads, appends and writes back a list). Each call is one atomic increment now."""
    import threading
    from types import SimpleNamespace

    from labgov.api.models import ApiToken
    from labgov.api.throttling import TokenScopedRateThrottle

    monkeypatch.setattr(
        SimpleRateThrottle,
        "THROTTLE_RATES",
        {**api_settings.DEFAULT_THROTTLE_RATES, "api_read": "50/hour"},
    )
    tokens = [make_token(world.member, "read") for _ in range(4)]
    auths = [ApiToken.objects.get(key_id=t.split("_")[1]) for t in tokens]
    view = SimpleNamespace(throttle_scope="api_read")
    passed = []
    start = threading.Barrier(12)

    def calls(n):
        start.wait()
        for i in range(40):
            request = SimpleNamespace(user=world.member, auth=auths[(n + i) % len(auths)])
            if TokenScopedRateThrottle().allow_request(request, view):
                passed.append(1)

    threads = [threading.Thread(target=calls, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(passed) == 50  # of 480, across 4 tokens of one person


def test_writes_have_their_own_budget(world, api, tight_rates):
    client = api(world.lab_admin)
    assert client.post("/api/v1/alerts/999/acknowledge/").status_code == 404
    _problem(client.post("/api/v1/alerts/999/acknowledge/"), 429)
    assert client.get("/api/v1/labs/").status_code == 200


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_a_deeply_nested_body_is_refused_in_problem_json(world, api, opener):
    """The attack: 50,000 levels of nesting made the JSON parser recurse out of its stack and
    answered a 500 HTML page. Nesting is bounded before parsing."""
    client = api(world.member)
    closer = "]" if opener == "[" else "}"
    body = opener * 50_000 + "1" + closer * 50_000
    problem = _problem(
        client.post("/api/v1/provisioning-requests/", body, content_type="application/json"),
        400,
    )
    assert "nests deeper than 32 levels" in problem["detail"]
    # Brackets inside strings are text, not nesting.
    from labgov.api.parsers import nesting_depth

    assert nesting_depth('{"name": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == 1


def test_a_failure_inside_a_call_answers_problem_json(world, api, monkeypatch, caplog):
    from labgov.api.views import LabViewSet

    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(LabViewSet, "get_queryset", broken)
    client = api(world.member)
    client.raise_request_exception = False
    body = _problem(client.get("/api/v1/labs/"), 500)
    assert body["code"] == "server_error" and "boom" not in body["detail"]
    assert "API call failed" in caplog.text and "RuntimeError: boom" in caplog.text


def test_the_api_root_lists_its_resources_and_links_schema_and_docs(world, api, client):
    """/api/v1/ was a 404."""
    for caller in (api(world.member), api(None)):
        response = caller.get("/api/v1/")
        assert response.status_code == 200 and response["Content-Type"] == "application/json"
        body = response.json()
        assert body["resources"]["labs"].endswith("/api/v1/labs/")
        assert body["resources"]["spend/daily"].endswith("/api/v1/spend/daily/")
        assert body["schema"].endswith("/api/v1/schema/") and body["docs"].endswith("/api/v1/docs/")
    # Every resource it names answers (here, to a signed-in member).
    member = api(world.member)
    for url in member.get("/api/v1/").json()["resources"].values():
        assert member.get(url).status_code == 200, url


def test_the_menu_links_the_api_docs(world, client_for):
    html = client_for(world.member).get("/").content.decode()
    assert 'href="/api/v1/docs/"' in html
