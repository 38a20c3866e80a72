"""Issue 9: a lab admin cannot make labgov post into its own network through a webhook: not
with an IPv6 spelling of a private IPv4 address, not with a name that does not resolve, and
not with a name that resolves to a public address for the check and a private one for the
connection (DNS rebinding)."""

import datetime as dt
import json
import socket
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from labgov.core.errors import DomainError
from labgov.notifications import services
from labgov.notifications.models import LabWebhook
from labgov.notifications.services import webhook_save, webhook_send_test
from tests.notifications.conftest import HookServer

PUBLIC = "93.184.216.34"


@pytest.fixture
def no_allowed_hosts(settings):
    settings.LABGOV_WEBHOOK_HTTP_HOSTS = []


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (cloud metadata)
        "64:ff9b:1::a00:1",  # local-use NAT64 of 10.0.0.1
        "::127.0.0.1",  # IPv4-compatible
        "::a00:1",  # IPv4-compatible 10.0.0.1
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:192.168.1.1",
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    ],
)
def test_ipv6_spellings_of_private_ipv4_addresses_are_refused(
    world, address, no_allowed_hosts, fake_dns
):
    with pytest.raises(DomainError, match="private address"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url=f"https://[{address}]/hook")
    fake_dns.table["sneaky.example"] = [address]
    with pytest.raises(DomainError, match="private address"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url="https://sneaky.example/hook")
    assert not LabWebhook.objects.exists()


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", PUBLIC])
def test_public_addresses_in_those_forms_are_taken(world, address, no_allowed_hosts, fake_dns):
    fake_dns.table["hooks.example"] = [address]
    assert webhook_save(actor=world.lab_admin, lab=world.lab, url="https://hooks.example/h").pk


@pytest.mark.parametrize("address", ["224.0.1.1", "233.252.0.1", "239.255.255.250", "ff0e::1"])
def test_multicast_addresses_are_refused(world, address, no_allowed_hosts, fake_dns):
    """Python counts global-scope multicast as global; a post to it reaches whatever listens
    on the local network."""
    literal = f"[{address}]" if ":" in address else address
    with pytest.raises(DomainError, match="multicast address"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url=f"https://{literal}/hook")
    fake_dns.table["group.example"] = [address]
    with pytest.raises(DomainError, match="multicast address"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url="https://group.example/hook")
    assert not LabWebhook.objects.exists()


def test_a_name_with_any_private_address_is_refused(world, no_allowed_hosts, fake_dns):
    fake_dns.table["split.example"] = [PUBLIC, "10.1.2.3"]
    with pytest.raises(DomainError, match=r"private address \(10.1.2.3\)"):
        webhook_save(actor=world.lab_admin, lab=world.lab, url="https://split.example/h")


def test_a_name_that_does_not_resolve_is_refused(world, no_allowed_hosts, fake_dns):
    fake_dns.table["nowhere.example"] = []
    with pytest.raises(DomainError, match="could not be resolved") as caught:
        webhook_save(actor=world.lab_admin, lab=world.lab, url="https://nowhere.example/h")
    assert caught.value.field == "url"
    assert not LabWebhook.objects.exists()


def test_the_post_connects_to_the_address_that_was_checked(
    world, no_allowed_hosts, fake_dns, monkeypatch
):
    """The name answers a public address to every check, then 127.0.0.1 to anyone asking a
    moment later. labgov resolves once per post and connects to that address."""
    answers = iter([[PUBLIC], [PUBLIC]])
    fake_dns.table["rebind.example"] = lambda: next(answers, ["127.0.0.1"])
    webhook = webhook_save(actor=world.lab_admin, lab=world.lab, url="https://rebind.example/h")
    connected = []

    def create_connection(address, *args, **kwargs):
        connected.append(address[:2])
        raise ConnectionRefusedError("not in tests")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
    assert not ok and message.startswith("Could not reach rebind.example: ConnectError")
    assert connected == [(PUBLIC, 443)]
    assert fake_dns.lookups == ["rebind.example", "rebind.example"]  # saving, posting


def test_a_name_that_stopped_resolving_is_not_posted_to(world, no_allowed_hosts, fake_dns):
    fake_dns.table["gone.example"] = [PUBLIC]
    webhook = webhook_save(actor=world.lab_admin, lab=world.lab, url="https://gone.example/h")
    fake_dns.table["gone.example"] = []
    ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
    assert not ok and "could not be resolved" in message


def test_a_delivery_to_a_name_that_stopped_resolving_is_retried(world, no_allowed_hosts, fake_dns):
    from labgov.notifications.models import WebhookDelivery
    from labgov.notifications.services import WebhookTransientError, notify, webhook_deliver

    fake_dns.table["gone.example"] = [PUBLIC]
    webhook_save(actor=world.lab_admin, lab=world.lab, url="https://gone.example/h")
    fake_dns.table["gone.example"] = []
    notify(recipients=[], kind="t", subject="s", dedupe_key="k", severity="critical", lab=world.lab)
    delivery = WebhookDelivery.objects.get()
    with pytest.raises(WebhookTransientError):
        webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "pending" and "could not be resolved" in delivery.last_error


def test_http_post_keeps_the_hosts_name_in_the_host_header(world, settings, fake_dns):
    receiver = HookServer()
    try:
        settings.LABGOV_WEBHOOK_HTTP_HOSTS = ["receiver.test"]
        fake_dns.table["receiver.test"] = ["127.0.0.1"]
        webhook = webhook_save(
            actor=world.lab_admin,
            lab=world.lab,
            url=f"http://receiver.test:{receiver.port}/services/x",
        )
        ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
        assert ok, message
        assert receiver.hosts == [f"receiver.test:{receiver.port}"]
        assert fake_dns.lookups == ["receiver.test", "receiver.test"]
    finally:
        receiver.close()


def _certificate_for(name: str):
    """A self-signed certificate for `name` (its own CA), as PEM files' contents."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def test_https_post_to_the_checked_address_verifies_the_hosts_certificate(
    world, settings, fake_dns, monkeypatch, tmp_path
):
    """Connected by address, the TLS handshake still names the host (SNI) and the
    certificate is checked against the host's name, not the address."""
    cert_pem, key_pem = _certificate_for("hooks.test")
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    names = []
    server_tls.sni_callback = lambda sock, name, ctx: names.append(name)
    client_tls = ssl.create_default_context(cadata=cert_pem.decode())
    monkeypatch.setattr(services, "_tls_context", lambda: client_tls)
    receiver = HookServer(tls=server_tls)
    try:
        settings.LABGOV_WEBHOOK_HTTP_HOSTS = ["hooks.test", "other.test"]
        fake_dns.table["hooks.test"] = ["127.0.0.1"]
        url = f"https://hooks.test:{receiver.port}/services/x"
        webhook = webhook_save(actor=world.lab_admin, lab=world.lab, url=url)
        ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
        assert ok, message
        assert names == ["hooks.test"]
        assert receiver.hosts == [f"hooks.test:{receiver.port}"]
        assert json.dumps(receiver.posts[0]).startswith('{"text": "[Info] Test message')
        # The same server under another name fails the certificate check.
        fake_dns.table["other.test"] = ["127.0.0.1"]
        webhook = webhook_save(
            actor=world.lab_admin, lab=world.lab, url=f"https://other.test:{receiver.port}/x"
        )
        ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
        assert not ok and "CERTIFICATE_VERIFY_FAILED" in message
    finally:
        receiver.close()


def test_an_error_naming_the_rewritten_url_does_not_leak_its_path(
    world, no_allowed_hosts, fake_dns, monkeypatch
):
    import httpx

    fake_dns.table["hooks.example"] = [PUBLIC]
    webhook = webhook_save(
        actor=world.lab_admin, lab=world.lab, url="https://hooks.example/services/T/B/secretXYZ9"
    )

    def post(self, url, **kwargs):
        raise httpx.ConnectError(f"failed to connect to {url}")

    monkeypatch.setattr(httpx.Client, "post", post)
    ok, message = webhook_send_test(actor=world.lab_admin, webhook=webhook)
    assert not ok and "secretXYZ9" not in message and PUBLIC in message
