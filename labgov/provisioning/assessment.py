"""A request's estimate and what the policy says about it, as values.

Everything here is computed from objects already loaded (the request, possibly unsaved; the
lab's policy; the GPU catalog row; the allocation with its figures), so the form's live
estimate, submission and approval all judge a request the same way without extra queries.
"""

import datetime as dt
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from labgov.core.money import ZERO, to_cents
from labgov.funding.models import FundingSource
from labgov.provisioning import estimates
from labgov.provisioning.models import Cloud, DeploymentModel, ProvisioningPolicy

M = DeploymentModel
# Runpod: clusters start at 2 nodes; beyond 2 nodes / 16 GPUs a raised spending limit is
# needed first, and 8 nodes / 64 GPUs is the most there is.
CLUSTER_MIN_NODES = 2
CLUSTER_PLAIN_NODES, CLUSTER_PLAIN_GPUS = 2, 16
CLUSTER_MAX_NODES, CLUSTER_MAX_GPUS = 8, 64
GPUS_PER_NODE_FALLBACK = 8
# Runs this long without a checkpoint plan get a warning.
LONG_RUN_HOURS = Decimal(4)
# Runpod's EndpointWorkers: min ≥ 0, max ≥ min (an endpoint that may never run a worker serves
# nothing, so labgov asks for max ≥ 1), idleTimeout 1 to 3,600 seconds.
IDLE_TIMEOUT_MIN, IDLE_TIMEOUT_MAX = 1, 3600


@dataclass(frozen=True)
class RunpodFacts:
    """What the findings need from Runpod's side, loaded by the caller: whether an institution
    admin confirmed the account's raised spending limit, the existing network volume the
    request names (a synced Resource, or None when labgov knows no such volume), and whether
    the decision is the approval (a missing confirmation blocks only there)."""

    account_name: str = ""
    limit_confirmed: bool = False
    volume_named: bool = False
    volume: object | None = None
    approval: bool = False


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    blocking: bool = True


def _usd(amount: Decimal) -> str:
    return f"${to_cents(amount):,.2f}"


def default_policy(institution_id: int) -> ProvisioningPolicy:
    """What applies when neither the lab nor its institution has set a policy: everything is
    allowed within the allocation, and every request needs a lab admin's approval."""
    return ProvisioningPolicy(
        institution_id=institution_id,
        allowed_models=list(M.values),
        allowed_gpu_types=[],
        allowed_clouds=list(Cloud.values),
        auto_approve_under_usd=ZERO,
    )


def gpu_price(gpu, *, cloud: str, model: str) -> Decimal | None:
    """USD per GPU-hour from the synced catalog; None when Runpod lists no price."""
    if gpu is None:
        return None
    if model == M.SERVERLESS:
        return gpu.serverless_price_per_hr_usd
    if cloud == Cloud.COMMUNITY:
        return gpu.community_price_per_hr_usd or None
    return gpu.secure_price_per_hr_usd or None


def checkpoint_plan(req) -> estimates.CheckpointPlan:
    return estimates.CheckpointPlan(
        params_billion=req.model_params_billion,
        bytes_per_param=req.bytes_per_param,
        size_gb=req.checkpoint_size_gb,
        write_mb_per_s=req.write_mb_per_s,
        interval_minutes=req.checkpoint_interval_minutes,
        restart_minutes=req.restart_minutes
        if req.restart_minutes is not None
        else estimates.DEFAULT_RESTART_MINUTES,
    )


def estimate_request(req, gpu, *, price: Decimal | None = None) -> estimates.Estimate:
    """The estimate for a request at `price` per GPU-hour, by default the catalog's current
    one (0 when unknown, which the findings then report)."""
    if price is None:
        price = gpu_price(gpu, cloud=req.cloud, model=req.deployment_model) or ZERO
    storage = estimates.Storage(
        container_disk_gb=req.container_disk_gb or 0,
        volume_disk_gb=req.volume_disk_gb or 0,
        network_volume_gb=req.network_volume_gb or 0,
        kept_days_after=req.storage_kept_days or ZERO,
    )
    if req.deployment_model == M.SERVERLESS:
        return estimates.serverless_estimate(
            gpu_price_per_hr_usd=price,
            gpus_per_worker=req.gpu_count or 0,
            requests_per_day=req.requests_per_day or ZERO,
            seconds_per_request=req.seconds_per_request or ZERO,
            days=req.duration_days or ZERO,
            idle_workers=req.idle_workers or 0,
            network_volume_gb=req.network_volume_gb or 0,
            kept_days_after=req.storage_kept_days or ZERO,
        )
    if req.deployment_model == M.CLUSTER:
        return estimates.cluster_estimate(
            gpu_price_per_hr_usd=price,
            nodes=req.node_count or 0,
            gpus_per_node=req.gpu_count or 0,
            hours=req.expected_hours or ZERO,
            storage=storage,
            checkpoint_plan=checkpoint_plan(req),
        )
    return estimates.pod_estimate(
        gpu_price_per_hr_usd=price,
        gpu_count=req.gpu_count or 0,
        hours=req.expected_hours or ZERO,
        storage=storage,
        checkpoint_plan=checkpoint_plan(req),
    )


PRECISE = Decimal("1e-10")


def apply_estimate(req, gpu, estimate: estimates.Estimate) -> None:
    """Copy the estimate's figures onto the request (not saved here), at the precision the
    database keeps, so the row and the ledger agree to the digit."""
    price = gpu_price(gpu, cloud=req.cloud, model=req.deployment_model) or ZERO
    req.gpu_price_per_hr_usd = price.quantize(PRECISE)
    req.hourly_rate_usd = estimate.hourly_rate_usd.quantize(PRECISE)
    req.estimate_compute_usd = estimate.compute_usd.quantize(PRECISE)
    req.estimate_storage_running_usd = estimate.storage_running_usd.quantize(PRECISE)
    req.estimate_storage_after_usd = estimate.storage_after_usd.quantize(PRECISE)
    req.estimate_total_usd = (
        req.estimate_compute_usd + req.estimate_storage_running_usd + req.estimate_storage_after_usd
    )
    req.estimate_stop_usd = (estimate.stop.cost_usd if estimate.stop else ZERO).quantize(PRECISE)


def needs_second_approval(policy: ProvisioningPolicy, total_usd: Decimal) -> bool:
    limit = policy.second_approval_over_usd
    return limit is not None and total_usd > limit


def auto_approvable(policy: ProvisioningPolicy, total_usd: Decimal) -> bool:
    return total_usd < policy.auto_approve_under_usd and not needs_second_approval(
        policy, total_usd
    )


def findings(
    req,
    *,
    policy: ProvisioningPolicy,
    gpu,
    estimate: estimates.Estimate,
    allocation=None,
    today: dt.date | None = None,
    runpod: "RunpodFacts | None" = None,
) -> list[Finding]:
    """Every reason the request cannot go ahead (blocking), then advice (not blocking).

    `allocation` carries `remaining_usd` (from `with_figures()`) and its funding source;
    `runpod` what labgov knows of the lab's Runpod account and the volume the request names.
    """
    out: list[Finding] = []
    out += _policy_findings(req, policy=policy, gpu=gpu, estimate=estimate)
    out += _runpod_findings(req, gpu=gpu)
    if runpod is not None:
        out += _account_findings(req, runpod)
    if allocation is not None:
        out += _allocation_findings(req, allocation=allocation, estimate=estimate, today=today)
    out += _advice(req, estimate=estimate)
    return sorted(out, key=lambda f: not f.blocking)


def _policy_findings(req, *, policy, gpu, estimate) -> list[Finding]:
    out = []
    model_label = M(req.deployment_model).label if req.deployment_model in M.values else "?"
    if req.deployment_model not in (policy.allowed_models or []):
        out.append(Finding("model_not_allowed", f"The lab's policy does not allow {model_label}s."))
    gpu_name = gpu.name if gpu else req.gpu_type_id
    if gpu is None:
        out.append(
            Finding(
                "gpu_unknown",
                f"GPU type {req.gpu_type_id or '(none)'} is not in the synced Runpod catalog.",
            )
        )
    elif policy.allowed_gpu_types and req.gpu_type_id not in policy.allowed_gpu_types:
        out.append(Finding("gpu_not_allowed", f"GPU type {gpu_name} is not allowed in this lab."))
    if req.deployment_model != M.SERVERLESS and req.cloud not in (policy.allowed_clouds or []):
        out.append(
            Finding("cloud_not_allowed", f"{Cloud(req.cloud).label} is not allowed in this lab.")
        )
    if policy.max_gpus is not None and req.total_gpus > policy.max_gpus:
        out.append(
            Finding(
                "max_gpus",
                f"{req.total_gpus} GPUs is over the lab's maximum of {policy.max_gpus} "
                "per request.",
            )
        )
    if policy.max_usd_per_hour is not None and estimate.hourly_rate_usd > policy.max_usd_per_hour:
        out.append(
            Finding(
                "max_usd_per_hour",
                f"{_usd(estimate.hourly_rate_usd)}/hour is over the lab's maximum of "
                f"{_usd(policy.max_usd_per_hour)}/hour.",
            )
        )
    if policy.max_request_usd is not None and estimate.total_usd > policy.max_request_usd:
        out.append(
            Finding(
                "max_request_usd",
                f"The estimate of {_usd(estimate.total_usd)} is over the lab's maximum of "
                f"{_usd(policy.max_request_usd)} per request.",
            )
        )
    return out


def _runpod_findings(req, *, gpu) -> list[Finding]:
    """What Runpod itself cannot or will not do."""
    out = []
    if req.interruptible:
        out.append(
            Finding(
                "spot_retired",
                "Interruptible (spot) capacity no longer exists on Runpod: every Pod is "
                "on-demand. Untick it, and save checkpoints to a network volume instead.",
            )
        )
    if req.network_volume_gb and req.cloud == Cloud.COMMUNITY:
        out.append(
            Finding(
                "network_volume_secure_only",
                "A network volume requires Secure Cloud; on Community Cloud use a volume disk "
                "and copy checkpoints off the pod.",
            )
        )
    if req.deployment_model == M.POD:
        if req.network_volume_gb and req.volume_disk_gb:
            out.append(
                Finding(
                    "volume_and_network_volume",
                    "A pod mounts either a volume disk or a network volume, not both.",
                )
            )
        if not (req.image or "").strip():
            out.append(Finding("no_image", "Name the container image the pod should run."))
        if req.network_volume_gb and not (req.data_center_id or "").strip():
            out.append(
                Finding(
                    "network_volume_needs_data_center",
                    "A network volume lives in one data center and the pod must run there: "
                    "name the data center.",
                )
            )
    if req.deployment_model in (M.POD, M.CLUSTER) and not (req.expected_hours or 0) > 0:
        out.append(Finding("no_hours", "Give the expected active hours."))
    if req.deployment_model == M.SERVERLESS:
        if not (req.duration_days or 0) > 0:
            out.append(Finding("no_days", "Give how many days the endpoint will serve."))
        if not (req.requests_per_day or 0) > 0 and not req.idle_workers:
            out.append(
                Finding("no_pattern", "Give a representative request pattern (requests per day).")
            )
    if gpu is not None and req.deployment_model != M.SERVERLESS:
        limit = gpu.max_count_community if req.cloud == Cloud.COMMUNITY else gpu.max_count_secure
        if limit and req.gpu_count > limit:
            out.append(
                Finding(
                    "gpu_count_over_catalog",
                    f"Runpod offers at most {limit} × {gpu.name} per machine in "
                    f"{Cloud(req.cloud).label}.",
                )
            )
        if gpu_price(gpu, cloud=req.cloud, model=req.deployment_model) is None:
            out.append(
                Finding(
                    "no_price",
                    f"Runpod lists no {Cloud(req.cloud).label} price for {gpu.name}.",
                )
            )
    serverless = req.deployment_model == M.SERVERLESS
    if gpu is not None and serverless and not gpu.serverless_price_per_hr_usd:
        out.append(Finding("no_price", f"Runpod lists no Serverless price for {gpu.name}."))
    if serverless:
        out += _endpoint_findings(req)
    if req.deployment_model == M.CLUSTER:
        out += _cluster_findings(req, gpu=gpu)
    return out


def endpoint_workers_problems(
    *, workers_min: int, workers_max: int, idle_timeout_seconds: int | None
) -> dict[str, str]:
    """What is wrong with an endpoint's workers, in words, by the request field it is about:
    the same check for the form (and the API through it), submission and approval."""
    out = {}
    if workers_min < 0:
        out["idle_workers"] = f"Always-on workers (workers.min) are 0 or more, not {workers_min}."
    if workers_max < 1:
        out["workers_max"] = (
            f"An endpoint needs at least 1 worker at most (workers.max), not {workers_max}: "
            "with none it serves nothing."
        )
    elif workers_max < workers_min:
        out["workers_max"] = (
            f"The most workers ({workers_max}) cannot be fewer than the always-on workers "
            f"({workers_min}): raise workers.max or lower workers.min."
        )
    idle = idle_timeout_seconds
    if idle is not None and not IDLE_TIMEOUT_MIN <= idle <= IDLE_TIMEOUT_MAX:
        out["idle_timeout_seconds"] = (
            f"The idle timeout is {IDLE_TIMEOUT_MIN} to {IDLE_TIMEOUT_MAX:,} seconds, not {idle}."
        )
    return out


def _endpoint_findings(req) -> list[Finding]:
    problems = endpoint_workers_problems(
        workers_min=req.idle_workers,
        workers_max=req.workers_max,
        idle_timeout_seconds=req.idle_timeout_seconds,
    )
    return [Finding(f"endpoint_{field}", message) for field, message in problems.items()]


def _cluster_findings(req, *, gpu) -> list[Finding]:
    out = []
    nodes, total = req.node_count, req.total_gpus
    if nodes < CLUSTER_MIN_NODES:
        out.append(
            Finding(
                "cluster_min_nodes",
                "A cluster has at least 2 nodes; for one machine request a Pod with several GPUs.",
            )
        )
    if nodes > CLUSTER_MAX_NODES or total > CLUSTER_MAX_GPUS:
        out.append(
            Finding(
                "cluster_max",
                f"Runpod clusters go up to {CLUSTER_MAX_NODES} nodes / {CLUSTER_MAX_GPUS} GPUs.",
            )
        )
    elif (nodes > CLUSTER_PLAIN_NODES or total > CLUSTER_PLAIN_GPUS) and not (
        req.spending_limit_raised
    ):
        out.append(
            Finding(
                "cluster_spending_limit",
                f"A cluster over {CLUSTER_PLAIN_NODES} nodes / {CLUSTER_PLAIN_GPUS} GPUs needs "
                "a raised Runpod spending limit first: ask Runpod, then tick that it is raised.",
            )
        )
    if (req.network_volume_gb or (req.network_volume_id or "").strip()) and not (
        req.data_center_id or ""
    ).strip():
        out.append(
            Finding(
                "cluster_volume_needs_data_center",
                "A cluster's network volume must be in the cluster's data center: name the "
                "data center.",
            )
        )
    if req.network_volume_gb and (req.network_volume_id or "").strip():
        out.append(
            Finding(
                "two_volumes",
                "Give either an existing network volume or the size of a new one, not both.",
            )
        )
    if req.runs_distributed and not (req.data_exchange or "").strip():
        out.append(
            Finding(
                "cluster_data_exchange",
                "Say how the nodes exchange data (e.g. NCCL all-reduce over the cluster "
                "network, a parameter server).",
            )
        )
    if not (req.shared_files_location or "").strip():
        out.append(
            Finding(
                "cluster_shared_files",
                "Say where the shared model files live (e.g. the cluster's network volume, "
                "copied to each node from object storage).",
            )
        )
    if not req.runs_distributed:
        out.append(
            Finding(
                "cluster_not_distributed",
                "A cluster only helps software that runs distributed across nodes; say that "
                "yours does (and how it exchanges data), or request a Pod.",
            )
        )
    if gpu is not None and gpu.memory_gb and req.gpu_memory_needed_gb:
        per_node = gpu.max_count_secure or GPUS_PER_NODE_FALLBACK
        one_node = gpu.memory_gb * per_node
        if req.gpu_memory_needed_gb <= one_node:
            out.append(
                Finding(
                    "cluster_fits_one_node",
                    f"{req.gpu_memory_needed_gb} GB of GPU memory fits on one node "
                    f"({per_node} × {gpu.memory_gb} GB = {one_node} GB): more memory alone "
                    "does not justify a cluster; request a Pod with several GPUs.",
                )
            )
    return out


def needs_raised_limit(req) -> bool:
    return req.deployment_model == M.CLUSTER and (
        req.node_count > CLUSTER_PLAIN_NODES or req.total_gpus > CLUSTER_PLAIN_GPUS
    )


def _account_findings(req, facts: RunpodFacts) -> list[Finding]:
    out = []
    if needs_raised_limit(req) and req.spending_limit_raised and not facts.limit_confirmed:
        where = f" ({facts.account_name})" if facts.account_name else ""
        out.append(
            Finding(
                "cluster_limit_not_confirmed",
                f"No institution admin has confirmed that Runpod raised the spending limit of "
                f"the lab's Runpod account{where} for clusters over {CLUSTER_PLAIN_NODES} pods"
                f" / {CLUSTER_PLAIN_GPUS} GPUs: the request cannot be approved until one does "
                "(on the account's page).",
                blocking=facts.approval,
            )
        )
    if req.deployment_model != M.POD and facts.volume_named:
        volume = facts.volume
        dc = (req.data_center_id or "").strip()
        if volume is None:
            out.append(
                Finding(
                    "volume_unknown",
                    f"labgov knows no network volume {req.network_volume_id} on the lab's "
                    "Runpod account (synced): give the id of one of its volumes, or leave it "
                    "blank and ask for a new one.",
                )
            )
        elif volume.current_allocation_id and volume.current_allocation_id != req.allocation_id:
            out.append(
                Finding(
                    "volume_paid_by_other",
                    f"Network volume {req.network_volume_id} is paid by another allocation: "
                    "mount one your allocation pays for, or ask for a new one.",
                )
            )
        elif dc and volume.data_center_id and volume.data_center_id != dc:
            out.append(
                Finding(
                    "volume_other_data_center",
                    f"Network volume {req.network_volume_id} is in {volume.data_center_id}, "
                    f"not in {dc}: a {M(req.deployment_model).label.lower()} mounts only a "
                    "volume in its own data center.",
                )
            )
    return out


def _allocation_findings(req, *, allocation, estimate, today) -> list[Finding]:
    out = []
    if allocation.user_id != req.requester_id:
        out.append(
            Finding("allocation_not_own", "You can only request against your own allocations.")
        )
    if today is not None and not (allocation.start_date <= today <= allocation.end_date):
        out.append(
            Finding(
                "allocation_inactive",
                f"The allocation runs {allocation.start_date:%Y-%m-%d} to "
                f"{allocation.end_date:%Y-%m-%d}; it does not cover today.",
            )
        )
    status = allocation.funding_source.status
    if status != FundingSource.Status.ACTIVE:
        out.append(
            Finding(
                "funding_not_active",
                f"The funding source is {FundingSource.Status(status).label.lower()}: it takes "
                "no new commitments.",
            )
        )
    out += _storage_after_funding(req, allocation=allocation, estimate=estimate, today=today)
    remaining = getattr(allocation, "remaining_usd", None)
    if remaining is not None and estimate.total_usd > remaining:
        out.append(
            Finding(
                "over_allocation",
                f"The estimate of {_usd(estimate.total_usd)} is more than the allocation has "
                f"left ({_usd(remaining)}).",
            )
        )
    return out


def _storage_after_funding(req, *, allocation, estimate, today) -> list[Finding]:
    """Storage kept after the work that outlives the funding source (90 days kept on a grant
    ending in 25): the part past its end, in dollars, and who pays for it then. The work is
    taken to start today and run its hours back to back, so the figure is the least of it."""
    kept = Decimal(req.storage_kept_days or 0)
    if today is None or kept <= 0 or estimate.storage_after_usd <= 0:
        return []
    if req.deployment_model == M.SERVERLESS:
        work_days = Decimal(req.duration_days or 0)
    else:
        work_days = Decimal(req.expected_hours or 0) / 24
    source = allocation.funding_source
    left = Decimal((source.end_date - today).days)
    after = work_days + kept - max(work_days, left)
    if after <= 0:
        return []
    after = min(after, kept)
    dollars = estimate.storage_after_usd * after / kept
    days = after.to_integral_value(rounding=ROUND_CEILING)
    lab = req.lab  # loaded already: the policy is the lab's
    return [
        Finding(
            "storage_outlives_funding",
            f"The storage is kept {kept.normalize():f} days after the work, but {source.name} "
            f"ends {source.end_date:%Y-%m-%d}: about {days:f} of those days, {_usd(dollars)}, "
            f"fall after it ends, and it pays nothing then. From then on {lab.name} pays from "
            "other funding: its retention case, opened before the grant ends, moves the data "
            "to other funding or holds it naming who pays; otherwise the data is deleted.",
            blocking=False,
        )
    ]


def _advice(req, *, estimate) -> list[Finding]:
    out = []
    cp = estimate.checkpoint
    if (
        cp is not None
        and cp.save_seconds
        and cp.interval_minutes
        and cp.recommended_interval_minutes
        and cp.interval_minutes < cp.recommended_interval_minutes
    ):
        out.append(
            Finding(
                "checkpoint_interval_short",
                f"Saving {cp.size_gb:,.1f} GB takes {cp.save_seconds:,.0f} s, so every "
                f"{cp.interval_minutes:,.0f} min spends {cp.overhead_fraction:.0%} of the "
                f"run saving; keep the interval at least {cp.recommended_interval_minutes:,.0f}"
                " min (10 × save time).",
                blocking=False,
            )
        )
    if req.checkpoint_location == "container_disk":
        out.append(
            Finding(
                "checkpoints_on_container_disk",
                "The container disk is erased on every stop: keep checkpoints on a network "
                "volume (or a volume disk) instead.",
                blocking=False,
            )
        )
    long_run = (req.expected_hours or 0) >= LONG_RUN_HOURS
    if (
        req.deployment_model != M.SERVERLESS
        and long_run
        and (cp is None or not cp.interval_minutes)
        and estimate.stop is not None
    ):
        out.append(
            Finding(
                "no_checkpoints",
                f"Without checkpoints one stop near the end redoes the whole run "
                f"({_usd(estimate.stop.cost_usd)}).",
                blocking=False,
            )
        )
    return out
