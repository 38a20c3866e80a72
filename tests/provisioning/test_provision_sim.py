"""Provisioning against the Runpod simulator over real HTTP, with the real client: a pod
created and attributed, a 402, a timeout after which Runpod did create the pod, a dropped
connection, and retries that never create a second pod."""

import datetime as dt
import time
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.provisioning import tasks
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import provisioning_retry, provisioning_run, request_approve
from labgov.runpod.client import RunpodClient
from labgov.runpod.models import GpuType
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import RunpodAccountFactory, _encrypt
from tests.fixtures_sim import hour
from tests.provisioning.conftest import H100

S = ProvisioningRequest.State
KEY = "sim-key-provisioning"


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("default"), api_key=KEY) as server:
        server.set_now(timezone.now())
        yield server


@pytest.fixture
def account(world, sim):
    return RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )


def quick(timeout=5.0):
    """A client that gives up fast, as a test can afford to wait only briefly."""

    def factory(account):
        return RunpodClient(
            base_url=account.base_url,
            api_key=KEY,
            timeout=timeout,
            max_attempts=2,
            deadline_s=10,
            sleep=lambda s: None,
        )

    return factory


@pytest.fixture
def approved(world, submitted, account):
    # The simulator's H100 SXM is $2.69 in Secure Cloud; the world's catalog row says $4.39.
    # Prices only matter to the estimate, not to what Runpod creates.
    def make(**overrides):
        return request_approve(actor=world.lab_admin, req=submitted(**overrides))

    return make


def _wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _ours(sim, req):
    return [p for p in sim.state.list_pods() if p["name"].startswith(req.marker)]


def test_the_task_creates_the_pod_after_commit(
    world, approved, sim, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        req = approved()
    req.refresh_from_db()
    assert req.state == S.PROVISIONED, req.last_error
    (pod,) = _ours(sim, req)
    assert pod["id"] == req.runpod_id
    # No allocation tag in the environment every team member can read.
    assert pod["env"] == {"LABGOV_REQUEST": str(req.pk)}
    assert pod["gpu"] == {"id": H100, "count": 8}
    resource = req.resources.get()
    assert resource.runpod_id == pod["id"]
    assert resource.current_allocation == world.allocation
    assert resource.assignments.get().source == "provisioned"
    assert ("POST", "/v2/pods") in sim.requests
    # Shown under the name it was asked for; Runpod's keeps the attempt's marker.
    assert resource.name.startswith(req.marker) and resource.requested_name == req.title
    assert resource.label == req.title and str(resource) == f"Pod {req.title}"


def test_402_insufficient_balance_fails_in_plain_words(world, approved, sim, account):
    sim.state.set_balance(D("1.00"))
    req = provisioning_run(request_id=approved().pk, client_factory=quick())
    assert req.state == S.FAILED
    assert "balance is too low" in req.last_error and "402" in req.last_error
    assert req.commitment_usd == 0
    assert _ours(sim, req) == []
    sim.state.set_balance(D("5000"))
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED and len(_ours(sim, req)) == 1


def test_timeout_after_runpod_created_the_pod_then_retry_finds_it(world, approved, sim, account):
    sim.inject_fault(path_prefix="/v2/pods", kind="slow", delay=1.5, method="POST")
    req = provisioning_run(request_id=approved().pk, client_factory=quick(timeout=0.5))
    assert req.state == S.FAILED
    assert "did not answer in time" in req.last_error
    assert "never created twice" in req.last_error
    _wait_for(lambda: len(_ours(sim, req)) == 1)  # Runpod went ahead regardless
    provisioning_retry(actor=world.lab_admin, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED
    (pod,) = _ours(sim, req)  # still only one
    assert req.runpod_id == pod["id"]
    assert [r for r in sim.requests if r == ("POST", "/v2/pods")] == [("POST", "/v2/pods")]
    # Paid from the hour it was created in, not from 1970.
    created = dt.datetime.fromisoformat(pod["createdAt"].replace("Z", "+00:00"))
    assert req.resources.get().assignments.get().starts_at == hour(created)


def _create_decoys(sim, req):
    """What a member of the Runpod team can do before labgov's first attempt: request ids
    are sequential, so the old marker (labgov-r<id>-) and LABGOV_REQUEST=<id> were guessable."""
    with RunpodClient(base_url=sim.base_url, api_key=KEY) as client:
        pods = [
            client.create_pod(
                {
                    "name": f"labgov-r{req.pk}-adopt-me",
                    "image": "runpod/pytorch:2.8.0",
                    "gpu": {"id": "NVIDIA RTX A6000", "count": 1},
                    "cloud": "COMMUNITY",
                    "env": {"LABGOV_REQUEST": str(req.pk)},
                }
            )
        ]
        volume = client.create_network_volume(
            {"name": f"labgov-r{req.pk}-volume", "size": 200, "dataCenter": "US-KS-2"}
        )
    return [p.id for p in pods], volume.id


def test_a_pod_and_volume_prepared_by_a_team_member_are_not_taken_over(
    world, approved, sim, account
):
    """Issue 9, attack 2, over HTTP: the prepared 1 x A6000 pod and volume run for a day;
    provisioning the approved 8 x H100 request used to adopt them and bill their history."""
    req = approved(network_volume_gb=200, data_center_id="US-KS-2", storage_kept_days=D(30))
    decoy_pods, decoy_volume = _create_decoys(sim, req)
    sim.advance(hours=24)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    assert req.runpod_id not in decoy_pods
    (pod,) = _ours(sim, req)
    assert pod["gpu"] == {"id": H100, "count": 8}
    (volume,) = [v for v in sim.state.list_volumes() if v["name"] == f"{req.marker}volume"]
    assert volume["id"] != decoy_volume
    assert pod["mounts"]["network"][0]["volumeId"] == volume["id"]
    assert not set(req.resources.values_list("runpod_id", flat=True)) & {
        *decoy_pods,
        decoy_volume,
    }
    assert [r for r in sim.requests if r == ("POST", "/v2/pods")] == [("POST", "/v2/pods")] * 2


def test_a_lookalike_pod_with_the_attempts_token_is_not_adopted(world, approved, sim, account):
    """The attempt created its volume, then the pod's answer was lost: the token is now
    visible on Runpod. A pod someone makes with it, but not as requested, is not adopted."""
    req = approved(network_volume_gb=200, data_center_id="US-KS-2", storage_kept_days=D(30))
    sim.inject_fault(path_prefix="/v2/pods", kind="disconnect", method="POST")
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.FAILED and req.provision_outcome_unknown
    with RunpodClient(base_url=sim.base_url, api_key=KEY) as client:
        lookalike = client.create_pod(
            {
                "name": f"{req.marker}x",
                "image": "runpod/pytorch:2.8.0",
                "gpu": {"id": "NVIDIA RTX A6000", "count": 1},
                "cloud": "COMMUNITY",
            }
        )
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    assert req.runpod_id != lookalike.id
    assert sim.state.get_pod(req.runpod_id)["gpu"] == {"id": H100, "count": 8}


def test_dropped_connection_then_retry_creates_exactly_one(world, approved, sim, account):
    sim.inject_fault(path_prefix="/v2/pods", kind="disconnect", method="POST")
    req = provisioning_run(request_id=approved().pk, client_factory=quick())
    assert req.state == S.FAILED and "did not answer" in req.last_error
    assert _ours(sim, req) == []
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    provisioning_run(request_id=req.pk, client_factory=quick())  # a duplicate task: nothing
    assert req.state == S.PROVISIONED and len(_ours(sim, req)) == 1


def test_runpod_refusing_the_pod_is_explained(world, approved, sim, account):
    # In labgov's catalog (synced before Runpod retired it), unknown to Runpod now.
    GpuType.objects.create(
        gpu_id="NVIDIA V100", name="V100", memory_gb=16, secure_price_per_hr_usd=D("0.20")
    )
    req = approved(gpu_type_id="NVIDIA V100", gpu_count=1)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.FAILED
    assert "Runpod refused the pod as invalid (400)" in req.last_error
    assert "unknown GPU type" in req.last_error


def test_after_a_sync_the_pods_spend_is_the_requests_actual(world, approved, sim, account):
    from labgov.funding.models import Allocation
    from labgov.provisioning.selectors import actual_usd_by_request

    req = provisioning_run(request_id=approved().pk, client_factory=quick())
    sim.advance(hours=3)
    run = account_sync(
        account_id=account.pk,
        start=req.spend_counted_from - dt.timedelta(hours=1),
        end=sim.state.now,
        client_factory=quick(30),
    )
    assert run.status == "succeeded", run.error
    actual = actual_usd_by_request([req.pk]).get(req.pk, 0)
    assert actual > 0
    req.refresh_from_db()
    assert req.commitment_usd == req.estimate_total_usd - actual  # the sync reconciled
    figures = Allocation.objects.with_figures().get(pk=world.allocation.pk)
    assert figures.spent_usd == actual
    assert figures.committed_usd + figures.spent_usd == req.estimate_total_usd


def test_network_volume_is_created_mounted_and_not_duplicated(world, approved, sim, account):
    req = approved(network_volume_gb=200, data_center_id="US-KS-2", storage_kept_days=D(30))
    sim.inject_fault(path_prefix="/v2/pods", kind="disconnect", method="POST")
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.FAILED
    volumes = [v for v in sim.state.list_volumes() if v["name"] == f"{req.marker}volume"]
    assert len(volumes) == 1 and volumes[0]["size"] == 200
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED
    volumes = [v for v in sim.state.list_volumes() if v["name"] == f"{req.marker}volume"]
    assert len(volumes) == 1  # the retry found it
    (pod,) = _ours(sim, req)
    assert pod["mounts"] == {"network": [{"volumeId": volumes[0]["id"], "path": "/workspace"}]}
    kinds = {r.kind: r for r in req.resources.all()}
    assert set(kinds) == {"pod", "network_volume"}
    assert kinds["network_volume"].current_allocation == world.allocation


def test_client_creates_a_network_volume(sim):
    with RunpodClient(base_url=sim.base_url, api_key=KEY) as client:
        volume = client.create_network_volume({"name": "v", "size": 20, "dataCenter": "EU-RO-1"})
        assert volume.size_gb == 20 and volume.data_center_id == "EU-RO-1"
        assert volume.id in {v.id for v in client.list_network_volumes()}
        from labgov.runpod.errors import RunpodRequestInvalid

        with pytest.raises(RunpodRequestInvalid):
            client.create_network_volume({"name": "v", "size": 5, "dataCenter": "EU-RO-1"})


@pytest.mark.parametrize("data_center_id", ["", "US-KS-2"])
def test_no_capacity_on_runpod_is_said_in_words_and_a_retry_places_it(
    world, approved, sim, account, data_center_id
):
    """Runpod's 400 "could not be placed" (no free GPUs of that type there): the request has
    one GPU type and cloud, so there is no other candidate to try; the requester reads why,
    the money committed is released, and a later retry creates the pod."""
    req = approved(data_center_id=data_center_id)
    sim.inject_fault(path_prefix="/v2/pods", kind="capacity", method="POST")
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.FAILED
    where = " in US-KS-2" if data_center_id else ""
    assert req.last_error.startswith(
        f"Runpod has no free capacity for {req.gpu_count} × {req.gpu_type_id} in Secure Cloud"
        f"{where} right now (400: "
    ), req.last_error
    assert "could not be placed" in req.last_error
    assert "another GPU type, cloud or data center" in req.last_error
    assert req.commitment_usd == 0
    assert _ours(sim, req) == []
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED and len(_ours(sim, req)) == 1


def test_a_403_for_the_gpu_type_is_said_in_words(world, approved, sim, account):
    sim.inject_fault(path_prefix="/v2/pods", kind="403", method="POST")
    req = provisioning_run(request_id=approved().pk, client_factory=quick())
    assert req.state == S.FAILED
    assert f"Runpod refused to create {req.gpu_count} × {req.gpu_type_id}" in req.last_error
    assert "write access" in req.last_error and "this GPU type or cloud" in req.last_error
    assert _ours(sim, req) == []


def _wait_for_worker(condition, worker, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.05)


@pytest.mark.celery_worker
@pytest.mark.usefixtures("postgres")
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_create_never_makes_a_second_pod(
    world, approved, sim, worker_process, monkeypatch
):
    """A real Celery worker killed (-9) while Runpod creates the pod: the task goes back to the
    queue, the redelivered run leaves the claimed request alone, and the run after the claim
    expires adopts the pod that attempt made. No second pod."""
    # Approval queues the task after commit; here the real worker gets it, by name.
    monkeypatch.setattr(tasks.provision_request, "delay", lambda *args: None)
    req = approved()
    assert req.state == S.PROVISIONING
    # Runpod takes three seconds to answer the create; the pod exists once it has.
    fault = sim.inject_fault(path_prefix="/v2/pods", kind="slow", delay=3, method="POST")
    runs_before = worker_process.tail().count("provision_request[")
    worker_process.send("labgov.provisioning.tasks.provision_request", req.pk)
    _wait_for_worker(lambda: fault.hits >= 1, worker_process)
    worker_process.kill_child()  # mid-request: the outcome is unknown to labgov

    # Back on the queue at once (acks_late, reject_on_worker_lost): the new child finds the
    # dead attempt's claim still held and leaves the request alone.
    _wait_for_worker(
        lambda: (
            worker_process.tail().count("provision_request[") >= runs_before + 2
            and "succeeded" in worker_process.tail().split("provision_request[")[-1]
        ),
        worker_process,
    )
    req.refresh_from_db()  # the marker of the killed attempt
    assert req.state == S.PROVISIONING and req.marker
    _wait_for_worker(lambda: len(_ours(sim, req)) == 1, worker_process)  # Runpod went ahead

    # The resume job's run once the claim has expired (LABGOV_PROVISION_CLAIM_SECONDS).
    ProvisioningRequest.objects.filter(pk=req.pk).update(provision_claimed_until=None)
    req = provisioning_run(request_id=req.pk)
    assert req.state == S.PROVISIONED, req.last_error
    (pod,) = _ours(sim, req)
    assert req.runpod_id == pod["id"]
    assert [r for r in sim.requests if r == ("POST", "/v2/pods")] == [("POST", "/v2/pods")]


def test_the_provisioning_task_retires_only_its_institutions_pages(world, approved, sim):
    """Its writes (the pod, its attribution, the request's state) are the request's
    institution's: another institution's cached pages stand (tests/dashboard/
    test_page_cache_task_scope.py has the rest of the tasks)."""
    from tests.dashboard.test_page_cache_scope import INSTITUTION, ME, _client, _state, _warm

    req = approved()
    ours, theirs = _client(world.member), _client(world.outsider)
    _warm(ours, ME)
    _warm(theirs, INSTITUTION)
    assert tasks.provision_request.delay(req.pk).get() == S.PROVISIONED
    assert _state(theirs, INSTITUTION) == "hit"
    assert _state(ours, ME) == "miss"
