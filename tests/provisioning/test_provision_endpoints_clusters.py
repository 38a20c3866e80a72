"""Serverless endpoints and clusters created on approval, against the Runpod simulator over
HTTP with the real client, as pods are (test_provision_sim.py): what is sent, attribution from
the creation hour, faults (capacity, lost_answer, 409, 429), adoption of only the unknown
attempt's own creation, and "Mark provisioned" refusing an id Runpod lists for another kind."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.selectors import actual_usd_by_request
from labgov.provisioning.services import (
    provisioning_retry,
    provisioning_run,
    request_approve,
    request_mark_provisioned,
)
from labgov.runpod.client import RunpodClient
from labgov.runpod.errors import RunpodNotFound, RunpodRequestInvalid
from labgov.runpod.models import GpuType, Resource
from labgov.runpod.sync import account_sync
from labgov.simulator import SimulatorServer, load_scenario
from tests.factories import RunpodAccountFactory, _encrypt
from tests.fixtures_sim import hour
from tests.provisioning.conftest import CLUSTER_CHECKLIST, H100

S = ProvisioningRequest.State
KEY = "sim-key-endpoints-clusters"
# The simulator's catalog puts the H100 in the ADA_80_PRO serverless pool; a sync copies it.
POOL = "ADA_80_PRO"

ENDPOINT = {
    "title": "Serve the 8B model",
    "deployment_model": "serverless",
    "gpu_count": 1,
    "image": "runpod/worker-vllm:2.1",
    "requests_per_day": D(2000),
    "seconds_per_request": D("1.5"),
    "duration_days": D(2),
    "idle_workers": 1,
    "workers_max": 4,
    "idle_timeout_seconds": 30,
    "scaling_type": "REQUEST_COUNT",
    "scaling_value": 8,
    "container_disk_gb": 20,
    "network_volume_gb": 50,
    "data_center_id": "US-KS-2",
}
CLUSTER = {
    "title": "Pretrain 70B",
    "deployment_model": "cluster",
    "node_count": 2,
    "gpu_count": 8,
    "expected_hours": D(5),
    "runs_distributed": True,
    **CLUSTER_CHECKLIST,
    "cluster_type": "SLURM",
    "data_center_id": "US-KS-2",
    "network_volume_gb": 100,
    "container_disk_gb": 20,
}


@pytest.fixture
def sim():
    with SimulatorServer(scenario=load_scenario("default"), api_key=KEY) as server:
        server.set_now(timezone.now())
        yield server


@pytest.fixture
def account(world, sim, catalog):
    GpuType.objects.filter(gpu_id=H100).update(pool=POOL)
    return RunpodAccountFactory(
        institution=world.institution,
        base_url=sim.base_url,
        api_key_encrypted=_encrypt(KEY),
        api_key_last4=KEY[-4:],
        write_key_encrypted=_encrypt(KEY),
        write_key_last4=KEY[-4:],
    )


def quick(timeout=5.0):
    def factory(account):
        return RunpodClient(
            base_url=account.base_url,
            api_key=KEY,
            timeout=timeout,
            max_attempts=3,
            deadline_s=10,
            sleep=lambda s: None,
        )

    return factory


@pytest.fixture
def approved(world, submitted, account):
    def make(values, **overrides):
        req = request_approve(actor=world.lab_admin, req=submitted(**{**values, **overrides}))
        assert req.state == S.PROVISIONING  # the account has a write key: labgov creates it
        return req

    return make


def _endpoints(sim, req):
    return [e for e in sim.state.list_endpoints() if e["name"].startswith(req.marker)]


def _clusters(sim, req):
    return [c for c in sim.state.list_clusters() if c["name"].startswith(req.marker)]


def _posts(sim, path):
    return [r for r in sim.requests if r == ("POST", path)]


def test_an_approved_endpoint_is_created_with_its_shape_and_attributed(
    world, approved, sim, account
):
    req = provisioning_run(request_id=approved(ENDPOINT).pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    (endpoint,) = _endpoints(sim, req)
    assert endpoint["id"] == req.runpod_id
    assert endpoint["gpu"]["pools"] == [POOL] and endpoint["gpu"]["count"] == 1
    # Scaling on request count, it has no idle timeout: labgov sent none (the simulator, as
    # Runpod, refuses a create that carries one) and none is listed.
    assert endpoint["workers"] == {"min": 1, "max": 4}
    assert endpoint["scaling"] == {"type": "REQUEST_COUNT", "requestCount": 8}
    assert endpoint["image"] == "runpod/worker-vllm:2.1"
    assert endpoint["env"] == {"LABGOV_REQUEST": str(req.pk)}  # no allocation tag
    assert endpoint["dataCenterIds"] == ["US-KS-2"]
    (volume,) = [v for v in sim.state.list_volumes() if v["name"] == f"{req.marker}volume"]
    assert endpoint["networkVolumes"] == [volume["id"]] and volume["dataCenter"] == "US-KS-2"
    kinds = {r.kind: r for r in req.resources.all()}
    assert set(kinds) == {"serverless", "network_volume"}
    resource = kinds["serverless"]
    assert resource.current_allocation == world.allocation
    assert resource.label == req.title and resource.name.startswith(req.marker)
    created = dt.datetime.fromisoformat(endpoint["createdAt"].replace("Z", "+00:00"))
    assert resource.assignments.get().starts_at == hour(created)
    actions = AuditEvent.objects.filter(target_id=str(req.pk)).values_list("action", flat=True)
    assert "provisioning_request.provisioned" in list(actions)
    assert _posts(sim, "/v2/serverless") == [("POST", "/v2/serverless")]


def test_an_approved_cluster_is_created_in_its_volumes_data_center(world, approved, sim, account):
    req = provisioning_run(request_id=approved(CLUSTER).pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    (cluster,) = _clusters(sim, req)
    assert cluster["id"] == req.runpod_id
    assert cluster["compute"] == {"gpuTypeId": H100, "gpuCountPerPod": 8, "podCount": 2}
    assert cluster["type"] == "SLURM" and cluster["dataCenterId"] == "US-KS-2"
    members = sim.state.cluster_pods(cluster["id"])
    assert len(members) == 2
    assert {m["mounts"]["network"][0]["volumeId"] for m in members if m["mounts"]} <= {
        v["id"] for v in sim.state.list_volumes()
    }
    resource = req.resources.get(kind="cluster")
    assert resource.current_allocation == world.allocation
    assert resource.gpu_count == 16 and resource.details["pod_count"] == 2
    created = dt.datetime.fromisoformat(cluster["createdAt"].replace("Z", "+00:00"))
    assert resource.assignments.get().starts_at == hour(created)


@pytest.mark.parametrize("values", [ENDPOINT, CLUSTER], ids=["endpoint", "cluster"])
def test_after_a_sync_its_spend_is_the_requests_actual(world, approved, sim, account, values):
    req = provisioning_run(request_id=approved(values).pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
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
    kind = "serverless" if values is ENDPOINT else "cluster"
    assert Resource.objects.get(runpod_id=req.runpod_id, kind=kind).gone_at is None


@pytest.mark.parametrize(
    ("values", "path"),
    [(ENDPOINT, "/v2/serverless"), (CLUSTER, "/v2/clusters")],
    ids=["endpoint", "cluster"],
)
def test_a_lost_answer_then_a_retry_adopts_the_one_it_made(
    world, approved, sim, account, values, path
):
    sim.inject_fault(path_prefix=path, kind="lost_answer", method="POST")
    req = provisioning_run(request_id=approved(values).pk, client_factory=quick())
    assert req.state == S.FAILED and req.provision_outcome_unknown
    assert "may or may not have been created" in req.last_error
    made = _endpoints(sim, req) if values is ENDPOINT else _clusters(sim, req)
    assert len(made) == 1  # Runpod made it; labgov never heard
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    assert req.runpod_id == made[0]["id"]
    assert _posts(sim, path) == [("POST", path)]  # never a second one


def test_an_endpoint_with_the_token_but_another_shape_is_not_adopted(world, approved, sim, account):
    """The token is visible on Runpod once the lost answer's endpoint exists; someone changes
    that endpoint (more workers) before the retry: it is no longer what was approved."""
    sim.inject_fault(path_prefix="/v2/serverless", kind="lost_answer", method="POST")
    req = provisioning_run(request_id=approved(ENDPOINT).pk, client_factory=quick())
    (first,) = _endpoints(sim, req)
    with RunpodClient(base_url=sim.base_url, api_key=KEY) as client:
        client.update_endpoint(first["id"], {"workers": {"max": 40}})
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    assert req.runpod_id != first["id"]
    assert first["id"] not in set(req.resources.values_list("runpod_id", flat=True))


def test_no_capacity_for_a_cluster_is_said_in_words_and_a_retry_places_it(
    world, approved, sim, account
):
    # Without a new volume: one this attempt made would stay its own (the retry mounts it).
    sim.inject_fault(path_prefix="/v2/clusters", kind="capacity", method="POST")
    req = approved(CLUSTER, network_volume_gb=0)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.FAILED and not req.provision_outcome_unknown
    assert req.last_error.startswith(
        f"Runpod has no free capacity for a cluster of 2 pods × 8 × {H100} in Secure Cloud"
        " in US-KS-2 right now (400: "
    ), req.last_error
    assert "nothing is charged for the cluster" in req.last_error
    assert req.commitment_usd == 0 and _clusters(sim, req) == []
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED and len(_clusters(sim, req)) == 1


def test_a_409_is_a_known_refusal_and_the_retry_starts_afresh(world, approved, sim, account):
    sim.inject_fault(path_prefix="/v2/serverless", kind="409", method="POST")
    req = approved(ENDPOINT, network_volume_gb=0)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.FAILED and not req.provision_outcome_unknown
    token = req.provision_token
    provisioning_retry(actor=world.member, req=req)
    req = provisioning_run(request_id=req.pk, client_factory=quick())
    assert req.state == S.PROVISIONED and req.provision_token != token
    assert len(_endpoints(sim, req)) == 1


def test_a_429_is_waited_out_and_creates_one(world, approved, sim, account):
    sim.inject_fault(path_prefix="/v2/clusters", kind="429", method="POST", retry_after=1)
    req = provisioning_run(request_id=approved(CLUSTER).pk, client_factory=quick())
    assert req.state == S.PROVISIONED, req.last_error
    assert len(_clusters(sim, req)) == 1


def test_without_a_write_key_an_approved_cluster_waits_to_be_made_by_hand(
    world, submitted, account
):
    account.write_key_encrypted = ""
    account.save(update_fields=["write_key_encrypted"])
    req = request_approve(actor=world.lab_admin, req=submitted(**CLUSTER))
    assert req.state == S.APPROVED


def test_marking_a_serverless_request_with_a_clusters_id_is_refused(world, submitted, sim, account):
    """The phantom: marking a serverless request with a cluster's id used to create a
    serverless resource of that id, paid by the request. Runpod is asked now."""
    account.write_key_encrypted = ""
    account.save(update_fields=["write_key_encrypted"])
    with RunpodClient(base_url=sim.base_url, api_key=KEY) as client:
        cluster = client.create_cluster(
            {
                "name": "made-by-hand",
                "type": "TRAINING",
                "compute": {"gpuTypeId": H100, "gpuCountPerPod": 8, "podCount": 2},
                "image": "runpod/pytorch:2.8.0",
            }
        )
        endpoint = client.create_endpoint(
            {
                "name": "made-by-hand-too",
                "type": "QUEUE",
                "image": "runpod/worker-vllm:2.1",
                "gpu": {"pools": [POOL]},
                "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
            }
        )
    req = request_approve(actor=world.lab_admin, req=submitted(**ENDPOINT))
    assert req.state == S.APPROVED
    for wrong in (cluster.id, "no-such-endpoint"):
        with pytest.raises(DomainError, match=f"lists no serverless endpoint with the id {wrong}"):
            request_mark_provisioned(
                actor=world.lab_admin, req=req, account=account, runpod_id=wrong
            )
    assert not Resource.objects.filter(runpod_id=cluster.id).exists()
    req.refresh_from_db()
    assert req.state == S.APPROVED and not req.resources.exists()
    req = request_mark_provisioned(
        actor=world.lab_admin, req=req, account=account, runpod_id=endpoint.id
    )
    assert req.state == S.PROVISIONED
    resource = req.resources.get()
    assert resource.kind == "serverless" and resource.name == "made-by-hand-too"
    assert resource.current_allocation == world.allocation


def test_a_failed_cluster_made_by_hand_is_marked_and_commits_again(world, approved, sim, account):
    sim.inject_fault(path_prefix="/v2/clusters", kind="capacity", method="POST")
    req = provisioning_run(request_id=approved(CLUSTER).pk, client_factory=quick())
    assert req.state == S.FAILED and req.commitment_usd == 0
    with RunpodClient(base_url=sim.base_url, api_key=KEY) as client:
        cluster = client.create_cluster(
            {
                "name": "by-hand",
                "type": "SLURM",
                "compute": {"gpuTypeId": H100, "gpuCountPerPod": 8, "podCount": 2},
                "image": "x",
            }
        )
    req = request_mark_provisioned(
        actor=world.lab_admin, req=req, account=account, runpod_id=cluster.id
    )
    assert req.state == S.PROVISIONED
    assert req.commitment_usd == req.estimate_total_usd


def test_the_simulator_updates_and_deletes_endpoints_and_clusters(sim):
    with RunpodClient(base_url=sim.base_url, api_key=KEY, sleep=lambda s: None) as client:
        endpoint = client.create_endpoint(
            {
                "name": "e",
                "type": "QUEUE",
                "image": "i",
                "gpu": {"pools": [POOL], "count": 1},
                "workers": {"min": 1, "max": 2},
                "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
            }
        )
        changed = client.update_endpoint(endpoint.id, {"workers": {"min": 0, "max": 2}})
        assert (changed.workers_min, changed.workers_max) == (0, 2)
        cluster = client.create_cluster(
            {
                "name": "c",
                "type": "RAY",
                "compute": {"gpuTypeId": H100, "gpuCountPerPod": 1, "podCount": 2},
                "image": "i",
            }
        )
        assert client.update_cluster(cluster.id, {"name": "c2"}).name == "c2"
        with pytest.raises(RunpodRequestInvalid):
            client.update_cluster(cluster.id, {"compute": {"podCount": 3}})  # name only
        with pytest.raises(RunpodRequestInvalid):
            client.create_endpoint({"name": "e", "type": "QUEUE", "image": "i"})  # no scaling
        client.delete_endpoint(endpoint.id)
        client.delete_cluster(cluster.id)
        assert endpoint.id not in {e.id for e in client.list_endpoints()}
        assert cluster.id not in {c.id for c in client.list_clusters()}
        with pytest.raises(RunpodNotFound):
            client.delete_cluster(cluster.id)
        volume = client.create_network_volume({"name": "v", "size": 10, "dataCenter": "EU-RO-1"})
        with pytest.raises(RunpodRequestInvalid, match="is in EU-RO-1, not in US-KS-2"):
            client.create_cluster(
                {
                    "name": "c",
                    "type": "TRAINING",
                    "compute": {"gpuTypeId": H100, "gpuCountPerPod": 8, "podCount": 2},
                    "image": "i",
                    "dataCenterIds": ["US-KS-2"],
                    "mounts": {"network": [{"volumeId": volume.id, "path": "/workspace"}]},
                }
            )
