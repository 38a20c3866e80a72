"""Journey 4 of DOMAIN.md in a real browser: a grant nears its end with two network volumes
(800 GB in all) on it; labgov opens their cases and warns ahead; the lab admin holds one,
naming who pays for it, and asks to delete the other; a second person approves; labgov
deletes it on the Runpod simulator (which no longer lists it); the audit shows both."""

import datetime as dt
import re

import pytest
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.notifications.models import Notification
from labgov.retention.evaluation import retention_evaluate
from labgov.retention.models import RetentionCase, RetentionPolicy, State
from labgov.runpod.models import Assignment
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import (
    AllocationFactory,
    FundingSourceFactory,
    MembershipFactory,
    ResourceFactory,
    RunpodAccountFactory,
    _encrypt,
)
from tests.fixtures_browser import login
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]

KEY = "sim-key-journey-4"
DELETED, HELD = "th5d8r2y7e", "nv4lpd7x2k"  # 300 GB and 500 GB in the default scenario


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("default"), api_key=KEY) as server:
        yield server


def _volume(account, allocation, runpod_id, name, size_gb, data_center):
    volume = ResourceFactory(
        account=account,
        kind="network_volume",
        runpod_id=runpod_id,
        name=name,
        status="",
        size_gb=size_gb,
        volume_type="STANDARD",
        data_center_id=data_center,
        current_allocation=allocation,
        created_at_runpod=timezone.now() - dt.timedelta(days=5),
    )
    Assignment.objects.create(
        resource=volume,
        allocation=allocation,
        starts_at=timezone.now() - dt.timedelta(days=5),
        source=Assignment.Source.MANUAL,
    )
    return volume


def test_journey_4_hold_one_volume_and_delete_the_other(world, sim, browser, live_server):
    account = RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )
    today = timezone.now().date()
    grant = FundingSourceFactory(
        lab=world.lab, name="NSF ending", end_date=today + dt.timedelta(days=20)
    )
    on_grant = AllocationFactory(funding_source=grant, user=world.member)
    thesis_money = AllocationFactory(
        funding_source=FundingSourceFactory(lab=world.lab, name="Department thesis fund"),
        user=world.member,
    )
    _volume(account, on_grant, DELETED, "old-thesis-data", 300, "US-KS-2")
    _volume(account, on_grant, HELD, "nlp-datasets", 500, "EU-RO-1")
    RetentionPolicy.objects.create(
        institution=world.institution, is_active=True, funding_grace_days=7
    )
    approver = MembershipFactory(role="lab_admin", lab=world.lab).user
    approver.set_password("pw")
    approver.save()

    # labgov warns ahead: both volumes get a case, due when the grant ends, and the owner and
    # the lab's admins are told once.
    retention_evaluate(institution_id=world.institution.pk)
    cases = {c.resource.runpod_id: c for c in RetentionCase.objects.select_related("resource")}
    assert sum(c.size_gb for c in cases.values()) == 800
    assert {c.due_date for c in cases.values()} == {grant.end_date + dt.timedelta(days=7)}
    warned = Notification.objects.filter(kind="retention.warning")
    told = set(warned.values_list("recipient_id", flat=True))
    assert told == {world.member.pk, world.lab_admin.pk, approver.pk}

    admin = login(browser, live_server, world.lab_admin)
    admin.click("nav >> text=Retention")
    assert "nlp-datasets" in admin.locator("table").inner_text()

    # Hold one, naming who pays for it from now on.
    admin.click("a:text('nlp-datasets')")
    admin.wait_for_url(re.compile(rf".*/retention/{cases[HELD].pk}/$"))
    hold = admin.locator("form[data-form=hold]")
    hold.locator("select[name=kind]").select_option("thesis")
    hold.locator("input[name=reason]").fill("Kim's thesis data until the defence")
    hold.locator("select[name=payer]").select_option(str(thesis_money.pk))
    hold.locator("button").click()
    admin.wait_for_url(re.compile(rf".*/retention/{cases[HELD].pk}/$"))
    assert admin.locator(".page-head [data-state]").get_attribute("data-state") == "hold"
    assert "Department thesis fund" in admin.locator("[data-payer-now]").inner_text()

    # Ask to delete the other; approving it alone is not offered (the service refuses it too).
    admin.goto(f"{live_server.url}/retention/{cases[DELETED].pk}/")
    admin.locator("form[data-form=request] input[name=note]").fill("copied to the archive")
    admin.click("button:text('Request deletion')")
    admin.wait_for_url(re.compile(rf".*/retention/{cases[DELETED].pk}/$"))
    assert admin.locator(".page-head [data-state]").get_attribute("data-state") == (
        "deletion_requested"
    )
    assert admin.locator("button:text('Approve deletion')").count() == 0
    assert "You asked for this deletion" in admin.locator("main").inner_text()

    # A second person approves: labgov deletes it on Runpod after the commit.
    second = login(browser, live_server, approver)
    second.on("dialog", lambda dialog: dialog.accept())
    second.goto(f"{live_server.url}/retention/{cases[DELETED].pk}/")
    second.click("button:text('Approve deletion')")
    second.wait_for_url(re.compile(rf".*/retention/{cases[DELETED].pk}/$"))
    second.reload()
    assert second.locator(".page-head [data-state]").get_attribute("data-state") == "deleted"
    listed = {v["id"] for v in sim.state.list_volumes()}
    assert DELETED not in listed and HELD in listed

    # The audit shows both: the hold with its payer, the deletion with who asked and approved.
    hold_event = AuditEvent.objects.get(action="retention.hold", target_id=str(cases[HELD].pk))
    assert hold_event.actor == world.lab_admin
    assert hold_event.after["payer_allocation_id"] == thesis_money.pk
    deleted = AuditEvent.objects.get(action="retention.delete", target_id=str(cases[DELETED].pk))
    assert deleted.after["requested_by"] == world.lab_admin.username
    assert deleted.after["approved_by"] == [approver.username]
    assert deleted.after["last_known"]["size_gb"] == 300
    assert RetentionCase.objects.get(pk=cases[HELD].pk).state == State.HOLD
    # Both cases' pages show their audit history.
    assert "retention.delete" in second.locator("[data-history]").inner_text()
    second.goto(f"{live_server.url}/retention/{cases[HELD].pk}/")
    assert "retention.hold" in second.locator("[data-history]").inner_text()


BLOCKED, STOPPED_POD = "vc8h2m5q1z", "h6g5f4d3s2a1p0"  # vision-checkpoints; vision-data-sync


def test_journey_4_a_deletion_blocked_by_a_stopped_pod_refused_and_then_finished(
    world, sim, browser, live_server
):
    """The path a lab admin walks when a stopped pod still mounts the volume: the grant-ending
    alert leads to the case; the case shows the pod that blocks it before anyone approves,
    and approval is refused while it does; the pod is included; Runpod refuses once (409),
    which the page says in words, never as success; asked and approved again, the volume and
    the pod are deleted on Runpod."""
    from labgov.alerts.evaluation import alerts_evaluate
    from labgov.alerts.models import Alert

    account = RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )
    today = timezone.now().date()
    grant = FundingSourceFactory(
        lab=world.lab, name="NSF ending", end_date=today + dt.timedelta(days=25)
    )
    on_grant = AllocationFactory(funding_source=grant, user=world.member)
    volume = _volume(account, on_grant, BLOCKED, "vision-checkpoints", 750, "US-KS-2")
    pod = ResourceFactory(
        account=account,
        kind="pod",
        runpod_id=STOPPED_POD,
        name="vision-data-sync",
        status="EXITED",
        container_disk_gb=10,
        network_volume_id=BLOCKED,
        data_center_id="US-KS-2",
        current_allocation=on_grant,
    )
    RetentionPolicy.objects.create(
        institution=world.institution, is_active=True, funding_grace_days=7
    )
    approver = MembershipFactory(role="lab_admin", lab=world.lab).user
    approver.set_password("pw")
    approver.save()
    retention_evaluate(institution_id=world.institution.pk)
    alerts_evaluate(institution_id=world.institution.pk)
    case = RetentionCase.objects.get(resource=volume)
    alert = Alert.objects.get(kind="funding_ending")

    # From the grant-ending alert to the volume's case, at its deletion request.
    admin = login(browser, live_server, world.lab_admin)
    admin.on("dialog", lambda dialog: dialog.accept())
    admin.goto(f"{live_server.url}/alerts/{alert.pk}/")
    admin.locator(f"[data-volume='{volume.pk}'] a:text('Request deletion')").click()
    admin.wait_for_url(re.compile(rf".*/retention/{case.pk}/#request$"))
    # Before anyone approves: what blocks it, by name and owner, and that it cannot go now.
    assert admin.locator("[data-deletable]").get_attribute("data-deletable") == "no"
    blockers = admin.locator("[data-blockers]").inner_text()
    assert "vision-data-sync" in blockers and world.member.get_full_name() in blockers
    admin.locator("form[data-form=request] input[name=note]").fill("copied to the archive")
    admin.click("button:text('Request deletion')")
    admin.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))

    second = login(browser, live_server, approver)
    second.on("dialog", lambda dialog: dialog.accept())
    second.goto(f"{live_server.url}/retention/{case.pk}/")
    second.click("button:text('Approve deletion')")
    second.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    assert "Deleting is not possible now" in second.locator(".messages").inner_text()
    assert second.locator(".page-head [data-state]").get_attribute("data-state") == (
        "deletion_requested"
    )

    # The way to finish: include the stopped pod (the page says its disks go with it).
    admin.goto(f"{live_server.url}/retention/{case.pk}/")
    admin.locator("form[data-form=include] button").click()
    admin.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    assert "own disks" in admin.locator("[data-included]").inner_text()
    assert admin.locator("[data-deletable]").get_attribute("data-deletable") == "yes"

    # Runpod refuses once: the approver is told so, in words, not "approved".
    sim.inject_fault("/v2/network-volumes/", "409", method="DELETE")
    second.goto(f"{live_server.url}/retention/{case.pk}/")
    second.click("button:text('Approve deletion')")
    second.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    said = second.locator(".messages").inner_text()
    assert "Not deleted." in said and "Runpod refused to delete it (HTTP 409)" in said
    assert "approved for deletion" not in said
    assert second.locator(".page-head [data-state]").get_attribute("data-state") == "open"
    assert "Runpod refused" in second.locator("[data-refusal]").inner_text()
    assert BLOCKED in {v["id"] for v in sim.state.list_volumes()}

    # Asked and approved again: the volume goes (the pod went with the first attempt).
    admin.goto(f"{live_server.url}/retention/{case.pk}/")
    admin.locator("form[data-form=request] input[name=note]").fill("archived; pod terminated")
    admin.click("button:text('Request deletion')")
    admin.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    second.goto(f"{live_server.url}/retention/{case.pk}/")
    second.click("button:text('Approve deletion')")
    second.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    assert "Deleted on Runpod." in second.locator(".messages").inner_text()
    assert second.locator(".page-head [data-state]").get_attribute("data-state") == "deleted"
    assert BLOCKED not in {v["id"] for v in sim.state.list_volumes()}
    assert sim.state.pod_status(STOPPED_POD) == "TERMINATED"
    pod.refresh_from_db()
    assert pod.gone_at is not None
    assert AuditEvent.objects.filter(action="retention.delete_pod", target_id=str(pod.pk)).exists()
    assert AuditEvent.objects.filter(action="retention.delete", target_id=str(case.pk)).exists()
