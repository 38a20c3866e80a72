"""Where a stored Runpod key may go (issue 9, item 7): an institution admin must not be able to
send it to a host of their choosing, probe the network with it, or read it off an error page.

The attacks are performed against a real listener: a tiny HTTP server on 127.0.0.1 that
records every Authorization header it receives."""

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest
from django.contrib.messages import get_messages
from django.test import override_settings
from django.urls import reverse

from labgov.core.errors import DomainError
from labgov.runpod.models import RunpodAccount
from labgov.runpod.services import account_connect, account_update, base_url_check

KEY = "rpa_STOREDSECRET_0123456789_KEYZ"
PRODUCTION = override_settings(LABGOV_RUNPOD_HOSTS=[])  # what DEBUG=0 gives by default


class Listener:
    """An HTTP server on 127.0.0.1:<free port> answering every request with `answer`."""

    def __init__(self, status=200, body=b'{"pods": []}', headers=None):
        self.seen: list[str | None] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                listener.seen.append(self.headers.get("Authorization"))
                self.send_response(status)
                for name, value in (headers or {"Content-Type": "application/json"}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # Its stop waits for the loop's next look (every 0.5 s by default): half a second of
        # every test here.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @property
    def keys_received(self) -> list[str]:
        return [h for h in self.seen if h and KEY in h]


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as server:
        yield server


@pytest.fixture
def account(world, sim):
    return account_connect(
        actor=world.inst_admin,
        institution=world.institution,
        name="Main",
        api_key=KEY,
        base_url=sim.base_url,
    )


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _edit(client, account, **data):
    values = {"name": account.name, "base_url": account.base_url, "api_key": ""}
    values.update(data)
    return client.post(reverse("runpod:account_edit", args=[account.pk]), values)


# -- The attack of the issue: a new base URL with the key field left empty -------------------


def test_changing_the_base_url_without_the_key_is_refused(world, account, listener, client_for):
    client = client_for(world.inst_admin)
    response = _edit(client, account, base_url=listener.url)

    assert response.status_code == 200
    assert "Enter the sync key again" in response.content.decode()
    account.refresh_from_db()
    assert account.base_url != listener.url
    client.post(reverse("runpod:account_test", args=[account.pk]))
    assert listener.seen == []  # not one request, let alone the key


def test_a_stored_write_key_must_be_entered_again_too(world, account, listener):
    account_update(actor=world.inst_admin, account=account, write_key="rpa_WRITE_0000000001")
    with pytest.raises(DomainError) as refused:
        account_update(
            actor=world.inst_admin, account=account, base_url=listener.url, api_key="rpa_new_key"
        )
    assert refused.value.field == "write_key"
    account_update(
        actor=world.inst_admin,
        account=account,
        base_url=listener.url,
        api_key="rpa_new_key",
        remove_write_key=True,
    )
    account.refresh_from_db()
    assert (account.base_url, account.write_key_encrypted) == (listener.url, "")


# -- Production: only api.runpod.io and the hosts the operator named -------------------------


@PRODUCTION
def test_in_production_a_loopback_url_is_refused_even_with_the_key(
    world, account, listener, client_for
):
    client = client_for(world.inst_admin)
    response = _edit(client, account, base_url=listener.url, api_key=KEY)
    assert "only sent to https://api.runpod.io" in response.content.decode()
    response = client.post(
        reverse("runpod:account_new"),
        {"name": "Probe", "base_url": listener.url, "api_key": KEY},
    )
    assert response.status_code == 200
    assert not RunpodAccount.objects.filter(name="Probe").exists()
    assert listener.seen == []


@PRODUCTION
def test_in_production_a_stored_url_outside_the_allowed_hosts_gets_no_key(
    world, account, listener, client_for
):
    # Saved before the rule (or written by other means): checked again before every use.
    RunpodAccount.objects.filter(pk=account.pk).update(base_url=listener.url)
    response = client_for(world.inst_admin).post(reverse("runpod:account_test", args=[account.pk]))
    assert response.status_code == 302
    assert any("only sent to https://api.runpod.io" in m for m in _messages(response))
    assert listener.seen == []


@PRODUCTION
def test_in_production_open_and_closed_ports_answer_alike(world, account, listener, client_for):
    closed = Listener()
    closed_url = closed.url
    closed.server.server_close()  # nothing listens there any more
    client = client_for(world.inst_admin)
    answers = []
    for url in (listener.url, closed_url):
        RunpodAccount.objects.filter(pk=account.pk).update(base_url=url)
        response = client.post(reverse("runpod:account_test", args=[account.pk]), follow=True)
        answers.append([str(m).replace(url, "URL") for m in response.context["messages"]])
    assert answers[0] == answers[1]
    assert listener.seen == []


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.runpod.io", True),
        ("https://api.runpod.io/v2/", True),
        ("HTTPS://API.RUNPOD.IO", True),
        ("http://api.runpod.io", False),  # the key in clear text
        ("https://api.runpod.io:8443", False),
        ("https://api.runpod.io.evil.example", False),
        ("https://evil.example/api.runpod.io", False),
        ("https://evil.example#@api.runpod.io", False),
        ("http://127.0.0.1:8765", False),
        ("http://[::1]:8765", False),
        ("http://runpod-proxy.internal:8080", True),  # named by the operator
    ],
)
def test_allowed_hosts(url, allowed):
    with override_settings(LABGOV_RUNPOD_HOSTS=["runpod-proxy.internal"]):
        if allowed:
            assert base_url_check(url)
        else:
            with pytest.raises(DomainError):
                base_url_check(url)


def test_the_simulator_on_loopback_is_allowed_when_named(world, sim):
    with override_settings(LABGOV_RUNPOD_HOSTS=["127.0.0.1"]):
        account = account_connect(
            actor=world.inst_admin,
            institution=world.institution,
            name="Sim",
            api_key=sim.api_key,
            base_url=sim.base_url,
        )
    assert account.base_url == sim.base_url


# -- No credentials in the URL, and no key on an error page ----------------------------------


def test_userinfo_in_the_base_url_is_refused_in_words(world, account, client_for):
    response = _edit(
        client_for(world.inst_admin), account, base_url="http://user:pw@127.0.0.1:9", api_key=KEY
    )
    assert response.status_code == 200
    assert "must not contain a user name or password" in response.content.decode()


@override_settings(DEBUG=True)
def test_a_stored_url_with_userinfo_gives_words_not_a_debug_page(world, account, client):
    RunpodAccount.objects.filter(pk=account.pk).update(base_url="http://user:pw@127.0.0.1:9")
    client.raise_request_exception = False
    client.force_login(world.inst_admin)
    response = client.post(reverse("runpod:account_test", args=[account.pk]))
    assert response.status_code == 302
    assert any("must not contain a user name" in m for m in _messages(response))


def _error_report(caplog) -> str:
    """The report Django sends admins about a 500 (AdminEmailHandler builds it this way):
    where the key would leak in production, where DEBUG is off."""
    from django.views.debug import ExceptionReporter

    record = next(r for r in caplog.records if r.name == "django.request" and r.exc_info)
    return ExceptionReporter(record.request, *record.exc_info, is_email=True).get_traceback_text()


def test_the_error_report_of_a_failure_while_using_the_key_does_not_show_it(
    world, account, client, monkeypatch, caplog
):
    def broken(*args, **kwargs):
        raise RuntimeError("the connection pool could not be built")

    monkeypatch.setattr("labgov.runpod.session.httpx.Client", broken)
    client.raise_request_exception = False
    client.force_login(world.inst_admin)
    response = client.post(reverse("runpod:account_test", args=[account.pk]))
    assert response.status_code == 500
    report = _error_report(caplog)
    assert "could not be built" in report and "api_key" in report  # the frames are there
    assert KEY not in report


def test_the_error_report_of_a_failed_connect_does_not_show_the_posted_keys(
    world, client, monkeypatch, caplog
):
    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr("labgov.runpod.views.account_connect", broken)
    client.raise_request_exception = False
    client.force_login(world.inst_admin)
    response = client.post(
        reverse("runpod:account_new"),
        {"name": "X", "base_url": "https://api.runpod.io", "api_key": KEY, "write_key": KEY},
    )
    assert response.status_code == 500
    report = _error_report(caplog)
    assert "database went away" in report and "write_key" in report
    assert KEY not in report


# -- Redirects: not followed, and where they point is not repeated ---------------------------


def test_a_redirect_is_not_followed_and_its_target_not_shown(world, client_for):
    target = "http://169.254.169.254/latest/meta-data/iam/"
    with Listener(status=302, body=b"", headers={"Location": target}) as redirector:
        account = account_connect(
            actor=world.inst_admin,
            institution=world.institution,
            name="Redirected",
            api_key=KEY,
            base_url=redirector.url,
        )
        response = client_for(world.inst_admin).post(
            reverse("runpod:account_test", args=[account.pk])
        )
    shown = " ".join(_messages(response))
    assert "redirected" in shown
    assert "169.254" not in shown and "meta-data" not in shown
    assert len(redirector.seen) == 1  # asked once, never followed


def test_the_client_never_sends_the_key_to_a_redirect_target(listener):
    from labgov.runpod.client import RunpodClient
    from labgov.runpod.errors import RunpodBadResponse

    location = {"Location": listener.url + "/v2/pods"}
    with (
        Listener(status=307, body=b"", headers=location) as hop,
        RunpodClient(base_url=hop.url, api_key=KEY) as client,
        pytest.raises(RunpodBadResponse) as refused,
    ):
        client.list_pods()
    assert listener.seen == []
    assert listener.url not in refused.value.message


def test_the_listener_does_receive_keys_it_is_allowed_to(listener):
    # The listener works: a client pointed straight at it does send the key, so the tests
    # above that see nothing arrive mean labgov sent nothing.
    with httpx.Client() as plain:
        plain.get(listener.url, headers={"Authorization": f"Bearer {KEY}"})
    assert listener.keys_received == [f"Bearer {KEY}"]


@override_settings(DEBUG=True)
def test_even_the_debug_page_does_not_show_the_key(world, account, client, monkeypatch, caplog):
    """`make run` (DEBUG on) serves labgov's own 500 page, and Django's technical report of
    the same error (what error emails carry) hides the key too."""
    from django.views.debug import ExceptionReporter

    def broken(*args, **kwargs):
        raise RuntimeError("the connection pool could not be built")

    monkeypatch.setattr("labgov.runpod.session.httpx.Client", broken)
    client.raise_request_exception = False
    client.force_login(world.inst_admin)
    with caplog.at_level("ERROR", logger="django.request"):
        response = client.post(reverse("runpod:account_test", args=[account.pk]))
    page = response.content.decode()
    assert response.status_code == 500 and "Something went wrong" in page
    assert KEY not in page
    [record] = [r for r in caplog.records if r.exc_info]
    report = ExceptionReporter(record.request, *record.exc_info).get_traceback_html()
    assert "could not be built" in report
    assert KEY not in report
