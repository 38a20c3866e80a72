"""The permission matrix of every provisioning page and action.

200 shown, 302 done (redirect), 403 visible but not allowed, 404 not visible at all;
anonymous people are sent to the login page.
"""

from decimal import Decimal as D

import pytest
from django.urls import reverse

from labgov.provisioning.services import request_approve
from labgov.provisioning.services.provision import provisioning_fail
from tests.factories import RunpodAccountFactory
from tests.provisioning.conftest import CLUSTER_CHECKLIST, listed_cluster

ROLES = ["inst_admin", "finance", "lab_admin", "member", "other_member", "outsider", "anonymous"]
CLUSTER = {
    "deployment_model": "cluster",
    "node_count": 2,
    "runs_distributed": True,
    **CLUSTER_CHECKLIST,
    "expected_hours": D(1),
}


def _user(world, role):
    return None if role == "anonymous" else getattr(world, role)


@pytest.fixture
def objects(world, draft, submitted, runpod_lists):
    """A request in the state a page or action needs, made only when asked for."""
    runpod_lists["clusters"].append(listed_cluster("cluster-1"))

    def failed():
        req = request_approve(actor=world.lab_admin, req=submitted())
        return provisioning_fail(request_id=req.pk, message="402")

    makers = {
        "draft": draft,
        "submitted": submitted,
        "approved_cluster": lambda: request_approve(
            actor=world.lab_admin, req=submitted(**CLUSTER)
        ),
        "failed": failed,
        "account": lambda: RunpodAccountFactory(institution=world.institution),
    }
    made = {}

    def get(name):
        if name not in made:
            made[name] = makers[name]()
        return made[name]

    return get


def _all(code, **overrides):
    return {**dict.fromkeys(ROLES[:-1], code), **overrides}


GET_PAGES = {
    "list": (lambda w, o: reverse("provisioning:list"), _all(200)),
    "estimate": (lambda w, o: reverse("provisioning:estimate"), _all(200)),
    "new": (lambda w, o: reverse("provisioning:new"), _all(403, member=200, other_member=403)),
    "review": (
        lambda w, o: reverse("provisioning:review"),
        _all(403, inst_admin=200, lab_admin=200),
    ),
    "policies": (
        lambda w, o: reverse("provisioning:policies"),
        _all(403, inst_admin=200, lab_admin=200, outsider=200),
    ),
    "lab policy": (
        lambda w, o: reverse("provisioning:policy_lab", args=[w.lab.pk]),
        _all(403, inst_admin=200, lab_admin=200, other_member=404, outsider=404),
    ),
    "other lab's policy": (
        lambda w, o: reverse("provisioning:policy_lab", args=[w.other_lab.pk]),
        _all(403, inst_admin=200, lab_admin=404, member=404, outsider=404),
    ),
    "institution default policy": (
        lambda w, o: reverse("provisioning:policy_default", args=[w.institution.pk]),
        _all(403, inst_admin=200, outsider=404),
    ),
    "detail": (
        lambda w, o: reverse("provisioning:detail", args=[o("submitted").pk]),
        _all(200, other_member=404, outsider=404),
    ),
    "edit draft": (
        lambda w, o: reverse("provisioning:edit", args=[o("draft").pk]),
        _all(403, member=200, other_member=404, outsider=404),
    ),
    "mark provisioned": (
        lambda w, o: reverse("provisioning:mark_provisioned", args=[o("approved_cluster").pk]),
        _all(403, inst_admin=200, lab_admin=200, other_member=404, outsider=404),
    ),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", list(GET_PAGES))
def test_get_pages(world, objects, client_for, page, role):
    url_for, expected = GET_PAGES[page]
    response = client_for(_user(world, role)).get(url_for(world, objects))
    if role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))
    else:
        assert response.status_code == expected[role], response.content[:300]


def _policy_data():
    return {
        "allowed_models": ["pod"],
        "allowed_clouds": ["SECURE"],
        "auto_approve_under_usd": "0",
    }


def _new_data(w, o):
    return {
        "allocation": w.allocation.pk,
        "title": "Posted",
        "deployment_model": "pod",
        "gpu_type_id": "NVIDIA H100 80GB HBM3",
        "gpu_count": "1",
        "cloud": "SECURE",
        "image": "img",
        "expected_hours": "1",
        "node_count": "1",
        "container_disk_gb": "20",
        "draft": "1",
    }


POSTS = {
    "new": (
        lambda w, o: reverse("provisioning:new"),
        _new_data,
        _all(403, member=302),
    ),
    "edit draft": (
        lambda w, o: reverse("provisioning:edit", args=[o("draft").pk]),
        _new_data,
        _all(403, member=302, other_member=404, outsider=404),
    ),
    "submit": (
        lambda w, o: reverse("provisioning:submit", args=[o("draft").pk]),
        lambda w, o: {},
        _all(403, member=302, other_member=404, outsider=404),
    ),
    "approve": (
        lambda w, o: reverse("provisioning:approve", args=[o("submitted").pk]),
        lambda w, o: {},
        _all(403, inst_admin=302, lab_admin=302, other_member=404, outsider=404),
    ),
    "deny": (
        lambda w, o: reverse("provisioning:deny", args=[o("submitted").pk]),
        lambda w, o: {"reason": "Not now."},
        _all(403, inst_admin=302, lab_admin=302, other_member=404, outsider=404),
    ),
    "cancel": (
        lambda w, o: reverse("provisioning:cancel", args=[o("submitted").pk]),
        lambda w, o: {},
        _all(302, finance=403, other_member=404, outsider=404),
    ),
    "retry": (
        lambda w, o: reverse("provisioning:retry", args=[o("failed").pk]),
        lambda w, o: {},
        _all(302, finance=403, other_member=404, outsider=404),
    ),
    "mark provisioned": (
        lambda w, o: reverse("provisioning:mark_provisioned", args=[o("approved_cluster").pk]),
        lambda w, o: {"account": o("account").pk, "runpod_id": "cluster-1"},
        _all(403, inst_admin=302, lab_admin=302, other_member=404, outsider=404),
    ),
    "lab policy": (
        lambda w, o: reverse("provisioning:policy_lab", args=[w.lab.pk]),
        lambda w, o: _policy_data(),
        _all(403, inst_admin=302, lab_admin=302, other_member=404, outsider=404),
    ),
    "institution default policy": (
        lambda w, o: reverse("provisioning:policy_default", args=[w.institution.pk]),
        lambda w, o: _policy_data(),
        _all(403, inst_admin=302, outsider=404),
    ),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(POSTS))
def test_post_actions(world, objects, client_for, action, role):
    url_for, data_for, expected = POSTS[action]
    response = client_for(_user(world, role)).post(
        url_for(world, objects), data_for(world, objects)
    )
    if role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))
    else:
        assert response.status_code == expected[role], response.content[:500]


POST_ONLY = ["submit", "approve", "deny", "cancel", "retry"]


@pytest.mark.parametrize("action", list(POSTS))
@pytest.mark.parametrize("method", ["put", "delete", "patch"])
def test_wrong_method(world, objects, client_for, action, method):
    url = POSTS[action][0](world, objects)
    response = getattr(client_for(world.inst_admin), method)(url)
    assert response.status_code == 405


@pytest.mark.parametrize("action", POST_ONLY)
def test_actions_reject_get(world, objects, client_for, action):
    url = POSTS[action][0](world, objects)
    assert client_for(world.inst_admin).get(url).status_code == 405


@pytest.mark.parametrize("page", ["list", "estimate", "review", "policies", "detail"])
def test_read_pages_reject_post(world, objects, client_for, page):
    url = GET_PAGES[page][0](world, objects)
    assert client_for(world.inst_admin).post(url).status_code == 405
