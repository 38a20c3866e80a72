"""Personal tokens: made and revoked on the person's own page, shown once, stored hashed, with
an expiry, a scope and the time of last use; a missing, unknown, expired or revoked token is a
401 in problem+json."""

import datetime as dt
import hashlib
import re

import pytest
import time_machine
from django.urls import reverse

from labgov.api.models import ApiToken
from labgov.api.services import token_create
from labgov.audit.models import AuditEvent

LABS = "/api/v1/labs/"
T0 = dt.datetime(2026, 11, 16, 12, 0, tzinfo=dt.UTC)


def _get(client, token, url=LABS):
    return client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_made_on_own_page_shown_once_and_stored_hashed(world, client):
    client.force_login(world.member)
    response = client.post(
        reverse("api_tokens"), {"name": "launcher", "scope": "read", "days": "30"}
    )
    assert response.status_code == 200
    text = re.search(r'<code id="new-token">([^<]+)</code>', response.content.decode())[1]
    token = ApiToken.objects.get(user=world.member)
    assert token.scope == "read" and token.name == "launcher"
    secret = text.split("_", 2)[2]
    assert token.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(list(ApiToken.objects.values()))
    assert AuditEvent.objects.filter(action="api_token.create", actor=world.member).exists()
    # Shown once: the page shows it no more.
    page = client.get(reverse("api_tokens")).content.decode()
    assert text not in page and token.key_id in page and "never" in page

    client.logout()
    assert _get(client, text).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    client.force_login(world.member)
    assert (
        token.last_used_at.strftime("%Y-%m-%d %H:%M")
        in client.get(reverse("api_tokens")).content.decode()
    )


def test_revoked_on_own_page_only(world, client):
    token, text = token_create(actor=world.member, name="ci", scope="write", days=5)
    client.force_login(world.lab_admin)
    response = client.post(reverse("api_token_revoke", args=[token.pk]))
    assert response.status_code == 404  # someone else's token is not theirs to see
    client.force_login(world.member)
    assert client.post(reverse("api_token_revoke", args=[token.pk])).status_code == 302
    assert AuditEvent.objects.filter(action="api_token.revoke", actor=world.member).exists()
    client.logout()
    response = _get(client, text)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "token_revoked"


def test_expiry(world, client):
    with time_machine.travel(T0, tick=False) as traveller:
        _token, text = token_create(actor=world.member, name="ci", scope="read", days=2)
        assert _get(client, text).status_code == 200
        traveller.shift(dt.timedelta(days=2))
        response = _get(client, text)
        assert response.status_code == 401
        assert response.json()["code"] == "token_expired"
        assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "not_authenticated"),
        ("Bearer", "token_malformed"),
        ("Token abc", "token_malformed"),
        ("Bearer lgv_nope_nope", "token_invalid"),
        ("Bearer something-else", "token_invalid"),
    ],
)
def test_fail_closed(world, client, header, code):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.get(LABS, **extra)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code


def test_wrong_secret_of_a_real_key_is_refused(world, client):
    token, text = token_create(actor=world.member, name="ci", scope="read", days=5)
    forged = f"lgv_{token.key_id}_{'A' * 43}"
    assert _get(client, forged).status_code == 401
    assert _get(client, text).status_code == 200


def test_a_bad_token_is_refused_even_with_a_session(world, client):
    client.force_login(world.member)
    assert client.get(LABS).status_code == 200
    assert _get(client, "lgv_x_y").status_code == 401


def test_scope_read_reads_write_acts(world, client):
    _t, read = token_create(actor=world.inst_admin, name="r", scope="read", days=5)
    _t, write = token_create(actor=world.inst_admin, name="w", scope="write", days=5)
    url = "/api/v1/alerts/999999/acknowledge/"
    refused = client.post(url, HTTP_AUTHORIZATION=f"Bearer {read}")
    assert refused.status_code == 403 and "only read" in refused.json()["detail"]
    # The write token gets past the scope; the alert does not exist.
    assert client.post(url, HTTP_AUTHORIZATION=f"Bearer {write}").status_code == 404


def test_page_form_is_bounded(world, client):
    client.force_login(world.member)
    response = client.post(
        reverse("api_tokens"), {"name": "x" * 500, "scope": "admin", "days": "100000"}
    )
    assert response.status_code == 200
    assert not ApiToken.objects.filter(user=world.member).exists()


def test_session_writes_need_csrf(world):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(world.inst_admin)
    response = client.post("/api/v1/alerts/1/acknowledge/")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
