"""`make run` prints a working API token under the logins (README, "Using the API")."""

import io
import re

from django.core.management import call_command

from labgov.api.models import ApiToken


def test_demo_token_works_and_replaces_the_last(db, client):
    call_command("seed_demo", stdout=io.StringIO())
    tokens = []
    for _ in range(2):
        out = io.StringIO()
        call_command("api_demo_token", stdout=out)
        tokens.append(re.search(r"(lgv_\S+)", out.getvalue())[1])
    assert (
        client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Bearer {tokens[1]}").status_code
        == 200
    )
    assert (
        client.get("/api/v1/allocations/", HTTP_AUTHORIZATION=f"Bearer {tokens[0]}").status_code
        == 401
    )
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 1
