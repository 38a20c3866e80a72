"""Provisioning's decisions with a fake client: what is created, what a retry finds, how a
failure reads. The same paths run against the simulator over HTTP in test_provision_sim.py."""

import datetime as dt
import re
from decimal import Decimal as D

import pytest
from django.utils import timezone

from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import provisioning_retry, provisioning_run, request_approve
from labgov.provisioning.services.provision import explain, pod_body
from labgov.runpod.errors import (
    RunpodAuthError,
    RunpodInsufficientBalance,
    RunpodOutcomeUnknown,
    RunpodRequestInvalid,
    RunpodUnavailable,
)
from labgov.runpod.types import NetworkVolume, Pod
from tests.factories import RunpodAccountFactory

S = ProvisioningRequest.State


def _pod(body, pod_id="newpod1", created_at=None):
    mounts = body.get("mounts", {})
    network = mounts.get("network") or [{}]
    return Pod(
        id=pod_id,
        name=body["name"],
        status="STARTING",
        cost_per_hr_usd=D("35.12"),
        image=body["image"],
        env=body.get("env", {}),
        container_disk_gb=body.get("disk", 0),
        volume_disk_gb=mounts.get("persistent", {}).get("size", 0),
        network_volume_id=network[0].get("volumeId"),
        gpu_type_id=body["gpu"]["id"],
        gpu_count=body["gpu"]["count"],
        cloud=body.get("cloud"),
        data_center_id=None,
        template_id=None,
        cluster_id=None,
        created_at=created_at or timezone.now(),
        started_at=None,
    )


class FakeClient:
    def __init__(self, *, fail=None, pods=(), volumes=()):
        self.fail = fail
        self.pods = list(pods)
        self.volumes = list(volumes)
        self.created = []
        self.listed = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def list_pods(self, include_cluster_pods=True):
        self.listed += 1
        return list(self.pods)

    def list_network_volumes(self):
        return list(self.volumes)

    def create_network_volume(self, body):
        volume = NetworkVolume(
            id="vol1",
            name=body["name"],
            size_gb=body["size"],
            data_center_id=body["dataCenter"],
            volume_type="STANDARD",
        )
        self.volumes.append(volume)
        self.created.append(("volume", body))
        return volume

    def create_pod(self, body):
        self.created.append(("pod", body))
        if self.fail is not None:
            raise self.fail
        pod = _pod(body)
        self.pods.append(pod)
        return pod


@pytest.fixture
def account(world):
    return RunpodAccountFactory(institution=world.institution)


@pytest.fixture
def approved(world, submitted):
    def make(**overrides):
        return request_approve(actor=world.lab_admin, req=submitted(**overrides))

    return make


def _run(req, client):
    return provisioning_run(request_id=req.pk, client_factory=lambda a: client)


def test_creates_the_pod_with_the_marker_and_the_allocation(world, approved, account):
    req = approved()
    client = FakeClient()
    req = _run(req, client)
    assert req.state == S.PROVISIONED and req.runpod_id == "newpod1"
    ((kind, body),) = client.created
    # The request's id for people, then the attempt's random token: nobody can guess it.
    assert re.fullmatch(rf"labgov-r{req.pk}-[0-9a-f]{{16}}-fine-tune-8b", body["name"])
    assert body["name"].startswith(req.marker)
    # No allocation tag: every member of the Runpod team can read a pod's environment.
    assert body["env"] == {"LABGOV_REQUEST": str(req.pk)}
    assert body["gpu"] == {"id": "NVIDIA H100 80GB HBM3", "count": 8}
    pod = req.resources.get()
    assert pod.current_allocation == world.allocation
    assert pod.assignments.get().source == "provisioned"
    assert req.runpod_account == account


def test_lab_account_comes_before_the_institution_wide_one(world, approved, account):
    own = RunpodAccountFactory(institution=world.institution, lab=world.lab)
    req = _run(approved(), FakeClient())
    assert req.runpod_account == own


def test_no_account_fails_in_words(world, approved):
    req = approved()
    req = provisioning_run(request_id=req.pk, client_factory=lambda a: pytest.fail("no call"))
    assert req.state == S.FAILED
    assert "No Runpod account is connected for Vision" in req.last_error
    assert req.commitment_usd == 0


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (RunpodInsufficientBalance("402", status=402), "balance is too low"),
        (RunpodRequestInvalid("bad", status=422, detail="disk too small"), "disk too small"),
        (RunpodAuthError("no", status=403), "write access"),
        (RunpodUnavailable("timed out after 2 attempts"), "never created twice"),
        (RunpodOutcomeUnknown("answer unreadable", status=201), "never created twice"),
    ],
)
def test_failures_read_plainly_and_release_the_money(world, approved, account, error, words):
    req = _run(approved(), FakeClient(fail=error))
    assert req.state == S.FAILED
    assert words in req.last_error
    assert req.commitment_usd == 0
    assert words in explain(error)


def test_retry_finds_the_pod_an_earlier_attempt_created(world, approved, account):
    """The first attempt timed out after Runpod had created the pod."""
    req = approved()
    client = FakeClient(fail=RunpodUnavailable("timed out"))
    req = _run(req, client)
    assert req.state == S.FAILED
    client.pods.append(_pod(client.created[0][1], pod_id="createdanyway"))
    client.fail = None
    provisioning_retry(actor=world.member, req=req)
    req = _run(req, client)
    assert req.state == S.PROVISIONED and req.runpod_id == "createdanyway"
    assert [k for k, _ in client.created] == ["pod"]  # no second create


def _decoy(name, gpu="NVIDIA RTX A5000", count=1, **env):
    body = {"name": name, "image": "runpod/pytorch:2.8.0", "gpu": {"id": gpu, "count": count}}
    return _pod({**body, "disk": 1, "env": env}, pod_id="decoy")


def test_a_pod_prepared_with_the_old_marker_is_not_taken_over(world, approved, account):
    """Issue 9, attack 2: a team member creates labgov-r<id>-adopt-me (1 x A5000, also with
    LABGOV_REQUEST=<id>) before the first attempt; it used to be "provisioned" and its whole
    history billed to the request's allocation."""
    req = approved()
    decoys = [
        _decoy(f"labgov-r{req.pk}-adopt-me"),
        _decoy("anything", LABGOV_REQUEST=str(req.pk)),
    ]
    client = FakeClient(pods=decoys)
    req = _run(req, client)
    assert req.state == S.PROVISIONED and req.runpod_id == "newpod1"
    assert [k for k, _ in client.created] == ["pod"]
    assert client.listed == 0  # a first attempt never looks for anything to adopt
    assert not req.resources.filter(runpod_id="decoy").exists()


def test_a_pod_matching_in_every_way_is_not_adopted_by_a_first_attempt(world, approved, account):
    req = approved()
    twin = _pod(pod_body(req, network_volume_id=None) | {"name": req.marker + "x"}, "twin")
    req = _run(req, FakeClient(pods=[twin]))
    assert req.runpod_id == "newpod1"


def _unknown_first_attempt(approved):
    """An attempt that timed out: Runpod may or may not have created the pod."""
    req = approved()
    client = FakeClient(fail=RunpodUnavailable("timed out"))
    req = _run(req, client)
    assert req.state == S.FAILED and req.provision_outcome_unknown
    client.fail = None
    return req, client


@pytest.mark.parametrize(
    "change",
    [
        {"gpu": {"id": "NVIDIA RTX A5000", "count": 1}},
        {"gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 1}},
        {"image": "someone/else:latest"},
        {"disk": 500},
        {"mounts": {"persistent": {"size": 100, "path": "/workspace"}}},
    ],
)
def test_a_retry_adopts_only_a_pod_configured_as_requested(world, approved, account, change):
    req, client = _unknown_first_attempt(approved)
    body = client.created[0][1]
    client.pods.append(_pod({**body, **change}, pod_id="lookalike"))
    provisioning_retry(actor=world.member, req=req)
    req = _run(req, client)
    assert req.state == S.PROVISIONED and req.runpod_id == "newpod1"
    assert [k for k, _ in client.created] == ["pod", "pod"]


def test_a_retry_adopts_no_pod_created_before_the_attempt(world, approved, account):
    req, client = _unknown_first_attempt(approved)
    body = client.created[0][1]
    before = req.provision_started_at - dt.timedelta(hours=1)
    client.pods.append(_pod(body, pod_id="older", created_at=before))
    provisioning_retry(actor=world.member, req=req)
    req = _run(req, client)
    assert req.runpod_id == "newpod1"


def test_a_retry_after_a_known_refusal_starts_afresh(world, approved, account):
    req = approved()
    client = FakeClient(fail=RunpodInsufficientBalance("402", status=402))
    req = _run(req, client)
    first_token = req.provision_token
    assert req.state == S.FAILED and not req.provision_outcome_unknown
    client.fail = None
    provisioning_retry(actor=world.member, req=req)
    req = _run(req, client)
    assert req.state == S.PROVISIONED and req.provision_token != first_token
    assert client.listed == 0


def test_a_worker_that_died_mid_attempt_is_resumed_by_adoption(world, approved, account):
    """The claim expired with the outcome unknown: the next run looks for its pod first."""
    req = approved()
    client = FakeClient()

    def die(body):
        client.created.append(("pod", body))
        client.pods.append(_pod(body, pod_id="made-before-dying"))
        raise KeyboardInterrupt  # the worker is killed after Runpod created the pod

    client.create_pod = die
    with pytest.raises(KeyboardInterrupt):
        _run(req, client)
    ProvisioningRequest.objects.filter(pk=req.pk).update(provision_claimed_until=None)
    del client.create_pod
    req = _run(req, client)
    assert req.state == S.PROVISIONED and req.runpod_id == "made-before-dying"
    assert len(client.created) == 1


def test_attribution_starts_at_the_pods_creation_not_1970(world, approved, account):
    req, client = _unknown_first_attempt(approved)
    created = req.provision_started_at + dt.timedelta(minutes=1)
    client.pods.append(_pod(client.created[0][1], pod_id="ours", created_at=created))
    provisioning_retry(actor=world.member, req=req)
    req = _run(req, client)
    assert req.runpod_id == "ours"
    assignment = req.resources.get().assignments.get()
    assert assignment.starts_at == created.replace(minute=0, second=0, microsecond=0)


def test_a_second_run_while_one_holds_the_claim_does_nothing(world, approved, account):
    req = approved()
    ProvisioningRequest.objects.filter(pk=req.pk).update(
        provision_claimed_until="2999-01-01T00:00:00Z"
    )
    client = FakeClient()
    assert _run(req, client).state == S.PROVISIONING
    assert client.created == []


def test_run_of_a_request_no_longer_provisioning_does_nothing(world, submitted, account):
    req = submitted()
    client = FakeClient()
    assert _run(req, client).state == S.SUBMITTED
    assert client.created == []


def test_network_volume_is_created_once_and_mounted(world, approved, account):
    req = approved(network_volume_gb=200, data_center_id="US-KS-2", storage_kept_days=D(30))
    client = FakeClient()
    req = _run(req, client)
    kinds = [k for k, _ in client.created]
    assert kinds == ["volume", "pod"]
    assert client.created[0][1] == {
        "name": f"labgov-r{req.pk}-{req.provision_token}-volume",
        "size": 200,
        "dataCenter": "US-KS-2",
    }
    assert client.created[1][1]["mounts"] == {
        "network": [{"volumeId": "vol1", "path": "/workspace"}]
    }
    assert {r.kind for r in req.resources.all()} == {"pod", "network_volume"}
    assert all(r.current_allocation == world.allocation for r in req.resources.all())


@pytest.mark.parametrize("flaw", ["seen before the attempt", "another size"])
def test_a_retry_adopts_only_the_volume_its_attempt_made(world, approved, account, flaw):
    from tests.factories import ResourceFactory

    req = approved(network_volume_gb=200, data_center_id="US-KS-2", storage_kept_days=D(30))
    client = FakeClient(fail=RunpodUnavailable("timed out"))
    client.create_network_volume = lambda body: (_ for _ in ()).throw(RunpodUnavailable("t/o"))
    req = _run(req, client)
    assert req.state == S.FAILED and req.provision_outcome_unknown
    del client.create_network_volume
    client.fail = None
    size = 200 if flaw == "seen before the attempt" else 100
    client.volumes.append(
        NetworkVolume(
            id="planted",
            name=f"{req.marker}volume",
            size_gb=size,
            data_center_id="US-KS-2",
            volume_type="STANDARD",
        )
    )
    if flaw == "seen before the attempt":
        ResourceFactory(
            account=account,
            kind="network_volume",
            runpod_id="planted",
            first_seen_at=req.provision_started_at - dt.timedelta(days=1),
        )
    provisioning_retry(actor=world.member, req=req)
    req = _run(req, client)
    assert req.state == S.PROVISIONED
    assert [k for k, _ in client.created] == ["volume", "pod"]
    volume = req.resources.get(kind="network_volume")
    assert volume.runpod_id == "vol1"


def test_pod_body_volume_disk(world, draft):
    req = draft(volume_disk_gb=50, data_center_id="EU-RO-1")
    body = pod_body(req, network_volume_id=None)
    assert body["mounts"] == {"persistent": {"size": 50, "path": "/workspace"}}
    assert body["dataCenterIds"] == ["EU-RO-1"]
    assert body["disk"] == 1  # Runpod needs at least 1 GB of container disk


def test_requests_left_provisioning_are_resumed(world, approved, account, monkeypatch):
    import datetime as dt

    from django.utils import timezone

    from labgov.provisioning.services import provisioning_resume
    from labgov.provisioning.tasks import provision_request

    req = approved()  # provisioning, its task never ran (no commit in this test)
    queued = []
    monkeypatch.setattr(provision_request, "delay", queued.append)
    assert provisioning_resume() == 0  # too fresh: its task may still be on its way
    later = timezone.now() + dt.timedelta(minutes=11)
    assert provisioning_resume(now=later) == 1
    assert queued == [req.pk]
    ProvisioningRequest.objects.filter(pk=req.pk).update(
        provision_claimed_until=later + dt.timedelta(minutes=5)
    )
    assert provisioning_resume(now=later) == 0  # a worker holds it
