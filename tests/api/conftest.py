import pytest
from django.core.cache import cache

from labgov.api.models import ApiToken
from labgov.api.services import token_create


@pytest.fixture(autouse=True)
def _fresh_throttles():
    """Throttle counts live in the cache: each test starts with none."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def make_token(db):
    def make(user, scope=ApiToken.Scope.WRITE, days=30):
        return token_create(actor=user, name="test", scope=scope, days=days)[1]

    return make


@pytest.fixture
def api(client, make_token):
    """A test client calling the API as a user with a token (or as nobody, with None)."""

    def call(user, *, scope=ApiToken.Scope.WRITE):
        client.logout()
        client.defaults.pop("HTTP_AUTHORIZATION", None)
        if user is not None:
            client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {make_token(user, scope)}"
        return client

    return call
