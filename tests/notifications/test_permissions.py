"""The permission matrix of the notification settings and lab webhook pages.

200 shown, 302 done, 403 visible but not allowed, 404 not visible at all, "login" sent to the
login page; the wrong HTTP method is a 405.
"""

import pytest
from django.urls import reverse

from labgov.notifications.models import LabWebhook
from labgov.notifications.services import notify, webhook_save

ROLES = ["inst_admin", "finance", "lab_admin", "member", "other_member", "outsider", "anonymous"]
# Configuring a lab's webhook: its lab admins and the institution's admins. Finance and the
# lab's members see the lab (403); everyone else does not (404).
LAB = {
    "inst_admin": "ok",
    "finance": 403,
    "lab_admin": "ok",
    "member": 403,
    "other_member": 404,
    "outsider": 404,
    "anonymous": "login",
}


def _client(world, client_for, role):
    return client_for(None if role == "anonymous" else getattr(world, role))


def _check(response, expected, ok_code):
    if expected == "login":
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
    else:
        assert response.status_code == (ok_code if expected == "ok" else expected)


@pytest.fixture
def webhook(world, hook_server):
    return webhook_save(actor=world.lab_admin, lab=world.lab, url=hook_server.url)


@pytest.mark.parametrize("role", ROLES)
def test_webhook_page(world, client_for, role):
    response = _client(world, client_for, role).get(
        reverse("notifications:lab_webhook", args=[world.lab.pk])
    )
    _check(response, LAB[role], 200)


@pytest.mark.parametrize("role", ROLES)
def test_webhook_save(world, client_for, hook_server, role):
    response = _client(world, client_for, role).post(
        reverse("notifications:lab_webhook", args=[world.lab.pk]),
        {"url": hook_server.url, "is_active": "on", "min_severity": "critical"},
    )
    _check(response, LAB[role], 302)
    assert LabWebhook.objects.filter(lab=world.lab).exists() == (LAB[role] == "ok")


@pytest.mark.parametrize("role", ROLES)
def test_webhook_test_message(world, client_for, webhook, hook_server, role):
    response = _client(world, client_for, role).post(
        reverse("notifications:lab_webhook_test", args=[world.lab.pk])
    )
    _check(response, LAB[role], 302)
    assert len(hook_server.posts) == (1 if LAB[role] == "ok" else 0)


def test_another_labs_webhook_is_not_found_for_a_lab_admin(world, client_for):
    url = reverse("notifications:lab_webhook", args=[world.other_lab.pk])
    assert client_for(world.lab_admin).get(url).status_code == 404
    assert client_for(world.inst_admin).get(url).status_code == 200


def test_testing_a_webhook_that_does_not_exist_is_not_found(world, client_for):
    url = reverse("notifications:lab_webhook_test", args=[world.lab.pk])
    assert client_for(world.lab_admin).post(url).status_code == 404


@pytest.mark.parametrize(
    ("name", "method"),
    [
        ("notifications:lab_webhook", "put"),
        ("notifications:lab_webhook", "delete"),
        ("notifications:lab_webhook_test", "get"),
    ],
)
def test_wrong_methods(world, client_for, name, method):
    url = reverse(name, args=[world.lab.pk])
    assert getattr(client_for(world.lab_admin), method)(url).status_code == 405


@pytest.mark.parametrize("role", ROLES)
def test_settings_page_is_everyones_own(world, client_for, role):
    response = _client(world, client_for, role).get(reverse("notifications:settings"))
    _check(response, "login" if role == "anonymous" else "ok", 200)


def test_settings_wrong_method(world, client_for):
    assert client_for(world.member).delete(reverse("notifications:settings")).status_code == 405


def test_a_bad_url_is_shown_beside_the_field(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("notifications:lab_webhook", args=[world.lab.pk]),
        {"url": "http://hooks.example.com/x", "min_severity": "warning"},
    )
    assert response.status_code == 200
    assert "must use https://" in response.content.decode()
    assert not LabWebhook.objects.exists()


def test_the_page_shows_the_url_masked(world, client_for, webhook):
    page = client_for(world.lab_admin).get(
        reverse("notifications:lab_webhook", args=[world.lab.pk])
    )
    content = page.content.decode()
    assert "127.0.0.1 …XYZ9" in content and "secretXYZ9" not in content


def test_webhook_page_query_count_is_flat(
    world, client_for, webhook, hook_server, django_assert_num_queries
):
    client = client_for(world.lab_admin)
    url = reverse("notifications:lab_webhook", args=[world.lab.pk])
    notify(
        recipients=[], kind="t", subject="s", dedupe_key="first", severity="critical", lab=world.lab
    )
    # session, user, the role scope (also serves the nav), the lab, the webhook, its deliveries
    with django_assert_num_queries(6):
        client.get(url)
    for i in range(10):
        notify(
            recipients=[],
            kind="t",
            subject="s",
            dedupe_key=f"k{i}",
            severity="critical",
            lab=world.lab,
        )
    with django_assert_num_queries(6):
        client.get(url)
