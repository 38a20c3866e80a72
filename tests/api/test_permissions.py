"""The API's role × endpoint matrix, mirroring the pages' (tests/test_permissions.py): 200
shown or done, 201 created, 202 queued, 403 visible but not allowed, 404 not visible at all,
401 for a call without credentials. Every refusal is problem+json."""

import pytest

from tests.api.fixtures import objects  # noqa: F401 - a fixture
from tests.provisioning.conftest import catalog, draft, submitted  # noqa: F401 - fixtures

ROLES = ["inst_admin", "finance", "lab_admin", "member", "other_member", "outsider", "anonymous"]
V1 = "/api/v1/"

LISTS = [
    "institutions/",
    "labs/",
    "memberships/",
    "funding-sources/",
    "allocations/",
    "ledger-entries/",
    "provisioning-requests/",
    "runpod-accounts/",
    "resources/",
    "spend/daily/",
    "spend/monthly/",
    "alerts/",
    "notifications/",
    "invoices/",
    "invoice-lines/",
    "retention-cases/",
]


def _codes(**codes):
    return {role: codes.get(role, 404) for role in ROLES[:-1]}


MONEY_AND_LAB = dict(inst_admin=200, finance=200, lab_admin=200)

DETAILS = {
    # name: (url builder, expected)
    "institution": (
        lambda w, o: f"institutions/{w.institution.pk}/",
        _codes(**MONEY_AND_LAB, member=200, other_member=200),
    ),
    "lab": (lambda w, o: f"labs/{w.lab.pk}/", _codes(**MONEY_AND_LAB, member=200)),
    "other lab": (
        lambda w, o: f"labs/{w.other_lab.pk}/",
        _codes(inst_admin=200, finance=200, other_member=200),
    ),
    "membership": (
        lambda w, o: f"memberships/{o('membership').pk}/",
        _codes(**MONEY_AND_LAB, member=200),
    ),
    "funding source": (
        lambda w, o: f"funding-sources/{w.funding_source.pk}/",
        _codes(**MONEY_AND_LAB),
    ),
    "other lab's funding source": (
        lambda w, o: f"funding-sources/{w.other_funding_source.pk}/",
        _codes(inst_admin=200, finance=200),
    ),
    "allocation": (
        lambda w, o: f"allocations/{w.allocation.pk}/",
        _codes(**MONEY_AND_LAB, member=200),
    ),
    "request": (
        lambda w, o: f"provisioning-requests/{o('submitted').pk}/",
        _codes(**MONEY_AND_LAB, member=200),
    ),
    "shared account": (lambda w, o: f"runpod-accounts/{o('account').pk}/", _codes(**MONEY_AND_LAB)),
    "member's pod": (
        lambda w, o: f"resources/{o('paid_pod').pk}/",
        _codes(**MONEY_AND_LAB, member=200),
    ),
    "unattributed pod": (
        lambda w, o: f"resources/{o('unattributed_pod').pk}/",
        _codes(**MONEY_AND_LAB),
    ),
    "alert": (lambda w, o: f"alerts/{o('alert').pk}/", _codes(**MONEY_AND_LAB, member=200)),
    "invoice": (lambda w, o: f"invoices/{o('invoice').pk}/", _codes(**MONEY_AND_LAB)),
    "other lab's invoice": (
        lambda w, o: f"invoices/{o('other_invoice').pk}/",
        _codes(inst_admin=200, finance=200),
    ),
    # Lines are the holder's own (the My invoices page); the others read them on the invoice.
    "member's invoice line": (lambda w, o: f"invoice-lines/{o('line').pk}/", _codes(member=200)),
    "retention case": (
        lambda w, o: f"retention-cases/{o('retention_case').pk}/",
        _codes(**MONEY_AND_LAB, member=200),
    ),
    "member's notification": (
        lambda w, o: f"notifications/{o('notification').pk}/",
        _codes(member=200),
    ),
}

MANAGERS = dict(inst_admin=200, lab_admin=200, finance=403, member=403)
ACTIONS = {
    # name: (url builder, body builder, expected)
    "create request": (
        lambda w, o: "provisioning-requests/",
        lambda w, o: {
            "allocation": w.allocation.pk,
            "title": "Via the API",
            "deployment_model": "pod",
            "gpu_type_id": "NVIDIA H100 80GB HBM3",
            "gpu_count": 1,
            "cloud": "SECURE",
            "expected_hours": "2",
        },
        {role: 403 for role in ROLES[:-1]} | {"member": 201},
    ),
    "submit": (
        lambda w, o: f"provisioning-requests/{o('draft').pk}/submit/",
        lambda w, o: {},
        _codes(inst_admin=403, finance=403, lab_admin=403, member=200),
    ),
    "approve": (
        lambda w, o: f"provisioning-requests/{o('submitted').pk}/approve/",
        lambda w, o: {},
        _codes(**MANAGERS),
    ),
    "deny": (
        lambda w, o: f"provisioning-requests/{o('submitted').pk}/deny/",
        lambda w, o: {"reason": "No budget this month"},
        _codes(**MANAGERS),
    ),
    "acknowledge": (
        lambda w, o: f"alerts/{o('alert').pk}/acknowledge/",
        lambda w, o: {},
        _codes(**MANAGERS),
    ),
    "snooze": (
        lambda w, o: f"alerts/{o('alert').pk}/snooze/",
        lambda w, o: {"until": (o("now") + __import__("datetime").timedelta(days=3)).date()},
        _codes(**MANAGERS),
    ),
    "resolve": (
        lambda w, o: f"alerts/{o('alert').pk}/resolve/",
        lambda w, o: {"note": "Budget raised"},
        _codes(**MANAGERS),
    ),
    "sync": (
        lambda w, o: f"runpod-accounts/{o('account').pk}/sync/",
        lambda w, o: {},
        _codes(inst_admin=202, finance=403, lab_admin=403),
    ),
    "assign": (
        lambda w, o: f"resources/{o('unattributed_pod').pk}/assign/",
        lambda w, o: {"allocation": w.allocation.pk},
        _codes(inst_admin=200, finance=403, lab_admin=200),
    ),
}


def _user(world, role):
    return None if role == "anonymous" else getattr(world, role)


def _check(response, expected):
    assert response.status_code == expected, response.content[:400]
    if expected >= 400:
        assert response["Content-Type"] == "application/problem+json"
        body = response.json()
        assert body["status"] == expected and body["detail"] and body["title"]


@pytest.mark.parametrize("role", ROLES)
def test_lists(world, api, role):
    client = api(_user(world, role))
    for url in LISTS:
        _check(client.get(V1 + url), 401 if role == "anonymous" else 200)


@pytest.mark.parametrize("role", ROLES)
def test_details(world, api, objects, role):  # noqa: F811
    client = api(_user(world, role))
    for name, (url_for, expected) in DETAILS.items():
        response = client.get(V1 + url_for(world, objects))
        try:
            _check(response, 401 if role == "anonymous" else expected[role])
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


@pytest.mark.parametrize("role", ROLES)
def test_actions(world, api, objects, role):  # noqa: F811
    """Each action on an object of its own (an approval and a denial of the same request
    would refuse each other)."""
    client = api(_user(world, role))
    for name, (url_for, body_for, expected) in ACTIONS.items():
        objects.fresh()
        response = client.post(
            V1 + url_for(world, objects), body_for(world, objects), content_type="application/json"
        )
        try:
            _check(response, 401 if role == "anonymous" else expected[role])
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


def test_wrong_method(world, api, objects):  # noqa: F811
    client = api(world.inst_admin)
    for name, (url_for, _body, _expected) in ACTIONS.items():
        for method in ("get", "put", "patch", "delete"):
            if method == "get" and name == "create request":
                continue  # GET on the collection is its list
            _check(getattr(client, method)(V1 + url_for(world, objects)), 405)


def test_read_token_cannot_act(world, api, objects):  # noqa: F811
    alert = objects("alert")
    response = api(world.lab_admin, scope="read").post(V1 + f"alerts/{alert.pk}/acknowledge/")
    _check(response, 403)
    assert "only read" in response.json()["detail"]
    alert.refresh_from_db()
    assert alert.state == "open"
