"""Running idle: a running GPU pod whose GPUs have been below the lab's thresholds (mean GPU
utilization and mean GPU memory utilization) for longer than its grace period. It bills its
full hourly rate all the while: the alert says how much went on idle so far and how much each
hour from now costs. It clears itself when the pod works again or stops.

A cluster is judged as one: it runs idle when every running GPU pod of it does, since the last
of them went idle, and its alert carries the cluster's whole hourly rate (its pods together);
its pods get no alert of their own, and nothing stops them one by one.

Reads only the raw samples of the grace period for every running GPU pod, and the raw window
once for a pod newly found idle (a standing alert keeps its idle start in its facts).
"""

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from labgov.alerts.findings import (
    Context,
    Finding,
    _lab_and_owner,
    _resource_finding,
    _resources,
    usd,
)
from labgov.alerts.models import Alert, Kind
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import PodStatus
from labgov.utilization.selectors import IdleState, Thresholds, idle_pods

SECONDS_PER_HOUR = Decimal(3600)


def thresholds_for(config) -> Thresholds:
    return Thresholds(
        gpu_util=config.idle_gpu_util_percent,
        memory_util=config.idle_memory_util_percent,
        grace=dt.timedelta(hours=config.idle_grace_hours),
    )


def run_started(resource: Resource) -> dt.datetime | None:
    text = (resource.details or {}).get("started_at")
    return dt.datetime.fromisoformat(text) if text else None


def spent_idle_usd(rate: Decimal, state: IdleState, now: dt.datetime) -> Decimal:
    seconds = Decimal(int(state.idle_for(now).total_seconds()))
    return rate * seconds / SECONDS_PER_HOUR


def running_gpu_pods(ctx: Context, *, clusters: bool = False):
    """The running GPU pods on their own, or (`clusters`) those that belong to a cluster: a
    cluster's pods are judged, alerted on and never stopped one by one, but as the cluster."""
    # `details` holds when the pod's current run started, read for every one of them.
    pods = _resources(ctx).filter(kind=ResourceKind.POD, status=PodStatus.RUNNING, gpu_count__gt=0)
    pods = pods.exclude(cluster_id="") if clusters else pods.filter(cluster_id="")
    return pods.defer(None).defer("env")


def idle_states(ctx: Context, pods, *, known=None, lab_of=None) -> dict[int, IdleState]:
    """Resource id → its idle state, for the pods of `pods` that are running idle (judged by
    the thresholds of their lab, or of the lab `lab_of(pod)` names)."""
    wanted = {}
    for pod in pods:
        lab_id = lab_of(pod) if lab_of else _lab_and_owner(pod)[0]
        config = ctx.settings.for_lab(lab_id)
        wanted[pod.pk] = (thresholds_for(config), run_started(pod))
    return idle_pods(pods=wanted, now=ctx.now, known=known)


def _known_idle(ctx: Context) -> dict[int, dt.datetime]:
    rows = (
        Alert.objects.unresolved()
        .filter(institution_id=ctx.institution_id, kind=Kind.RUNNING_IDLE)
        .exclude(resource=None)
        .values_list("resource_id", "facts")
    )
    return {
        rid: dt.datetime.fromisoformat(facts["idle_since"])
        for rid, facts in rows
        if facts.get("idle_since") and not facts.get("idle_since_bound")
    }


def running_idle_findings(ctx: Context) -> list[Finding]:
    return [*_pod_findings(ctx), *cluster_idle_findings(ctx)]


def _pod_findings(ctx: Context) -> list[Finding]:
    pods = [
        pod
        for pod in running_gpu_pods(ctx)
        if ctx.settings.for_lab(_lab_and_owner(pod)[0]).enabled(Kind.RUNNING_IDLE)
    ]
    states = idle_states(ctx, pods, known=_known_idle(ctx))
    findings = []
    for pod in pods:
        state = states.get(pod.pk)
        if state is None:
            continue
        config = ctx.settings.for_lab(_lab_and_owner(pod)[0])
        findings.append(idle_finding(ctx, pod, state, config))
    return findings


def idle_words(state: IdleState, now: dt.datetime) -> str:
    hours = state.idle_for(now).total_seconds() / 3600
    span = f"{hours:.1f} hours" if hours < 48 else f"{hours / 24:.1f} days"
    return f"at least {span}" if state.since_bound else span


def idle_finding(ctx: Context, pod: Resource, state: IdleState, config) -> Finding:
    rate = pod.cost_per_hr_usd
    spent = spent_idle_usd(rate, state, ctx.now)
    name = pod.label
    gpus = f"{pod.gpu_count}× {pod.gpu_type_id}" if pod.gpu_type_id else f"{pod.gpu_count} GPUs"
    recent = state.recent[-1] if state.recent else None
    reading = (
        f" Latest reading: {recent[1]:.0f}% GPU, {recent[2]:.0f}% GPU memory." if recent else ""
    )
    return _resource_finding(
        Kind.RUNNING_IDLE,
        pod,
        f"Pod {name}",
        title=f"Pod {name} ({gpus}) has been running idle for {idle_words(state, ctx.now)}: "
        f"{usd(spent)} spent idle, {usd(rate)}/hour from now",
        detail=f"Its GPUs have been below {config.idle_gpu_util_percent}% mean utilization and "
        f"{config.idle_memory_util_percent}% mean memory utilization since "
        f"{state.idle_since:%Y-%m-%d %H:%M} UTC"
        + (" (the oldest sample labgov keeps)" if state.since_bound else "")
        + f", while the pod bills its full rate of {usd(rate)}/hour.{reading} Stop it if the "
        "work is done (a volume disk or network volume keeps its data); this alert clears "
        "itself when the GPUs work again or the pod stops.",
        monthly_cost_usd=rate * settings.LABGOV_HOURS_PER_MONTH,
        facts={
            "runpod_id": pod.runpod_id,
            "idle_since": state.idle_since.isoformat(),
            "idle_since_bound": state.since_bound,
            "spent_idle_usd": str(spent.quantize(Decimal("0.01"))),
            "per_hour_usd": str(rate),
            "gpu_count": pod.gpu_count,
            "thresholds": [
                config.idle_gpu_util_percent,
                config.idle_memory_util_percent,
                config.idle_grace_hours,
            ],
        },
    )


# -- Clusters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdleCluster:
    cluster: Resource
    state: IdleState  # since the last of its pods went idle
    pods: int
    gpus: int
    rate_usd: Decimal  # the whole cluster's $/hour


def idle_clusters(ctx: Context, *, enabled_only: bool = True) -> list[IdleCluster]:
    """Clusters whose every running GPU pod is running idle (by the cluster's lab's
    thresholds), idle since the last of them went idle. The rate is the cluster's whole: its
    pods' rates together (or the cluster's own, when Runpod gives one and its pods none)."""
    clusters = {
        (c.account_id, c.runpod_id): c for c in _resources(ctx).filter(kind=ResourceKind.CLUSTER)
    }
    if enabled_only:
        clusters = {
            key: c
            for key, c in clusters.items()
            if ctx.settings.for_lab(_lab_and_owner(c)[0]).enabled(Kind.RUNNING_IDLE)
        }
    if not clusters:
        return []
    members = defaultdict(list)
    for pod in running_gpu_pods(ctx, clusters=True):
        cluster = clusters.get((pod.account_id, pod.cluster_id))
        if cluster is not None:
            members[cluster.pk].append(pod)
    by_pk = {c.pk: c for c in clusters.values()}
    lab_of_pod = {
        pod.pk: _lab_and_owner(by_pk[cid])[0] for cid, pods in members.items() for pod in pods
    }
    states = idle_states(
        ctx, [p for pods in members.values() for p in pods], lab_of=lambda p: lab_of_pod[p.pk]
    )
    found = []
    for cid, pods in members.items():
        if not all(p.pk in states for p in pods):
            continue
        latest = max((states[p.pk] for p in pods), key=lambda s: s.idle_since)
        cluster = by_pk[cid]
        rate = sum((p.cost_per_hr_usd for p in pods), Decimal(0)) or cluster.cost_per_hr_usd
        recent = sorted(r for p in pods for r in states[p.pk].recent)
        state = IdleState(
            resource_id=cid,
            idle_since=latest.idle_since,
            since_bound=latest.since_bound,
            last_sample_at=max(states[p.pk].last_sample_at for p in pods),
            recent=recent,
        )
        gpus = sum(p.gpu_count for p in pods)
        found.append(IdleCluster(cluster, state, len(pods), gpus, rate))
    return found


def cluster_idle_findings(ctx: Context) -> list[Finding]:
    return [
        cluster_finding(ctx, idle, ctx.settings.for_lab(_lab_and_owner(idle.cluster)[0]))
        for idle in idle_clusters(ctx)
    ]


def cluster_finding(ctx: Context, idle: IdleCluster, config) -> Finding:
    cluster, state, rate = idle.cluster, idle.state, idle.rate_usd
    spent = spent_idle_usd(rate, state, ctx.now)
    name = cluster.label
    gpu = f" × {cluster.gpu_type_id}" if cluster.gpu_type_id else ""
    return _resource_finding(
        Kind.RUNNING_IDLE,
        cluster,
        f"Cluster {name}",
        title=f"Cluster {name} ({idle.pods} pods, {idle.gpus} GPUs{gpu}) has been running "
        f"idle for {idle_words(state, ctx.now)}: {usd(spent)} spent idle, {usd(rate)}/hour "
        "from now",
        detail=f"The GPUs of all {idle.pods} of its pods have been below "
        f"{config.idle_gpu_util_percent}% mean utilization and "
        f"{config.idle_memory_util_percent}% mean memory utilization since "
        f"{state.idle_since:%Y-%m-%d %H:%M} UTC"
        + (" (the oldest sample labgov keeps)" if state.since_bound else "")
        + f", while the cluster bills its whole rate of {usd(rate)}/hour. If the run is over, "
        "delete the cluster on Runpod once its results are saved (labgov never stops or "
        "deletes a cluster itself); this alert clears itself when any of its GPUs work again "
        "or its pods stop.",
        monthly_cost_usd=rate * settings.LABGOV_HOURS_PER_MONTH,
        facts={
            "runpod_id": cluster.runpod_id,
            "cluster": True,
            "pods": idle.pods,
            "idle_since": state.idle_since.isoformat(),
            "idle_since_bound": state.since_bound,
            "spent_idle_usd": str(spent.quantize(Decimal("0.01"))),
            "per_hour_usd": str(rate),
            "gpu_count": idle.gpus,
            "thresholds": [
                config.idle_gpu_util_percent,
                config.idle_memory_util_percent,
                config.idle_grace_hours,
            ],
        },
    )
