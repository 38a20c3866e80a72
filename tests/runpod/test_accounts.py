import pytest
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.core.crypto import decrypt
from labgov.core.errors import DomainError
from labgov.runpod.models import RunpodAccount
from labgov.runpod.services import account_connect, account_update

KEY = "rpa_SECRET1234567890abcdWXYZ"


def test_connect_encrypts_the_key_and_keeps_last4(world):
    account = account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name="Main",
        api_key=f"  {KEY} ",
        base_url="http://127.0.0.1:8765/v2/",
    )
    assert account.api_key_last4 == "WXYZ"
    assert KEY not in account.api_key_encrypted
    assert decrypt(account.api_key_encrypted) == KEY
    assert account.base_url == "http://127.0.0.1:8765"
    event = AuditEvent.objects.get(action="runpod_account.connect")
    assert KEY not in str(event.after) and "api_key_encrypted" not in event.after


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"api_key": "short"}, "api_key"),  # under 6 characters
        ({"api_key": "has a space in it"}, "api_key"),
        ({"base_url": "ftp://runpod"}, "base_url"),
        ({"name": " "}, "name"),
    ],
)
def test_connect_validation(world, overrides, field):
    values = {"name": "Main", "api_key": KEY, "base_url": "https://api.runpod.io"}
    values.update(overrides)
    with pytest.raises(DomainError) as info:
        account_connect(actor=world.inst_admin, institution=world.institution, **values)
    assert info.value.field == field
    assert not RunpodAccount.objects.exists()


def test_update_keeps_key_when_empty_and_audits_replacement(world):
    account = account_connect(
        actor=world.inst_admin, institution=world.institution, name="Main", api_key=KEY
    )
    account_update(actor=world.inst_admin, account=account, name="Main", api_key="")
    assert not AuditEvent.objects.filter(action="runpod_account.update").exists()
    account_update(actor=world.inst_admin, account=account, api_key="rpa_NEWKEY_000000009876")
    account.refresh_from_db()
    assert account.api_key_last4 == "9876"
    event = AuditEvent.objects.get(action="runpod_account.update")
    assert event.note == "Sync key replaced"


def test_key_is_never_rendered(world, client_for):
    account = account_connect(
        actor=world.inst_admin, institution=world.institution, name="Main", api_key=KEY
    )
    client = client_for(world.inst_admin)
    for url in (
        reverse("runpod:account_detail", args=[account.pk]),
        reverse("runpod:account_edit", args=[account.pk]),
        reverse("runpod:account_list"),
    ):
        page = client.get(url).content.decode()
        assert KEY not in page
        assert account.api_key_encrypted not in page
        assert "WXYZ" in page


def test_connect_form_says_read_only_key_is_enough(world, client_for):
    page = client_for(world.inst_admin).get(reverse("runpod:account_new")).content.decode()
    assert "read-only key is enough for syncing" in page
