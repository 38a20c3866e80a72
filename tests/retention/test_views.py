"""Every retention page and action as each role (lab admin, institution admin, finance, the
owner, another lab's member, an outsider, anonymous) and with the wrong method."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.retention.models import RetentionCase, State
from tests.retention.conftest import make_pod, make_volume, open_case

ROLES = ["inst_admin", "finance", "lab_admin", "member", "other_member", "outsider", "anonymous"]


@pytest.fixture
def case(world, account, ending_grant, policy):
    _, allocation = ending_grant
    volume = make_volume(
        account,
        allocation,
        name="grant-data",
        created_at_runpod=timezone.now() - dt.timedelta(days=3),
    )
    return open_case(volume)


def _as(client_for, world, role):
    return client_for(None if role == "anonymous" else getattr(world, role))


PAGES = {
    "list": (
        lambda w, c: reverse("retention:list"),
        {
            "inst_admin": 200,
            "finance": 200,
            "lab_admin": 200,
            "member": 200,
            "other_member": 200,
            "outsider": 200,
        },
    ),
    "detail": (
        lambda w, c: reverse("retention:detail", args=[c.pk]),
        {
            "inst_admin": 200,
            "finance": 200,
            "lab_admin": 200,
            "member": 200,
            "other_member": 404,
            "outsider": 404,
        },
    ),
    "policies": (
        lambda w, c: reverse("retention:policies"),
        {
            "inst_admin": 200,
            "finance": 403,
            "lab_admin": 200,
            "member": 403,
            "other_member": 403,
            "outsider": 200,
        },
    ),
    "lab policy": (
        lambda w, c: reverse("retention:policy_lab", args=[w.lab.pk]),
        {
            "inst_admin": 200,
            "finance": 403,
            "lab_admin": 200,
            "member": 403,
            "other_member": 404,
            "outsider": 404,
        },
    ),
    "default policy": (
        lambda w, c: reverse("retention:policy_default", args=[w.institution.pk]),
        {
            "inst_admin": 200,
            "finance": 403,
            "lab_admin": 403,
            "member": 403,
            "other_member": 403,
            "outsider": 404,
        },
    ),
}


@pytest.mark.parametrize("page", PAGES)
def test_pages(world, client_for, case, page):
    build, expected = PAGES[page]
    url = build(world, case)
    for role in ROLES:
        response = _as(client_for, world, role).get(url)
        if role == "anonymous":
            assert response.status_code == 302 and "/login/" in response.url, role
        else:
            assert response.status_code == expected[role], (page, role, response.status_code)


@pytest.mark.parametrize("action", ["keep", "hold", "move", "request", "cancel", "x"])
def test_actions_refused_to_all_but_deciders(world, client_for, case, action):
    url = reverse("retention:action", args=[case.pk, action])
    expected = {"finance": 403, "member": 403, "other_member": 404, "outsider": 404}
    for role, code in expected.items():
        assert _as(client_for, world, role).post(url, {"note": "x"}).status_code == code, role
    assert "/login/" in client_for(None).post(url).url
    assert client_for(world.lab_admin).get(url).status_code == 405
    case.refresh_from_db()
    assert case.state == State.OPEN


def test_lab_admin_requests_and_another_approves_through_the_pages(
    world, client_for, case, second_admin
):
    page = client_for(world.lab_admin).get(reverse("retention:detail", args=[case.pk]))
    assert b"Request deletion" in page.content and b"Place hold" in page.content
    client = client_for(world.lab_admin)
    client.post(reverse("retention:action", args=[case.pk, "request"]), {"note": "copied"})
    response = client.post(reverse("retention:action", args=[case.pk, "approve"]), follow=True)
    assert "another person must approve" in response.content.decode()
    case.refresh_from_db()
    assert case.state == State.DELETION_REQUESTED
    client_for(second_admin).post(reverse("retention:action", args=[case.pk, "approve"]))
    case.refresh_from_db()
    assert case.state == State.DELETION_APPROVED


def test_hold_form_names_the_payer(world, client_for, case):
    payer = world.allocation
    client_for(world.lab_admin).post(
        reverse("retention:action", args=[case.pk, "hold"]),
        {"kind": "thesis", "reason": "thesis", "payer": payer.pk},
    )
    case.refresh_from_db()
    assert case.state == State.HOLD
    assert case.holds.get().payer == payer


def test_policy_saved_and_audited_with_a_preview(world, client_for, case):
    url = reverse("retention:policy_lab", args=[world.lab.pk])
    page = client_for(world.lab_admin).get(url).content.decode()
    assert "grant-data" in page and "case open" in page
    response = client_for(world.lab_admin).post(
        url,
        {
            "funding_grace_days": 10,
            "membership_grace_days": 5,
            "idle_grace_days": 30,
            "warning_days": "14, 2",
            "approvers_required": 2,
        },
    )
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="retention_policy.save")
    assert event.actor == world.lab_admin and event.after["approvers_required"] == 2
    bad = client_for(world.lab_admin).post(
        url,
        {
            "warning_days": "soon",
            "funding_grace_days": 1,
            "membership_grace_days": 1,
            "idle_grace_days": 1,
            "approvers_required": 1,
        },
    )
    assert bad.status_code == 200 and "not a whole number" in bad.content.decode()


def test_alert_offers_a_retention_case(world, client_for, account, ending_grant, policy):
    from labgov.alerts.models import Alert, Kind

    _, allocation = ending_grant
    pod = make_pod(account, allocation, status="EXITED", volume_disk_gb=50)
    alert = Alert.objects.create(
        institution=world.institution,
        lab=world.lab,
        kind=Kind.STOPPED_POD_DISK,
        subject_key=f"resource:{pod.pk}",
        subject_label="Pod",
        resource=pod,
        account=account,
        owner=world.member,
        severity="warning",
        title="Stopped pod",
    )
    page = client_for(world.lab_admin).get(reverse("alerts:detail", args=[alert.pk]))
    assert b"Open a retention case" in page.content
    assert (
        b"Open a retention case"
        not in client_for(world.member).get(reverse("alerts:detail", args=[alert.pk])).content
    )
    open_url = reverse("retention:open", args=[pod.pk])
    assert client_for(world.member).post(open_url).status_code == 403
    assert client_for(world.other_member).post(open_url).status_code == 404
    response = client_for(world.lab_admin).post(open_url)
    case = RetentionCase.objects.get(resource=pod)
    assert response.url == reverse("retention:detail", args=[case.pk])
    assert case.opened_by == world.lab_admin and case.size_gb == 50


def test_list_and_detail_query_counts_are_pinned(world, client_for, account, ending_grant, policy):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from labgov.retention import services

    _, allocation = ending_grant
    client = client_for(world.lab_admin)

    def count(url):
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200
        return len(ctx.captured_queries)

    def add():
        volume = make_volume(
            account, allocation, created_at_runpod=timezone.now() - dt.timedelta(days=3)
        )
        case = open_case(volume)
        services.case_keep(
            actor=world.lab_admin,
            case=case,
            reason="r",
            review_date=timezone.now().date() + dt.timedelta(days=9),
        )
        return case

    first = add()
    small = count(reverse("retention:list")), count(reverse("retention:detail", args=[first.pk]))
    for _ in range(5):
        last = add()
    large = count(reverse("retention:list")), count(reverse("retention:detail", args=[last.pk]))
    assert large == small


def test_a_grant_that_has_not_ended_says_it_ends(world, client_for, case, ending_grant):
    """The list and the case said "Funding ended" twenty days before the grant's end."""
    source, _ = ending_grant
    client = client_for(world.lab_admin)
    pages = [reverse("retention:list"), reverse("retention:detail", args=[case.pk])]
    for url in pages:
        html = client.get(url).content.decode()
        assert "Funding ends" in html and "Funding ended" not in html, url
    # Once its end date has passed, it has ended.
    type(source).objects.filter(pk=source.pk).update(
        end_date=timezone.now().date() - dt.timedelta(days=1)
    )
    for url in pages:
        assert "Funding ended" in client.get(url).content.decode(), url


def test_the_requester_is_not_offered_approval_and_the_dialog_names_the_resource(
    world, client_for, case, second_admin, account, ending_grant
):
    """A lab admin saw "Approve deletion" on their own request (refused when pressed), and the
    dialog said "volume" for a pod."""
    client = client_for(world.lab_admin)
    client.post(reverse("retention:action", args=[case.pk, "request"]), {"note": "copied"})
    mine = client.get(reverse("retention:detail", args=[case.pk])).content.decode()
    assert "Approve deletion" not in mine
    assert "You asked for this deletion: another lab admin" in mine
    theirs = client_for(second_admin).get(reverse("retention:detail", args=[case.pk]))
    html = theirs.content.decode()
    assert "Approve deletion" in html and "this network volume on Runpod" in html

    _, allocation = ending_grant
    pod = make_pod(account, allocation, name="stopped-pod", status="EXITED", volume_disk_gb=50)
    pod_case = open_case(pod)
    client = client_for(world.lab_admin)
    answer = client.post(
        reverse("retention:action", args=[pod_case.pk, "request"]), {"note": "done"}, follow=True
    )
    pod_case.refresh_from_db()
    assert pod_case.state == State.DELETION_REQUESTED, answer.content.decode()
    html = client_for(second_admin).get(reverse("retention:detail", args=[pod_case.pk]))
    assert "this pod and its volume disk on Runpod" in html.content.decode()
