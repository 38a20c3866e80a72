"""Every dashboard page and CSV download × every role, and the wrong HTTP method.

200 shown, 403 visible but not allowed, 404 not visible at all; anonymous people are sent to
the login page."""

import pytest
from django.urls import reverse

ROLES = ["inst_admin", "finance", "lab_admin", "member", "outsider", "anonymous"]
ALL = dict.fromkeys(ROLES[:-1], 200)

PAGES = {
    # name: (url builder, a table of the page, {role: expected})
    "my spend": (lambda w: reverse("dashboard:me"), "allocations", ALL),
    "lab": (
        lambda w: reverse("dashboard:lab", args=[w.lab.pk]),
        "funding",
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 403, "outsider": 404},
    ),
    "other lab": (
        lambda w: reverse("dashboard:lab", args=[w.other_lab.pk]),
        "people",
        {"inst_admin": 200, "finance": 200, "lab_admin": 404, "member": 404, "outsider": 404},
    ),
    "funding source": (
        lambda w: reverse("dashboard:funding", args=[w.funding_source.pk]),
        "storage",
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "other lab's funding source": (
        lambda w: reverse("dashboard:funding", args=[w.other_funding_source.pk]),
        "categories",
        {"inst_admin": 200, "finance": 200, "lab_admin": 404, "member": 404, "outsider": 404},
    ),
    "institution": (
        lambda w: reverse("dashboard:institution"),
        "labs",
        # The outsider is an institution admin elsewhere: they see their own institution.
        {"inst_admin": 200, "finance": 200, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
}


def _user(world, role):
    return None if role == "anonymous" else getattr(world, role)


@pytest.mark.parametrize("csv", [False, True], ids=["page", "csv"])
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", list(PAGES))
def test_pages_and_their_csv(world, client_for, page, role, csv):
    url_for, table, expected = PAGES[page]
    query = {"format": "csv", "table": table} if csv else {}
    response = client_for(_user(world, role)).get(url_for(world), query)
    if role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))
        return
    assert response.status_code == expected[role], response.content[:300]
    if csv and response.status_code == 200:
        assert response["Content-Type"].startswith("text/csv")


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
@pytest.mark.parametrize("page", list(PAGES))
def test_wrong_method(world, client_for, page, method):
    response = getattr(client_for(world.inst_admin), method)(PAGES[page][0](world))
    assert response.status_code == 405
