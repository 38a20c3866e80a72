"""Institutional sign-in against a real OpenID Connect provider on loopback
(tests/oidc_provider.py): first sign-in creates the person, people are found by subject and
never by email, and every forged, expired, revoked or misdirected token is refused."""

import time
from urllib.parse import urlsplit

import httpx
import pytest

from labgov.accounts.models import ExternalIdentity, Membership, Role, User
from labgov.audit.models import AuditEvent
from labgov.core.tls import default_context
from tests.factories import InstitutionFactory, LabFactory, MembershipFactory, UserFactory
from tests.oidc_provider import StandInProvider

FAILED = "/login/?sso=failed"


@pytest.fixture(scope="module")
def provider():
    server = StandInProvider()
    yield server
    server.close()


@pytest.fixture
def sso(provider, settings, db):
    for name, value in provider.settings().items():
        setattr(settings, name, value)
    provider.tamper = {}
    provider.refuse_codes = False
    return provider


def sign_in(client, provider, claims, *, code_hook=None):
    """Walk the code flow: labgov's sign-in page, the provider's authorize endpoint (real HTTP),
    back to labgov's callback. Returns the callback's response."""
    provider.next_claims = claims
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302, start
    assert start["Location"].startswith(provider.issuer + "/authorize?")
    back = httpx.get(start["Location"], follow_redirects=False, verify=default_context())
    assert back.status_code == 302
    callback = urlsplit(back.headers["location"])
    if code_hook:
        code_hook(callback)
    return client.get(f"{callback.path}?{callback.query}")


def signed_in_user(client):
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def test_first_sign_in_creates_the_person_and_the_next_finds_them(client, sso):
    claims = {
        "sub": "u-100",
        "email": "noor@uni.example",
        "preferred_username": "noor",
        "given_name": "Noor",
        "family_name": "Haddad",
    }
    response = sign_in(client, sso, claims)
    assert response.status_code == 302 and response["Location"] == "/"
    user = signed_in_user(client)
    assert (user.username, user.email, user.get_full_name()) == (
        "noor",
        "noor@uni.example",
        "Noor Haddad",
    )
    assert not user.has_usable_password()
    assert ExternalIdentity.objects.get(user=user).subject == "u-100"
    assert AuditEvent.objects.filter(
        action="person.create_from_sign_in", target_id=str(user.pk)
    ).exists()

    client.logout()
    sign_in(client, sso, claims)
    assert signed_in_user(client) == user
    assert User.objects.filter(username__startswith="noor").count() == 1


def test_an_email_never_signs_in_as_someone_else(client, sso):
    ada = UserFactory(username="ada", email="ada@uni.example")
    # The provider's person u-200 claims ada's email (and even her username): a new person.
    sign_in(client, sso, {"sub": "u-200", "email": "ada@uni.example", "preferred_username": "ada"})
    newcomer = signed_in_user(client)
    assert newcomer != ada and newcomer.username == "ada-2"

    # u-300 signs in, then their email at the provider changes to ada's: still u-300's person.
    client.logout()
    sign_in(client, sso, {"sub": "u-300", "email": "sam@uni.example", "preferred_username": "sam"})
    sam = signed_in_user(client)
    client.logout()
    sign_in(client, sso, {"sub": "u-300", "email": "ada@uni.example"})
    assert signed_in_user(client) == sam
    sam.refresh_from_db()
    ada.refresh_from_db()
    assert sam.email == "ada@uni.example" and ada.email == "ada@uni.example"
    assert ada.external_identities.count() == 0


@pytest.mark.parametrize(
    "tamper",
    [
        {"id_token": {"exp": int(time.time()) - 3600}},  # expired an hour ago
        {"id_token": {"aud": "another-app"}},  # issued to another client
        {"id_token": {"aud": ["labgov-test", "another-app"], "azp": "another-app"}},
        {"id_token": {"iss": "http://evil.example"}},  # from another issuer
        {"id_token": {"nonce": "replayed"}},  # not this sign-in's token
        {"sign_with_other_key": True},  # forged: a key the provider does not publish
        {"userinfo": {"sub": "u-999"}},  # userinfo about someone else
        {"kid": "k-unknown"},  # names a key the provider does not publish
        {"no_kid": True, "sign_with_other_key": True},  # no kid, and forged
    ],
    ids=[
        "expired",
        "audience",
        "azp",
        "issuer",
        "nonce",
        "forged",
        "userinfo-subject",
        "unknown-kid",
        "no-kid-forged",
    ],
)
def test_a_bad_id_token_is_refused(client, sso, tamper, caplog):
    sso.tamper = tamper
    response = sign_in(client, sso, {"sub": "u-400", "email": "x@uni.example"})
    assert response["Location"] == FAILED
    assert signed_in_user(client) is None
    assert not ExternalIdentity.objects.filter(subject="u-400").exists()
    refusals = [r for r in caplog.records if r.name.startswith(("labgov", "mozilla_django_oidc"))]
    assert refusals and all(r.levelname == "WARNING" for r in refusals)


def test_a_token_without_kid_is_checked_against_the_only_published_key(client, sso):
    """It used to answer a 500 at the callback (a KeyError in the library's key lookup)."""
    sso.tamper = {"no_kid": True}
    response = sign_in(client, sso, {"sub": "u-410", "email": "nokid@uni.example"})
    assert response["Location"] != FAILED
    assert signed_in_user(client) is not None


def test_a_revoked_grant_and_a_replayed_code_are_refused(client, sso):
    sso.refuse_codes = True  # the provider revoked the person's sign-in
    assert sign_in(client, sso, {"sub": "u-500"})["Location"] == FAILED
    assert signed_in_user(client) is None

    sso.refuse_codes = False
    seen = {}
    response = sign_in(client, sso, {"sub": "u-500"}, code_hook=lambda url: seen.update(url=url))
    assert response["Location"] == "/"
    client.logout()
    # The same code again (stolen from a log or a browser history): refused.
    replay = client.get(f"{seen['url'].path}?{seen['url'].query}")
    assert replay.status_code in (302, 400) and signed_in_user(client) is None


def test_a_deactivated_person_is_refused(client, sso):
    sign_in(client, sso, {"sub": "u-600", "preferred_username": "gone"})
    user = signed_in_user(client)
    client.logout()
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert sign_in(client, sso, {"sub": "u-600"})["Location"] == FAILED
    assert signed_in_user(client) is None


def test_a_group_gives_lab_membership_and_losing_it_ends_only_that(client, sso, settings):
    institution = InstitutionFactory(slug="uni")
    vision, nlp = (
        LabFactory(institution=institution, slug="vision"),
        LabFactory(institution=institution, slug="nlp"),
    )
    settings.LABGOV_OIDC_INSTITUTION = "uni"
    settings.LABGOV_OIDC_GROUPS_CLAIM = "groups"
    settings.LABGOV_OIDC_GROUP_LABS = {"vision-lab": "vision", "nlp-lab": "nlp"}

    sign_in(client, sso, {"sub": "u-700", "groups": ["vision-lab", "nlp-lab", "unmapped"]})
    user = signed_in_user(client)
    assert user.home_institution == institution  # the institution of their sign-in
    active = Membership.objects.active().filter(user=user, role=Role.MEMBER)
    assert set(active.values_list("lab__slug", flat=True)) == {"vision", "nlp"}
    # An admin also gives a role by hand in the NLP lab (a lab admin role).
    MembershipFactory(user=user, institution=institution, lab=nlp, role=Role.LAB_ADMIN)

    client.logout()
    sign_in(client, sso, {"sub": "u-700", "groups": ["vision-lab"]})
    lasting = Membership.objects.filter(user=user, end_date__isnull=True)
    assert set(lasting.values_list("lab__slug", "role")) == {
        ("vision", Role.MEMBER),
        ("nlp", Role.LAB_ADMIN),
    }
    ended = Membership.objects.get(user=user, lab=nlp, role=Role.MEMBER)
    assert ended.end_date == ended.start_date  # today: the last day of access
    assert (
        AuditEvent.objects.filter(action="membership.end", note__contains="no longer").count() == 1
    )

    client.logout()
    sign_in(client, sso, {"sub": "u-700", "groups": ["vision-lab"]})  # nothing changes twice
    assert Membership.objects.filter(user=user).count() == 3  # vision, ended nlp, lab admin
    assert Membership.objects.filter(user=user, lab=vision, role=Role.MEMBER).count() == 1


def test_sign_in_is_off_unless_configured(client, db, settings):
    settings.LABGOV_OIDC_ENABLED = False
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    assert b"Sign in with" not in client.get("/login/").content


def test_the_login_page_offers_sign_in_and_says_when_it_failed(client, sso, settings):
    settings.LABGOV_OIDC_NAME = "Uni Login"
    page = client.get("/login/").content.decode()
    assert "Sign in with Uni Login" in page and "/oidc/authenticate/" in page
    assert "Sign-in through Uni Login failed" in client.get(FAILED).content.decode()


def test_a_look_alike_username_from_sign_in_never_stands_beside_the_real_one(client, sso):
    """The attack: a provider account named "аda" (Cyrillic а) signed in as "аda", next to
    "ada", and read as her on every page. Sign-in makes an ASCII name nobody's looks like."""
    UserFactory(username="ada")
    for i, wanted in enumerate(["аda", "ADA", "ａｄａ", "Ádá"]):
        client.logout()
        sign_in(client, sso, {"sub": f"u-lookalike-{i}", "preferred_username": wanted})
        user = signed_in_user(client)
        assert user.username.isascii() and user.username.lower().startswith("ada-"), user.username
    usernames = list(User.objects.values_list("username", flat=True))
    assert len({name.casefold() for name in usernames}) == len(usernames)


def test_the_admin_refuses_a_username_that_looks_like_another(db):
    from django.core.exceptions import ValidationError

    from labgov.accounts.usernames import skeleton

    UserFactory(username="ada")
    for look_alike in ("аda", "Ada", "ａｄａ", "adá", "ada_"[:3]):
        person = User(username=look_alike)
        with pytest.raises(ValidationError, match="cannot be told apart from 'ada'"):
            person.clean()
    assert skeleton("rnary") == skeleton("mary") and skeleton("bob") != skeleton("rob")
    person = User(username="ﬁona")  # a compatibility ligature: stored as "fiona"
    person.clean()
    assert person.username == "fiona"
