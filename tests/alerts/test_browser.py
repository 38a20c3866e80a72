"""Journey 3 of DOMAIN.md in a real browser (Debian's Chromium through Playwright): a student
stops a pod and forgets it; after the next sync labgov flags the stopped-but-billing volume
disk with its monthly cost, tells the owner and the lab admin, and the lab admin resolves it
the way deleting data always goes, with two people: they open a retention case from the alert
and request the pod's deletion; a second lab admin approves; labgov terminates the pod on the
Runpod simulator, audited; the next sync finds nothing billing and the alert resolves."""

import datetime as dt
import re
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.alerts.models import Alert, Kind
from labgov.audit.models import AuditEvent
from labgov.notifications.models import Notification
from labgov.retention.models import RetentionCase, State
from labgov.runpod.models import Resource
from labgov.runpod.services import resource_assign
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import MembershipFactory, RunpodAccountFactory, _encrypt
from tests.fixtures_browser import login
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]

KEY = "sim-key-journey-3"


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("empty"), api_key=KEY) as server:
        # Runpod's clock runs six hours behind ours, so the test can move it forward by hours
        # and still sync up to "now".
        server.set_now(timezone.now() - dt.timedelta(hours=6))
        server.state.set_balance(D("500"))
        yield server


def _sync(account, since):
    run = account_sync(account_id=account.pk, start=since)
    assert run.status == "succeeded", run.error
    return run


def test_journey_3_stopped_but_billing_alert_resolved_by_a_two_person_deletion(
    world,
    sim,
    browser,
    live_server,
):
    account = RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )
    # The student's pod runs with a 100 GB volume disk, paid by their allocation.
    gpu = sim.state.gpu_types()[0]["id"]
    pod = sim.state.create_pod(
        {
            "name": "tara-finetune",
            "image": "runpod/pytorch:2.8.0",
            "gpu": {"id": gpu, "count": 1},
            "cloud": "SECURE",
            "mounts": {"persistent": {"size": 100, "path": "/workspace"}},
        }
    )
    started = timezone.now() - dt.timedelta(hours=7)
    sim.advance(hours=2)
    _sync(account, started)
    resource = Resource.objects.get(runpod_id=pod["id"])
    resource_assign(actor=world.lab_admin, resource=resource, allocation=world.allocation)

    # She stops it and forgets it: three hours later the sync sees it billing while stopped.
    sim.state.pod_action(pod["id"], "stop")
    sim.advance(hours=3)
    _sync(account, started)
    alert = Alert.objects.get(kind=Kind.STOPPED_POD_DISK)
    assert alert.monthly_cost_usd == D("20.00") and alert.lab == world.lab
    told = set(
        Notification.objects.filter(kind="alert.stopped_pod_disk").values_list(
            "recipient_id", flat=True
        )
    )
    assert told == {world.member.pk, world.lab_admin.pk}

    # The student sees it among her notifications.
    student = login(browser, live_server, world.member)
    student.click("nav >> text=Notifications")
    assert "tara-finetune" in student.locator("table").inner_text()

    # The lab admin sees it on the dashboard with its monthly cost. Terminating loses the
    # pod's data, so the alert offers no terminate: a retention case, with two people.
    admin = login(browser, live_server, world.lab_admin)
    row = admin.locator(f"#home-alerts tr[data-alert='{alert.pk}']")
    assert "$20.00" in row.inner_text()
    row.locator("a").click()
    admin.wait_for_url(re.compile(rf".*/alerts/{alert.pk}/$"))
    assert admin.locator("[data-figure=monthly-cost]").inner_text() == "$20.00"
    assert "terminate" not in admin.locator("main").inner_text().lower()
    admin.click("button:text('Open a retention case')")
    admin.wait_for_url(re.compile(r".*/retention/\d+/$"))
    case = RetentionCase.objects.get(resource=resource)
    admin.locator("form[data-form=request] input[name=note]").fill("results copied off")
    admin.click("button:text('Request deletion')")
    admin.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    assert admin.locator(".page-head [data-state]").get_attribute("data-state") == (
        "deletion_requested"
    )
    assert sim.state.pod_status(pod["id"]) == "EXITED"  # nothing deleted by one person

    # A second lab admin approves: labgov terminates the pod on Runpod after the commit.
    approver = MembershipFactory(role="lab_admin", lab=world.lab).user
    approver.set_password("pw")
    approver.save()
    second = login(browser, live_server, approver)
    second.on("dialog", lambda dialog: dialog.accept())
    second.goto(f"{live_server.url}/retention/{case.pk}/")
    second.click("button:text('Approve deletion')")
    second.wait_for_url(re.compile(rf".*/retention/{case.pk}/$"))
    second.reload()
    assert second.locator(".page-head [data-state]").get_attribute("data-state") == "deleted"
    assert sim.state.pod_status(pod["id"]) in (None, "TERMINATED")
    assert RetentionCase.objects.get(pk=case.pk).state == State.DELETED
    deleted = AuditEvent.objects.get(action="retention.delete", target_id=str(case.pk))
    assert deleted.after["requested_by"] == world.lab_admin.username
    assert deleted.after["approved_by"] == [approver.username]
    assert not AuditEvent.objects.filter(action="runpod.pod_terminate").exists()

    # The next sync finds nothing billing: no new alert, and the dashboard is clear.
    sim.advance(hours=1)
    _sync(account, started)
    assert not Alert.objects.unresolved().filter(kind=Kind.STOPPED_POD_DISK).exists()
    alert.refresh_from_db()
    assert alert.is_resolved
    admin.goto(f"{live_server.url}/")
    assert admin.locator(f"#home-alerts tr[data-alert='{alert.pk}']").count() == 0
