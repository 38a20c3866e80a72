import datetime as dt
from decimal import Decimal

import pytest
from django.urls import reverse

from labgov.runpod.attribution import unattributed_refresh
from labgov.runpod.models import AttributionRule, BillingRecord, SyncRun
from tests.factories import AllocationFactory, ResourceFactory, RunpodAccountFactory

ROLES = ["inst_admin", "finance", "lab_admin", "member", "outsider", "anonymous"]
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


@pytest.fixture
def objects(world):
    account = RunpodAccountFactory(institution=world.institution, name="Institution account")
    pod = ResourceFactory(account=account, name="stray-pod")
    BillingRecord.objects.create(
        resource=pod,
        kind="pod",
        bucket_start=T0,
        bucket_end=T0 + dt.timedelta(hours=1),
        total_usd=Decimal("1.25"),
        gpu_usd=Decimal("1.25"),
    )
    unattributed_refresh(account=account)
    rule = AttributionRule.objects.create(
        lab=world.lab,
        account=account,
        kind="name_prefix",
        pattern="vision-",
        allocation=world.allocation,
    )
    return {"account": account, "pod": pod, "rule": rule}


def _user(world, role):
    return None if role == "anonymous" else getattr(world, role)


GET_PAGES = {
    "accounts": (lambda o: reverse("runpod:account_list"), dict.fromkeys(ROLES[:-1], 200)),
    "connect": (
        lambda o: reverse("runpod:account_new"),
        {"inst_admin": 200, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 200},
    ),
    "account detail": (
        lambda o: reverse("runpod:account_detail", args=[o["account"].pk]),
        {"inst_admin": 200, "finance": 200, "lab_admin": 200, "member": 404, "outsider": 404},
    ),
    "account edit": (
        lambda o: reverse("runpod:account_edit", args=[o["account"].pk]),
        {"inst_admin": 200, "finance": 403, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "resources": (lambda o: reverse("runpod:resources"), dict.fromkeys(ROLES[:-1], 200)),
    "unattributed": (
        lambda o: reverse("runpod:unattributed"),
        {**dict.fromkeys(ROLES[:-1], 200), "member": 403},
    ),
    "rules": (lambda o: reverse("runpod:rules"), dict.fromkeys(ROLES[:-1], 200)),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", list(GET_PAGES))
def test_get_pages(world, objects, client_for, page, role):
    url_for, expected = GET_PAGES[page]
    response = client_for(_user(world, role)).get(url_for(objects))
    if role == "anonymous":
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
    else:
        assert response.status_code == expected[role]


POSTS = {
    "connect": (
        lambda w, o: reverse("runpod:account_new"),
        lambda w, o: {
            "name": "New",
            "base_url": "http://127.0.0.1:9",
            "api_key": "rpa_secret_1234",
        },
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 302},
    ),
    "edit": (
        lambda w, o: reverse("runpod:account_edit", args=[o["account"].pk]),
        lambda w, o: {"name": "Renamed", "base_url": "http://127.0.0.1:9", "api_key": ""},
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "test connection": (
        lambda w, o: reverse("runpod:account_test", args=[o["account"].pk]),
        lambda w, o: {},
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "sync now": (
        lambda w, o: reverse("runpod:account_sync", args=[o["account"].pk]),
        lambda w, o: {},
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 404, "outsider": 404},
    ),
    "assign": (
        lambda w, o: reverse("runpod:resource_assign", args=[o["pod"].pk]),
        lambda w, o: {"allocation": w.allocation.pk},
        {"inst_admin": 302, "finance": 403, "lab_admin": 302, "member": 404, "outsider": 404},
    ),
    "add rule": (
        lambda w, o: reverse("runpod:rules"),
        lambda w, o: {
            "account": o["account"].pk,
            "kind": "name_prefix",
            "pattern": "nlp-",
            "allocation": w.allocation.pk,
        },
        # The account is shared by the institution's labs: its rules are an institution
        # admin's (issue 9: a lab admin's rule there claimed other labs' resources).
        {"inst_admin": 302, "finance": 403, "lab_admin": 403, "member": 403, "outsider": 403},
    ),
    "switch rule off": (
        lambda w, o: reverse("runpod:rule_deactivate", args=[o["rule"].pk]),
        lambda w, o: {},
        {"inst_admin": 302, "finance": 403, "lab_admin": 302, "member": 404, "outsider": 404},
    ),
}


@pytest.fixture
def no_network(monkeypatch):
    """Connection tests answer at once; queued syncs are recorded, not run."""
    from labgov.runpod import views
    from labgov.runpod.client import ConnectionCheck

    monkeypatch.setattr(
        views,
        "account_test_connection",
        lambda account: [ConnectionCheck(ok=False, message="no network")],
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", list(POSTS))
def test_post_actions(world, objects, client_for, no_network, action, role):
    url_for, data_for, expected = POSTS[action]
    response = client_for(_user(world, role)).post(
        url_for(world, objects), data_for(world, objects)
    )
    if role == "anonymous":
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
    else:
        assert response.status_code == expected[role], response.content[:300]


@pytest.mark.parametrize("action", ["test connection", "sync now", "assign", "switch rule off"])
def test_mutations_refuse_get(world, objects, client_for, action):
    url = POSTS[action][0](world, objects)
    assert client_for(world.inst_admin).get(url).status_code == 405


@pytest.mark.parametrize("page", ["connect", "edit", "add rule"])
def test_forms_refuse_put_and_delete(world, objects, client_for, page):
    url = POSTS[page][0](world, objects)
    client = client_for(world.inst_admin)
    assert client.put(url).status_code == 405
    assert client.delete(url).status_code == 405


def test_sync_now_queues_after_commit(
    world, objects, client_for, django_capture_on_commit_callbacks, monkeypatch
):
    queued = []
    from labgov.runpod import tasks

    monkeypatch.setattr(tasks.sync_account, "delay", lambda *args: queued.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        client_for(world.inst_admin).post(
            reverse("runpod:account_sync", args=[objects["account"].pk])
        )
    assert queued == [(objects["account"].pk, "manual", world.inst_admin.pk)]


def test_running_sync_polls_with_progress(world, objects, client_for):
    SyncRun.objects.create(
        account=objects["account"], phase="billing", progress_done=3, progress_total=12
    )
    client = client_for(world.inst_admin)
    page = client.get(
        reverse("runpod:account_detail", args=[objects["account"].pk])
    ).content.decode()
    assert (
        'hx-trigger="every 2s"' in page
        and "3 of 12" in page
        and '<progress class="progress" max="100" value="25">' in page
    )
    fragment = client.get(
        reverse("runpod:account_detail", args=[objects["account"].pk]),
        headers={"HX-Request": "true"},
    ).content.decode()
    assert fragment.lstrip().startswith('<div id="sync-status"')


def test_failures_are_shown_in_words(world, objects, client_for):
    SyncRun.objects.create(
        account=objects["account"],
        status="failed",
        error="Runpod refused the API key (401).",
        finished_at=T0,
    )
    page = client_for(world.finance).get(
        reverse("runpod:account_detail", args=[objects["account"].pk])
    )
    assert "Runpod refused the API key (401)." in page.content.decode()


def test_unattributed_queue_and_htmx_assign(world, objects, client_for):
    client = client_for(world.lab_admin)
    page = client.get(reverse("runpod:unattributed")).content.decode()
    assert "stray-pod" in page and "$1.25" in page
    response = client.post(
        reverse("runpod:resource_assign", args=[objects["pod"].pk]),
        {"allocation": world.allocation.pk},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200 and 'id="resource-' in response.content.decode()
    assert BillingRecord.objects.get().allocation == world.allocation
    assert "stray-pod" not in client.get(reverse("runpod:unattributed")).content.decode()


def test_lab_admin_cannot_assign_to_another_labs_allocation(world, objects, client_for):
    theirs = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    response = client_for(world.lab_admin).post(
        reverse("runpod:resource_assign", args=[objects["pod"].pk]), {"allocation": theirs.pk}
    )
    assert response.status_code == 302
    assert BillingRecord.objects.get().allocation is None


def test_member_sees_only_resources_they_pay_for(world, objects, client_for):
    mine = ResourceFactory(
        account=objects["account"], name="mine", current_allocation=world.allocation
    )
    page = client_for(world.member).get(reverse("runpod:resources")).content.decode()
    assert mine.name in page
    assert "stray-pod" not in page


def test_resource_list_shows_stopped_storage_cost(world, objects, client_for):
    ResourceFactory(
        account=objects["account"], name="stopped-pod", status="EXITED", volume_disk_gb=100
    )
    page = client_for(world.inst_admin).get(reverse("runpod:resources")).content.decode()
    assert "stopped-pod" in page and "$20.00" in page  # 100 GB at $0.20/GB/month


def test_assign_choices_are_the_lab_admins_allocations(world, objects, client_for):
    theirs = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    page = client_for(world.lab_admin).get(reverse("runpod:unattributed")).content.decode()
    assert f'<option value="{world.allocation.pk}">' in page
    assert f'<option value="{theirs.pk}">' not in page


def test_a_lab_admins_account_wide_rule_on_the_shared_account_claims_nothing(
    world, objects, client_for
):
    """Issue 9, attack 4, through the page: nothing is claimed, nothing can be acted on."""
    response = client_for(world.lab_admin).post(
        reverse("runpod:rules"),
        {"account": objects["account"].pk, "kind": "account", "allocation": world.allocation.pk},
    )
    assert response.status_code == 403
    assert not AttributionRule.objects.filter(kind="account").exists()
    objects["pod"].refresh_from_db()
    assert objects["pod"].current_allocation is None


def test_a_lab_admin_makes_rules_on_the_labs_own_account(world, objects, client_for):
    own = RunpodAccountFactory(institution=world.institution, lab=world.lab, name="Vision team")
    page = client_for(world.lab_admin).get(reverse("runpod:rules")).content.decode()
    assert "Vision team" in page and "Institution account</option>" not in page
    assert "Applies from (UTC)" not in page  # only institution admins start a rule earlier
    response = client_for(world.lab_admin).post(
        reverse("runpod:rules"),
        {"account": own.pk, "kind": "account", "allocation": world.allocation.pk},
    )
    assert response.status_code == 302
    assert AttributionRule.objects.get(account=own).created_by == world.lab_admin


def test_an_institution_admin_starts_a_rule_earlier_from_the_page(world, objects, client_for):
    response = client_for(world.inst_admin).post(
        reverse("runpod:rules"),
        {
            "account": objects["account"].pk,
            "kind": "account",
            "allocation": world.allocation.pk,
            "starts_at": "2026-11-01 00:00",
        },
    )
    assert response.status_code == 302
    assert AttributionRule.objects.get(kind="account").starts_at == T0
    objects["pod"].refresh_from_db()
    assert objects["pod"].current_allocation == world.allocation
    assert objects["pod"].unattributed_usd == 0  # its bucket at T0 moved with it


def test_a_member_is_told_accounts_are_connected_not_that_there_are_none(world, client_for):
    """It said "No Runpod account is connected yet" to a member while two were connected."""
    client = client_for(world.member)
    assert (
        "No Runpod account is connected yet"
        in client.get(reverse("runpod:account_list")).content.decode()
    )
    RunpodAccountFactory(institution=world.institution)
    RunpodAccountFactory(institution=world.institution)
    html = client.get(reverse("runpod:account_list")).content.decode()
    assert "No Runpod account is connected yet" not in html
    assert "2 Runpod accounts are connected to your institution" in html
    assert reverse("dashboard:me") in html
    # An outsider's institution has none: nothing about Northfield's is told.
    assert (
        "No Runpod account is connected yet"
        in client_for(world.outsider).get(reverse("runpod:account_list")).content.decode()
    )
