"""Every policy check, by the reason it gives."""

import datetime as dt
from decimal import Decimal as D

import pytest

from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.funding.models import Allocation
from labgov.provisioning.assessment import (
    auto_approvable,
    default_policy,
    estimate_request,
    findings,
    needs_second_approval,
)
from labgov.provisioning.models import ProvisioningPolicy, ProvisioningRequest
from labgov.provisioning.selectors import policy_for_lab
from labgov.provisioning.services import policy_save
from tests.provisioning.conftest import A40, CLUSTER_CHECKLIST, H100, POD_VALUES

TODAY = dt.date(2026, 11, 30)


def _request(world, **overrides):
    values = {**POD_VALUES, **overrides}
    return ProvisioningRequest(
        requester=world.member, allocation=world.allocation, lab=world.lab, **values
    )


def _codes(world, catalog, *, policy=None, allocation=None, today=TODAY, **overrides):
    req = _request(world, **overrides)
    gpu = catalog.get(req.gpu_type_id)
    policy = policy or default_policy(world.institution.pk)
    estimate = estimate_request(req, gpu)
    found = findings(
        req, policy=policy, gpu=gpu, estimate=estimate, allocation=allocation, today=today
    )
    return {f.code: f for f in found}


def _policy(world, **fields):
    policy = default_policy(world.institution.pk)
    for name, value in fields.items():
        setattr(policy, name, value)
    return policy


def _with_figures(world, remaining=None):
    allocation = (
        Allocation.objects.with_figures()
        .select_related("funding_source")
        .get(pk=world.allocation.pk)
    )
    if remaining is not None:
        allocation.remaining_usd = remaining
    return allocation


def test_the_seeds_pod_passes_the_default_policy(world, catalog):
    found = _codes(world, catalog, allocation=_with_figures(world, D(1000)))
    assert {c for c, f in found.items() if f.blocking} == set()


@pytest.mark.parametrize(
    ("policy_fields", "overrides", "code", "words"),
    [
        ({"allowed_models": ["serverless"]}, {}, "model_not_allowed", "does not allow Pods"),
        ({"allowed_gpu_types": [A40]}, {}, "gpu_not_allowed", "GPU type H100 SXM is not allowed"),
        ({"allowed_clouds": ["SECURE"]}, {"cloud": "COMMUNITY"}, "cloud_not_allowed", "Community"),
        ({"max_gpus": 4}, {}, "max_gpus", "8 GPUs is over the lab's maximum of 4"),
        ({"max_usd_per_hour": D(30)}, {}, "max_usd_per_hour", "$35.12/hour is over"),
        ({"max_request_usd": D(300)}, {}, "max_request_usd", "$351.20 is over the lab's maximum"),
    ],
)
def test_policy_limits(world, catalog, policy_fields, overrides, code, words):
    found = _codes(world, catalog, policy=_policy(world, **policy_fields), **overrides)
    assert found[code].blocking
    assert words in found[code].message


def test_unknown_gpu_type(world, catalog):
    found = _codes(world, catalog, gpu_type_id="NVIDIA B300")
    assert "not in the synced Runpod catalog" in found["gpu_unknown"].message


def test_over_the_allocations_remaining(world, catalog):
    found = _codes(world, catalog, allocation=_with_figures(world, D("351.19")))
    assert found["over_allocation"].message == (
        "The estimate of $351.20 is more than the allocation has left ($351.19)."
    )


def test_someone_elses_allocation(world, catalog):
    other = _request(world)
    other.requester = world.lab_admin
    gpu = catalog[H100]
    found = findings(
        other,
        policy=default_policy(world.institution.pk),
        gpu=gpu,
        estimate=estimate_request(other, gpu),
        allocation=_with_figures(world),
        today=TODAY,
    )
    assert "allocation_not_own" in {f.code for f in found}


def test_allocation_not_covering_today(world, catalog):
    found = _codes(
        world,
        catalog,
        allocation=_with_figures(world),
        today=world.allocation.end_date + dt.timedelta(days=1),
    )
    assert "does not cover today" in found["allocation_inactive"].message


def test_funding_source_on_hold(world, catalog):
    world.funding_source.status = "on_hold"
    world.funding_source.save()
    found = _codes(world, catalog, allocation=_with_figures(world))
    assert "takes no new commitments" in found["funding_not_active"].message


def test_spot_is_retired(world, catalog):
    found = _codes(world, catalog, interruptible=True)
    assert (
        "Interruptible (spot) capacity no longer exists on Runpod" in found["spot_retired"].message
    )


def test_network_volume_requires_secure_cloud(world, catalog):
    found = _codes(world, catalog, cloud="COMMUNITY", network_volume_gb=200, data_center_id="X")
    assert "network volume requires Secure Cloud" in found["network_volume_secure_only"].message


def test_pod_cannot_mount_volume_disk_and_network_volume(world, catalog):
    found = _codes(world, catalog, volume_disk_gb=50, network_volume_gb=50, data_center_id="X")
    assert "volume_and_network_volume" in found


def test_network_volume_needs_a_data_center(world, catalog):
    assert "network_volume_needs_data_center" in _codes(world, catalog, network_volume_gb=50)


def test_pod_needs_image_and_hours(world, catalog):
    found = _codes(world, catalog, image="", expected_hours=D(0))
    assert {"no_image", "no_hours"} <= set(found)


def test_gpu_count_over_what_runpod_offers(world, catalog):
    found = _codes(world, catalog, gpu_count=9)
    assert "at most 8 × H100 SXM" in found["gpu_count_over_catalog"].message


def test_serverless_needs_a_pattern_and_a_price(world, catalog):
    found = _codes(
        world, catalog, deployment_model="serverless", gpu_type_id=A40, expected_hours=D(0)
    )
    assert {"no_days", "no_pattern", "no_price"} <= set(found)
    assert "no_image" not in found and "no_hours" not in found


CLUSTER = {
    "deployment_model": "cluster",
    "node_count": 2,
    "gpu_count": 8,
    "runs_distributed": True,
    **CLUSTER_CHECKLIST,
}


def test_a_plain_cluster_passes(world, catalog):
    found = _codes(world, catalog, **CLUSTER)
    assert not [c for c, f in found.items() if f.blocking]


def test_cluster_over_two_nodes_needs_a_raised_spending_limit(world, catalog):
    found = _codes(world, catalog, **{**CLUSTER, "node_count": 3})
    assert "needs a raised Runpod spending limit first" in found["cluster_spending_limit"].message
    raised = _codes(world, catalog, **{**CLUSTER, "node_count": 3, "spending_limit_raised": True})
    assert "cluster_spending_limit" not in raised


def test_cluster_limits(world, catalog):
    assert "cluster_max" in _codes(world, catalog, **{**CLUSTER, "node_count": 9})
    assert "cluster_min_nodes" in _codes(world, catalog, **{**CLUSTER, "node_count": 1})


def test_cluster_for_memory_one_node_could_hold(world, catalog):
    found = _codes(world, catalog, **{**CLUSTER, "gpu_memory_needed_gb": 600})
    assert "600 GB of GPU memory fits on one node (8 × 80 GB = 640 GB)" in (
        found["cluster_fits_one_node"].message
    )
    assert "cluster_fits_one_node" not in _codes(
        world, catalog, **{**CLUSTER, "gpu_memory_needed_gb": 900}
    )


def test_cluster_for_software_that_does_not_run_distributed(world, catalog):
    found = _codes(world, catalog, **{**CLUSTER, "runs_distributed": False})
    assert "cluster_not_distributed" in found


def test_advice_does_not_block(world, catalog):
    found = _codes(
        world,
        catalog,
        model_params_billion=D(8),
        bytes_per_param=D(14),
        write_mb_per_s=D(200),
        checkpoint_interval_minutes=D(60),
        checkpoint_location="container_disk",
    )
    assert not found["checkpoint_interval_short"].blocking
    assert "at least 93 min" in found["checkpoint_interval_short"].message
    assert not found["checkpoints_on_container_disk"].blocking
    no_plan = _codes(world, catalog, checkpoint_interval_minutes=None)
    assert "redoes the whole run ($357.05)" in no_plan["no_checkpoints"].message


def test_auto_and_second_approval_thresholds(world):
    policy = _policy(world, auto_approve_under_usd=D(100), second_approval_over_usd=D(500))
    assert auto_approvable(policy, D("99.99"))
    assert not auto_approvable(policy, D(100))
    assert not needs_second_approval(policy, D(500))
    assert needs_second_approval(policy, D("500.01"))
    assert not needs_second_approval(_policy(world), D(10**9))


def test_lab_policy_replaces_the_institution_default(world):
    assert policy_for_lab(world.lab).pk is None  # built-in default
    default = policy_save(
        actor=world.inst_admin,
        institution=world.institution,
        lab=None,
        values={
            "allowed_models": ["pod"],
            "allowed_clouds": ["SECURE"],
            "auto_approve_under_usd": D(0),
        },
    )
    assert policy_for_lab(world.lab) == default
    own = policy_save(
        actor=world.lab_admin,
        institution=world.institution,
        lab=world.lab,
        values={
            "allowed_models": ["pod", "serverless"],
            "allowed_clouds": ["SECURE", "COMMUNITY"],
            "auto_approve_under_usd": D(50),
        },
    )
    assert policy_for_lab(world.lab) == own
    assert policy_for_lab(world.other_lab) == default
    assert ProvisioningPolicy.objects.count() == 2


def test_policy_changes_are_audited_and_unchanged_saves_are_not(world):
    values = {
        "allowed_models": ["pod"],
        "allowed_clouds": ["SECURE"],
        "auto_approve_under_usd": D(0),
    }
    policy_save(actor=world.lab_admin, institution=world.institution, lab=world.lab, values=values)
    policy_save(actor=world.lab_admin, institution=world.institution, lab=world.lab, values=values)
    policy_save(
        actor=world.lab_admin,
        institution=world.institution,
        lab=world.lab,
        values={**values, "max_gpus": 4},
    )
    events = list(
        AuditEvent.objects.filter(action__startswith="provisioning_policy.").order_by("id")
    )
    assert [e.action for e in events] == [
        "provisioning_policy.create",
        "provisioning_policy.update",
    ]
    assert events[1].before["max_gpus"] is None and events[1].after["max_gpus"] == 4


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"allowed_models": []}, "allowed_models"),
        ({"allowed_clouds": []}, "allowed_clouds"),
        ({"auto_approve_under_usd": D("-1")}, "auto_approve_under_usd"),
        ({"auto_approve_under_usd": D("0.001")}, "auto_approve_under_usd"),
        (
            {"auto_approve_under_usd": D(600), "second_approval_over_usd": D(500)},
            "auto_approve_under_usd",
        ),
        ({"max_gpus": 0}, "max_gpus"),
    ],
)
def test_policy_validation(world, values, field):
    base = {"allowed_models": ["pod"], "allowed_clouds": ["SECURE"], "auto_approve_under_usd": D(0)}
    with pytest.raises(DomainError) as info:
        policy_save(
            actor=world.lab_admin,
            institution=world.institution,
            lab=world.lab,
            values={**base, **values},
        )
    assert info.value.field == field
