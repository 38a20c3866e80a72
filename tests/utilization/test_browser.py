"""In a real browser: a lab admin sees an idle 8-GPU pod with the money it has burned idle; its
owner keeps it running for 2 hours from the warning notification; after that the lab's policy
stops it (stopped, not terminated, audited). The simulator's clock and the times of the polls
move; labgov's own clock stays real, as Playwright needs."""

import datetime as dt
import re
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Alert, Kind
from labgov.audit.models import AuditEvent
from labgov.core.money import to_cents
from labgov.idle.models import AutoStopPolicy, StopNotice
from labgov.simulator import SimulatorServer, load_scenario
from tests.fixtures_browser import login
from tests.provisioning.conftest import flushable_append_only  # noqa: F401 - a fixture
from tests.utilization.simpods import Clocks, sim_connection, sim_pod

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]
H = dt.timedelta(hours=1)
HALF_HOUR = dt.timedelta(minutes=30)


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("empty")) as server:
        server.state.set_balance(D("1000"))
        yield server


def test_idle_pod_seen_kept_running_from_the_notification_then_stopped(
    world, sim, fast_clients, browser, live_server
):
    now = timezone.now().replace(microsecond=0)
    start = now - 5 * H
    sim.set_now(start - dt.timedelta(minutes=2))
    account = sim_connection(world, sim)
    volume = {"persistent": {"size": 200, "path": "/workspace"}}
    pod = sim_pod(sim, account, world.allocation, "llm-sweep", mounts=volume, idle_from=start)
    AutoStopPolicy.objects.create(
        lab=world.lab, enabled=True, idle_hours=5, warn_minutes=60, keep_hours=2
    )
    clocks = Clocks(sim, account, fast_clients, start, travel=False)
    try:
        assert clocks.step_to(now, every=HALF_HOUR)["warned"] == 1
        alerts_evaluate(institution_id=world.institution.pk, now=now)
        alert = Alert.objects.get(kind=Kind.RUNNING_IDLE)
        spent = f"${to_cents(D(alert.facts['spent_idle_usd'])):,.2f}"

        # The lab admin sees it on the lab's page, with what it burned idle and its rate.
        admin = login(browser, live_server, world.lab_admin)
        admin.goto(f"{live_server.url}/spend/labs/{world.lab.pk}/")
        row = admin.locator(f"#lab-idle tr[data-idle-pod='{pod.runpod_id}']")
        rate = f"${to_cents(pod.cost_per_hr_usd):,.2f}"
        assert spent in row.inner_text() and rate in row.inner_text()
        assert "8 GPUs" in row.inner_text()

        # The owner keeps it running for two hours, from the warning.
        owner = login(browser, live_server, world.member)
        owner.click("nav >> text=Notifications")
        warning = owner.locator("tr", has_text="will be stopped")
        warning.locator("button:text('Open')").click()
        owner.wait_for_url(re.compile(r".*/idle/notices/\d+/$"))
        owner.click("#keep-running")
        assert "Kept running until" in owner.locator(".messages").inner_text()
        notice = StopNotice.objects.get(resource=pod)
        assert notice.state == StopNotice.State.KEPT and notice.kept_by == world.member
        assert notice.kept_until >= now + 2 * H

        # Still idle two hours later: the policy stops it, never terminates it.
        assert (
            clocks.step_to(notice.kept_until - dt.timedelta(minutes=1), every=H).get("stopped") == 0
        )
        assert sim.state.pod_status(pod.runpod_id) == "RUNNING"
        assert clocks.step_to(notice.kept_until + dt.timedelta(minutes=14), every=H)["stopped"] == 1
        assert sim.state.pod_status(pod.runpod_id) == "EXITED"
        event = AuditEvent.objects.get(action="runpod.pod_autostop")
        assert event.after["samples"] and event.after["policy"]["kept_until"]
        owner.reload()
        assert owner.locator("#notice-state").get_attribute("data-state") == "stopped"
    finally:
        clocks.stop()
