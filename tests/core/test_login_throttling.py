"""Issue 9: guessing passwords at the login form is throttled (django-axes), counted per
username and client address, the address read safely from behind nginx."""

import datetime as dt
import re
from pathlib import Path

import pytest
import time_machine
from django.test import RequestFactory
from django.urls import reverse

from labgov.core.client_ip import client_ip

PASSWORD = "s3cret-pass"  # noqa: S105
NOW = dt.datetime(2026, 3, 18, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def member(world):
    world.member.set_password(PASSWORD)
    world.member.save()
    return world.member


def _login(client, user, password, **extra):
    return client.post(reverse("login"), {"username": user.username, "password": password}, **extra)


def _logged_in(client) -> bool:
    return client.get(reverse("home")).status_code == 200


def test_thirty_wrong_passwords_then_the_right_one_does_not_log_in(member, client, settings):
    with time_machine.travel(NOW, tick=False) as clock:
        for _ in range(30):
            _login(client, member, "wrong")
            clock.shift(dt.timedelta(seconds=0.29))  # 30 tries in 8.8 s
        response = _login(client, member, PASSWORD)
        assert response.status_code == 429
        assert "Too many failed logins" in response.content.decode()
        assert not _logged_in(client)
        # After the cool-off the right password works again.
        clock.shift(settings.AXES_COOLOFF_TIME + dt.timedelta(seconds=1))
        assert _login(client, member, PASSWORD).status_code == 302
        assert _logged_in(client)


def test_locked_after_the_limit_not_before(member, client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        assert _login(client, member, "wrong").status_code == 200  # the form, with its error
    assert _login(client, member, PASSWORD).status_code == 302  # success resets the count
    client.post(reverse("logout"))
    for _ in range(3):
        _login(client, member, "wrong")
    assert _login(client, member, PASSWORD).status_code == 429


def test_a_stranger_guessing_does_not_lock_the_owner_out(member, client, settings):
    """Counted per username and address: wrong passwords from another address (seen through
    the trusted nginx) do not lock the owner out of their own account."""
    for _ in range(10):
        _login(client, member, "wrong", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert _login(client, member, PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.7").status_code == (
        429
    )
    assert _login(client, member, PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 302


def test_the_admin_login_is_throttled_too(world, client):
    world.inst_admin.is_staff = True
    world.inst_admin.set_password(PASSWORD)
    world.inst_admin.save()
    url = reverse("admin:login")
    for _ in range(10):
        client.post(url, {"username": world.inst_admin.username, "password": "wrong"})
    response = client.post(url, {"username": world.inst_admin.username, "password": PASSWORD})
    assert response.status_code == 429


@pytest.mark.parametrize(
    ("remote", "forwarded", "expected"),
    [
        ("198.51.100.7", "", "198.51.100.7"),
        # A client that is not the proxy cannot choose its address.
        ("198.51.100.7", "10.0.0.1", "198.51.100.7"),
        # Through nginx: the address nginx appended, not what the client wrote before it.
        ("127.0.0.1", "203.0.113.5", "203.0.113.5"),
        ("127.0.0.1", "1.2.3.4, 203.0.113.5", "203.0.113.5"),
        ("127.0.0.1", "", "127.0.0.1"),
        ("::1", "2001:db8::5", "2001:db8::5"),
    ],
)
def test_client_address(remote, forwarded, expected):
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected


def test_a_longer_chain_of_trusted_proxies(settings):
    settings.LABGOV_TRUSTED_PROXIES = ["127.0.0.1", "10.0.0.0/8"]
    request = RequestFactory().get(
        "/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5, 10.1.1.1"
    )
    assert client_ip(request) == "203.0.113.5"


def test_nginx_rate_limits_the_login_paths():
    """deploy/nginx.conf (and the compose proxy) limit requests to both login forms per
    address, in front of the per-account lockout."""
    for name in ("nginx.conf", "nginx-compose.conf"):
        conf = (Path(__file__).resolve().parents[2] / "deploy" / name).read_text()
        zone = re.search(r"limit_req_zone \$binary_remote_addr zone=(\w+):\d+m rate=\d+r/m;", conf)
        assert zone, name
        for path in ("/login/", "/admin/login/"):
            block = re.search(r"location = " + re.escape(path) + r" \{(.*?)\}", conf, re.S)
            assert block and f"limit_req zone={zone[1]}" in block[1], (name, path)
            assert "proxy_pass" in block[1]
