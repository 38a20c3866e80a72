"""Journey 2 of DOMAIN.md in a real browser (Debian's Chromium through Playwright): a student
requests a pod and watches the estimate, a lab admin approves it, labgov creates the pod on the
Runpod simulator, and after a sync its spend shows on the student's allocation."""

import datetime as dt
import re
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.core.money import to_cents
from labgov.funding.models import Allocation
from labgov.provisioning.models import ProvisioningRequest
from labgov.runpod.models import BillingRecord
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import RunpodAccountFactory, _encrypt
from tests.fixtures_browser import login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]

KEY = "sim-key-journey-2"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("default"), api_key=KEY) as server:
        server.set_now(timezone.now())
        yield server


def test_journey_2_request_approve_provision_sync(world, sim, browser, live_server):
    account = RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )
    # The first sync brings the GPU catalog with Runpod's prices.
    first = account_sync(account_id=account.pk, start=timezone.now() - dt.timedelta(hours=2))
    assert first.status == "succeeded", first.error

    # The student requests 8 x H100 for 10 hours and watches the estimate follow the form.
    student = login(browser, live_server, world.member)
    student.click("nav >> text=Requests")
    student.click("text=Request capacity")
    student.fill("#id_title", "Fine-tune 8B")
    student.select_option("#id_gpu_type_id", H100)
    student.fill("#id_gpu_count", "8")
    student.fill("#id_image", "runpod/pytorch:2.8.0")
    student.fill("#id_container_disk_gb", "0")
    student.fill("#id_model_params_billion", "8")
    student.fill("#id_bytes_per_param", "14")
    student.fill("#id_write_mb_per_s", "200")
    student.fill("#id_checkpoint_interval_minutes", "60")
    student.fill("#id_expected_hours", "10")  # typing alone updates the estimate
    # The simulator's catalog lists the H100 SXM at $2.69/GPU-h in Secure Cloud.
    total = student.locator("[data-figure=total]")
    total.filter(has_text="$215.20").wait_for()
    assert student.locator("[data-figure=compute]").inner_text() == "$215.20"
    assert student.locator("[data-figure=save-time]").inner_text() == "560 s"
    assert "at least 93 min" in student.locator("[data-figure=interval]").inner_text()
    assert student.locator("[data-figure=stop]").inner_text() == "$25.11"  # 70 min x $21.52
    student.fill("#id_justification", "Thesis chapter 3.")
    student.click("button:text('Submit for approval')")
    student.wait_for_url(re.compile(r".*/provisioning/\d+/$"))
    assert student.locator("[data-state]").first.inner_text() == "Submitted"
    req = ProvisioningRequest.objects.get()
    assert req.estimate_total_usd == D("215.20")

    # The lab admin approves it in the review queue; labgov creates the pod on Runpod.
    admin = login(browser, live_server, world.lab_admin)
    admin.click("nav >> text=Review")
    row = admin.locator(f"#review-row-{req.pk}")
    row.locator("button:text('Approve')").click()
    row.locator("[data-state=provisioned]").wait_for()
    req.refresh_from_db()
    assert req.state == ProvisioningRequest.State.PROVISIONED, req.last_error
    pods = [p for p in sim.state.list_pods() if p["name"].startswith(req.marker)]
    assert [p["id"] for p in pods] == [req.runpod_id]
    assert pods[0]["env"] == {"LABGOV_REQUEST": str(req.pk)}

    # Three hours later the sync brings the pod's billing; the spend is the student's.
    sim.advance(hours=3)
    run = account_sync(account_id=account.pk, start=req.spend_counted_from - dt.timedelta(hours=1))
    assert run.status == "succeeded", run.error
    spent = Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd
    assert spent > 0
    student.goto(f"{live_server.url}/")
    assert (
        f"${to_cents(spent):,.2f}"
        in student.locator("section", has_text="My allocations").inner_text()
    )
    # The request's own actual is its pod's spend (the allocation may pay for other pods too).
    actual = sum(
        BillingRecord.objects.filter(resource__runpod_id=req.runpod_id).values_list(
            "total_usd", flat=True
        ),
        D(0),
    )
    assert 0 < actual <= spent
    student.goto(f"{live_server.url}/provisioning/{req.pk}/")
    assert student.locator("[data-figure=actual]").inner_text() == f"${to_cents(actual):,.2f}"
    assert student.locator("[data-figure=estimate]").inner_text() == "$215.20"


def _connect(world, sim):
    account = RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )
    # The first sync brings the GPU catalog with Runpod's prices and serverless pools.
    first = account_sync(account_id=account.pk, start=timezone.now() - dt.timedelta(hours=2))
    assert first.status == "succeeded", first.error
    return account


def _approve_in_the_queue(browser, live_server, world, req):
    admin = login(browser, live_server, world.lab_admin)
    admin.click("nav >> text=Review")
    row = admin.locator(f"#review-row-{req.pk}")
    row.locator("button:text('Approve')").click()
    row.locator("[data-state=provisioned]").wait_for()
    req.refresh_from_db()
    assert req.state == ProvisioningRequest.State.PROVISIONED, req.last_error
    return admin


def _spend_shows_after_a_sync(student, live_server, world, sim, account, req):
    """Three hours later the sync brings its billing: the student's allocation and the
    request's page show it."""
    sim.advance(hours=3)
    run = account_sync(account_id=account.pk, start=req.spend_counted_from - dt.timedelta(hours=1))
    assert run.status == "succeeded", run.error
    spent = Allocation.objects.with_figures().get(pk=world.allocation.pk).spent_usd
    assert spent > 0
    student.goto(f"{live_server.url}/")
    assert (
        f"${to_cents(spent):,.2f}"
        in student.locator("section", has_text="My allocations").inner_text()
    )
    actual = sum(
        BillingRecord.objects.filter(resource__runpod_id=req.runpod_id).values_list(
            "total_usd", flat=True
        ),
        D(0),
    )
    assert 0 < actual <= spent
    student.goto(f"{live_server.url}/provisioning/{req.pk}/")
    assert student.locator("[data-figure=actual]").inner_text() == f"${to_cents(actual):,.2f}"
    return student


def test_journey_2_for_a_serverless_endpoint(world, sim, browser, live_server):
    account = _connect(world, sim)
    student = login(browser, live_server, world.member)
    student.goto(f"{live_server.url}/provisioning/new/")
    student.fill("#id_title", "Serve the 8B model")
    student.select_option("#id_deployment_model", "serverless")
    student.select_option("#id_gpu_type_id", H100)
    student.fill("#id_gpu_count", "1")
    student.fill("#id_image", "runpod/worker-vllm:2.1")
    student.fill("#id_expected_hours", "0")
    student.fill("#id_container_disk_gb", "0")
    student.fill("#id_idle_workers", "1")
    student.fill("#id_workers_max", "3")
    student.fill("#id_idle_timeout_seconds", "30")
    student.fill("#id_requests_per_day", "1200")
    student.fill("#id_seconds_per_request", "3")
    student.fill("#id_duration_days", "1")
    # 1,200 × 3 s = 1 worker-hour, plus one always-on worker for 24 h: 25 h × $4.18 (the
    # simulator's serverless price of the H100).
    student.locator("[data-figure=total]").filter(has_text="$104.50").wait_for()
    student.click("button:text('Submit for approval')")
    student.wait_for_url(re.compile(r".*/provisioning/\d+/$"))
    req = ProvisioningRequest.objects.get()
    assert req.state == ProvisioningRequest.State.SUBMITTED

    admin = _approve_in_the_queue(browser, live_server, world, req)
    (endpoint,) = [e for e in sim.state.list_endpoints() if e["name"].startswith(req.marker)]
    assert endpoint["id"] == req.runpod_id
    assert endpoint["workers"] == {"min": 1, "max": 3, "idleTimeout": 30}
    assert endpoint["env"] == {"LABGOV_REQUEST": str(req.pk)}
    # The request's page says what happened: what was made, and who pays for it.
    admin.goto(f"{live_server.url}/provisioning/{req.pk}/")
    assert admin.locator("[data-runpod-id]").inner_text() == req.runpod_id
    resources = admin.locator("section", has_text="Resources").inner_text()
    assert "Serverless endpoint Serve the 8B model" in resources
    _spend_shows_after_a_sync(student, live_server, world, sim, account, req)


def test_journey_2_for_a_cluster(world, sim, browser, live_server):
    account = _connect(world, sim)
    student = login(browser, live_server, world.member)
    student.goto(f"{live_server.url}/provisioning/new/")
    student.fill("#id_title", "Pretrain across two nodes")
    student.select_option("#id_deployment_model", "cluster")
    student.select_option("#id_gpu_type_id", H100)
    student.fill("#id_gpu_count", "8")
    student.fill("#id_node_count", "2")
    student.fill("#id_image", "runpod/pytorch:2.8.0")
    student.fill("#id_data_center_id", "US-KS-2")
    student.fill("#id_container_disk_gb", "0")
    student.check("#id_runs_distributed")
    student.fill("#id_data_exchange", "NCCL all-reduce over the cluster network")
    student.fill("#id_shared_files_location", "Copied to each node from object storage")
    student.fill("#id_expected_hours", "5")
    # 2 nodes × 8 × $2.69 (the simulator's Secure Cloud H100) × 5 h.
    student.locator("[data-figure=compute]").filter(has_text="$215.20").wait_for()
    student.click("button:text('Submit for approval')")
    student.wait_for_url(re.compile(r".*/provisioning/\d+/$"))
    req = ProvisioningRequest.objects.get()
    assert req.state == ProvisioningRequest.State.SUBMITTED, req.state

    admin = _approve_in_the_queue(browser, live_server, world, req)
    (cluster,) = [c for c in sim.state.list_clusters() if c["name"].startswith(req.marker)]
    assert cluster["id"] == req.runpod_id
    assert cluster["compute"] == {"gpuTypeId": H100, "gpuCountPerPod": 8, "podCount": 2}
    assert cluster["dataCenterId"] == "US-KS-2"
    admin.goto(f"{live_server.url}/provisioning/{req.pk}/")
    assert "Cluster Pretrain across two nodes" in (
        admin.locator("section", has_text="Resources").inner_text()
    )
    _spend_shows_after_a_sync(student, live_server, world, sim, account, req)
