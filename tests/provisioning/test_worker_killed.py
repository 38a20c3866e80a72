"""A real Celery worker killed (-9) while Runpod is creating the pod: the task goes back to the
queue, and the run after the claim expires adopts the pod that attempt made; no second pod."""

import time

import pytest

from labgov.provisioning import tasks
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import provisioning_run
from tests.provisioning.test_provision_sim import _ours, account, approved, sim  # noqa: F401

S = ProvisioningRequest.State
pytestmark = [
    pytest.mark.celery_worker,
    pytest.mark.usefixtures("postgres"),
    pytest.mark.django_db(transaction=True),
]


def _wait_for(condition, worker, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.05)


def test_a_worker_killed_mid_create_never_makes_a_second_pod(
    world, approved, sim, worker_process, monkeypatch  # noqa: F811
):
    # Approval queues the task after commit; here the real worker gets it, by name.
    monkeypatch.setattr(tasks.provision_request, "delay", lambda *args: None)
    req = approved()
    assert req.state == S.PROVISIONING
    # Runpod takes three seconds to answer the create; the pod exists once it has.
    fault = sim.inject_fault(path_prefix="/v2/pods", kind="slow", delay=3, method="POST")
    runs_before = worker_process.tail().count("provision_request[")
    worker_process.send("labgov.provisioning.tasks.provision_request", req.pk)
    _wait_for(lambda: fault.hits >= 1, worker_process)
    worker_process.kill_child()  # mid-request: the outcome is unknown to labgov

    # Back on the queue at once (acks_late, reject_on_worker_lost): the new child finds the
    # dead attempt's claim still held and leaves the request alone.
    _wait_for(
        lambda: worker_process.tail().count("provision_request[") >= runs_before + 2
        and "succeeded" in worker_process.tail().split("provision_request[")[-1],
        worker_process,
    )
    req.refresh_from_db()  # the marker of the killed attempt
    assert req.state == S.PROVISIONING and req.marker
    _wait_for(lambda: len(_ours(sim, req)) == 1, worker_process)  # Runpod went ahead

    # The resume job's run once the claim has expired (LABGOV_PROVISION_CLAIM_SECONDS).
    ProvisioningRequest.objects.filter(pk=req.pk).update(provision_claimed_until=None)
    req = provisioning_run(request_id=req.pk)
    assert req.state == S.PROVISIONED, req.last_error
    (pod,) = _ours(sim, req)
    assert req.runpod_id == pod["id"]
    assert [r for r in sim.requests if r == ("POST", "/v2/pods")] == [("POST", "/v2/pods")]
