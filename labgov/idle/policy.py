"""The automatic stop of idle pods, for labs whose policy is on (off by default), and the
scale-down of serverless endpoints whose always-on workers serve nothing, for labs whose policy
also says so: their `workers.min` becomes 0 after the same warning, audited; an endpoint is
never deleted, and a cluster's pods are never stopped (nor a cluster deleted).

After every utilization poll: a pod of such a lab that has been running idle (by the lab's
running-idle thresholds) for `idle_hours` less `warn_minutes` gets a notice and its owner a
warning with a one-click "keep running"; once the notice's time has come and the pod is still
idle, it is stopped on Runpod, never terminated, and the stop is audited with the samples that
justified it. A pod whose only storage is its container disk is never stopped without its
owner's confirmation (the notice is marked refused and the people told instead); a pod that
is exempt (settings.LABGOV_AUTOSTOP_EXEMPTIONS) is neither warned nor stopped. A notice clears
when the pod works again, stops, becomes exempt or the policy is turned off.
"""

import datetime as dt
import logging
from collections.abc import Callable
from decimal import Decimal

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from labgov.accounts.models import Membership, Role, User
from labgov.alerts.config import Resolver
from labgov.alerts.findings import Context, _lab_and_owner, _resources, usd
from labgov.alerts.idle_rule import _known_idle, idle_states, running_gpu_pods, spent_idle_usd
from labgov.alerts.serverless_rule import idle_endpoints
from labgov.audit.services import audit_record
from labgov.core import dataversion
from labgov.idle.exemptions import exempt
from labgov.idle.models import AutoStopMark, AutoStopPolicy, StopNotice
from labgov.notifications.services import notify
from labgov.runpod.errors import RunpodError
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import PodStatus
from labgov.utilization.selectors import recent_samples, usage_summaries

log = logging.getLogger(__name__)


def container_disk_only(pod: Resource) -> bool:
    return pod.volume_disk_gb == 0 and not pod.network_volume_id


@dataversion.scoped(lambda *, institution_id, **_: [institution_id])
def autostop_run(
    *, institution_id: int, now: dt.datetime | None = None, client_factory: Callable | None = None
) -> dict:
    now = now or timezone.now()
    policies = {
        p.lab_id: p
        for p in AutoStopPolicy.objects.filter(enabled=True, lab__institution_id=institution_id)
    }
    notices = {
        n.resource_id: n
        for n in StopNotice.objects.filter(
            lab__institution_id=institution_id, state__in=StopNotice.OPEN_STATES
        ).select_related("lab", "resource")
    }
    counts = {"warned": 0, "stopped": 0, "refused": 0, "cleared": 0}
    if not policies and not notices:
        return counts
    ctx = Context(institution_id=institution_id, now=now, settings=Resolver(institution_id))
    pods = [p for p in running_gpu_pods(ctx) if _lab_and_owner(p)[0] in policies]
    # Idle starts already known (standing alerts, open notices): only newly idle pods read
    # their history back.
    known = {**_known_idle(ctx), **{rid: n.idle_since for rid, n in notices.items()}}
    states = idle_states(ctx, pods, known=known)
    endpoints = _idle_endpoints(ctx, policies)
    exempted = exempt(pods + [e.endpoint for e in endpoints.values()], now)
    for rid, notice in notices.items():
        why = (
            "The lab turned its auto-stop policy off."
            if notice.lab_id not in policies
            else f"Exempt: {exempted[rid]}."
            if rid in exempted
            else None
            if rid in states or rid in endpoints
            else "The endpoint served again or keeps no always-on worker."
            if notice.resource.kind == ResourceKind.SERVERLESS
            else "The pod worked again or stopped."
        )
        if why:
            _close(notice, StopNotice.State.CLEARED, why, now)
            counts["cleared"] += 1
    for pod in pods:
        state = states.get(pod.pk)
        if state is None or pod.pk in exempted:
            continue
        lab_id, owner_id = _lab_and_owner(pod)
        policy = policies[lab_id]
        notice = notices.get(pod.pk)
        if notice is None or not notice.is_open:
            due = state.idle_since + dt.timedelta(hours=policy.idle_hours)
            if now >= due - dt.timedelta(minutes=policy.warn_minutes):
                _warn(pod, lab_id, owner_id, policy, state, due, now)
                counts["warned"] += 1
            continue
        if now < notice.stop_at:
            continue
        if container_disk_only(pod) and not _owner_allowed(pod):
            if notice.state != StopNotice.State.REFUSED:  # told once; it waits for the owner
                _refuse(pod, notice, now)
                counts["refused"] += 1
            continue
        if _stop(pod, notice, state, policy, now, client_factory):
            counts["stopped"] += 1
    for rid, idle in endpoints.items():
        if rid in exempted:
            continue
        lab_id, owner_id = _lab_and_owner(idle.endpoint)
        policy = policies[lab_id]
        notice = notices.get(rid)
        if notice is None or not notice.is_open:
            due = idle.idle_since + dt.timedelta(hours=policy.idle_hours)
            if now >= due - dt.timedelta(minutes=policy.warn_minutes):
                _warn_endpoint(idle, lab_id, owner_id, policy, due, now)
                counts["warned"] += 1
            continue
        if now >= notice.stop_at and _scale_down(idle, notice, policy, now, client_factory):
            counts["stopped"] += 1
    return counts


def _idle_endpoints(ctx: Context, policies) -> dict:
    """Resource id → IdleEndpoint, for the endpoints of labs whose policy scales them."""
    scaling = {lab_id for lab_id, p in policies.items() if p.scale_idle_endpoints}
    if not scaling:
        return {}
    endpoints = [
        e
        for e in _resources(ctx).filter(kind=ResourceKind.SERVERLESS).defer(None).defer("env")
        if _lab_and_owner(e)[0] in scaling
    ]

    def grace(endpoint):
        config = ctx.settings.for_lab(_lab_and_owner(endpoint)[0])
        return dt.timedelta(hours=config.idle_grace_hours)

    return {idle.endpoint.pk: idle for idle in idle_endpoints(ctx, endpoints, grace_for=grace)}


def _warn_endpoint(idle, lab_id, owner_id, policy, due, now) -> StopNotice:
    stop_at = max(due, now + dt.timedelta(minutes=policy.warn_minutes))
    endpoint = idle.endpoint
    notice = StopNotice.objects.create(
        resource=endpoint,
        lab_id=lab_id,
        owner_id=owner_id,
        idle_since=idle.idle_since,
        warned_at=now,
        stop_at=stop_at,
    )
    notify(
        recipients=_people(owner_id, lab_id, admins=True),
        kind="idle.stop_warning",
        subject=f"Endpoint {endpoint.label} will be scaled to 0 always-on workers at "
        f"{stop_at:%H:%M} UTC",
        body=f"Its {idle.workers_min} always-on worker(s) have served nothing since "
        f"{idle.idle_since:%Y-%m-%d %H:%M} UTC ({usd(idle.billed_usd)} so far, "
        f"{usd(idle.per_day_usd)}/day). Your lab scales such endpoints down after "
        f"{policy.idle_hours} hours: at {stop_at:%Y-%m-%d %H:%M} UTC its workers.min becomes "
        "0 (requests then wait for a cold start; the endpoint is not deleted) unless you keep "
        f"it as it is for {policy.keep_hours} hours with one click.",
        url=reverse("idle:notice", args=[notice.pk]),
        dedupe_key=f"idle-notice:{notice.pk}:warn",
    )
    return notice


def _scale_down(idle, notice, policy, now, client_factory) -> bool:
    from labgov.runpod.services import write_client_for_account

    endpoint = idle.endpoint
    factory = client_factory or write_client_for_account
    try:
        with factory(endpoint.account) as client:
            answer = client.update_endpoint_workers(endpoint.runpod_id, workers_min=0)
    except RunpodError as exc:
        log.warning("scaling endpoint %s down failed (next pass retries): %s", endpoint.pk, exc)
        return False
    with transaction.atomic():
        locked = Resource.objects.select_for_update().get(pk=endpoint.pk)
        details = dict(locked.details or {})
        before = {"workers_min": details.get("workers_min")}
        details.update(workers_min=answer.workers_min, workers_max=answer.workers_max)
        locked.details = details
        locked.save(update_fields=["details"])
        hours = (now - idle.idle_since).total_seconds() / 3600
        outcome = f"Scaled to {answer.workers_min} always-on workers after {hours:.1f} idle hours."
        _close(notice, StopNotice.State.STOPPED, outcome, now)
        audit_record(
            actor=None,
            action="runpod.endpoint_autoscale",
            target=locked,
            institution_id=notice.lab.institution_id,
            before=before,
            after={
                "workers_min": answer.workers_min,
                "notice_id": notice.pk,
                "idle_since": idle.idle_since.isoformat(),
                "billed_idle_usd": str(idle.billed_usd.quantize(Decimal("0.01"))),
                "per_day_usd": str(idle.per_day_usd.quantize(Decimal("0.01"))),
                "policy": {"idle_hours": policy.idle_hours, "warn_minutes": policy.warn_minutes},
            },
            note=f"Automatic scale-down by the lab's idle policy: {outcome} The endpoint "
            "was not deleted.",
        )
        notify(
            recipients=_people(notice.owner_id, notice.lab_id, admins=True),
            kind="idle.stopped",
            subject=f"Endpoint {endpoint.label} was scaled to 0 always-on workers by your "
            "lab's policy",
            body=f"{outcome} It is not deleted: requests start workers again (cold starts); "
            "raise its minimum again from labgov if it must answer at once.",
            url=reverse("idle:notice", args=[notice.pk]),
            dedupe_key=f"idle-notice:{notice.pk}:stopped",
        )
    return True


def _close(notice: StopNotice, state: str, outcome: str, now: dt.datetime) -> None:
    notice.state = state
    notice.outcome = outcome[:300]
    notice.closed_at = now
    notice.save(update_fields=["state", "outcome", "closed_at"])


def _lab_admins(lab_id: int) -> list[User]:
    ids = (
        Membership.objects.active()
        .filter(lab_id=lab_id, role=Role.LAB_ADMIN)
        .values_list("user_id", flat=True)
    )
    return list(User.objects.filter(pk__in=ids, is_active=True))


def _people(owner_id: int | None, lab_id: int, *, admins: bool) -> list[User]:
    people = list(User.objects.filter(pk=owner_id, is_active=True)) if owner_id else []
    if admins or not people:
        people += [u for u in _lab_admins(lab_id) if u.pk != owner_id]
    return people


def _warn(pod, lab_id, owner_id, policy, state, due, now) -> StopNotice:
    stop_at = max(due, now + dt.timedelta(minutes=policy.warn_minutes))
    notice = StopNotice.objects.create(
        resource=pod,
        lab_id=lab_id,
        owner_id=owner_id,
        idle_since=state.idle_since,
        warned_at=now,
        stop_at=stop_at,
    )
    name = pod.label
    spent = spent_idle_usd(pod.cost_per_hr_usd, state, now)
    notify(
        recipients=_people(owner_id, lab_id, admins=False),
        kind="idle.stop_warning",
        subject=f"Your idle pod {name} will be stopped at {stop_at:%H:%M} UTC",
        body=f"Its GPUs have done nothing since {state.idle_since:%Y-%m-%d %H:%M} UTC "
        f"({usd(spent)} spent idle at {usd(pod.cost_per_hr_usd)}/hour). Your lab stops pods "
        f"idle for {policy.idle_hours} hours; it will be stopped (not terminated) at "
        f"{stop_at:%Y-%m-%d %H:%M} UTC unless you keep it running for {policy.keep_hours} "
        "hours with one click.",
        url=reverse("idle:notice", args=[notice.pk]),
        dedupe_key=f"idle-notice:{notice.pk}:warn",
        thread_key=f"idle-notice:{notice.pk}",
    )
    return notice


def _owner_allowed(pod: Resource) -> bool:
    return AutoStopMark.objects.filter(
        resource=pod, kind=AutoStopMark.Kind.OWNER_ALLOWS_STOP, ended_at__isnull=True
    ).exists()


@transaction.atomic
def _refuse(pod: Resource, notice: StopNotice, now: dt.datetime) -> None:
    outcome = (
        "Not stopped: its only storage is its container disk, whose data a stop erases, and "
        "its owner has not confirmed that the policy may stop it."
    )
    # Still open: it waits for the owner's confirmation, for work, or for a stop by hand.
    notice.state = StopNotice.State.REFUSED
    notice.outcome = outcome[:300]
    notice.save(update_fields=["state", "outcome"])
    audit_record(
        actor=None,
        action="autostop.refused",
        target=pod,
        institution_id=notice.lab.institution_id,
        before=None,
        after={"notice_id": notice.pk, "reason": "container disk only"},
        note=outcome,
    )
    name = pod.label
    notify(
        recipients=_people(notice.owner_id, notice.lab_id, admins=True),
        kind="idle.stop_refused",
        subject=f"Idle pod {name} was not stopped: its data is only on its container disk",
        body=outcome + " Stop it yourself once its data is saved, or confirm on the pod's "
        "notice that the policy may stop it.",
        url=reverse("idle:notice", args=[notice.pk]),
        dedupe_key=f"idle-notice:{notice.pk}:refused",
        thread_key=f"idle-notice:{notice.pk}",
    )


def _stop(pod, notice, state, policy, now, client_factory) -> bool:
    from labgov.runpod.services import write_client_for_account

    factory = client_factory or write_client_for_account
    try:
        with factory(pod.account) as client:
            answer = client.pod_action(pod.runpod_id, "stop")
    except RunpodError as exc:
        log.warning("auto-stop of pod %s failed (next pass retries): %s", pod.runpod_id, exc)
        return False
    with transaction.atomic():
        locked = Resource.objects.select_for_update().get(pk=pod.pk)
        before = {"status": locked.status}
        locked.status = answer.status if answer is not None else PodStatus.EXITED
        locked.cost_per_hr_usd = answer.cost_per_hr_usd if answer is not None else 0
        locked.status_changed_at = now
        locked.save(update_fields=["status", "cost_per_hr_usd", "status_changed_at"])
        spent = spent_idle_usd(pod.cost_per_hr_usd, state, now)
        summary = usage_summaries([pod.pk], start=state.idle_since.replace(minute=0, second=0))
        idle_hours = summary.get(pod.pk)
        outcome = f"Stopped after {(now - state.idle_since).total_seconds() / 3600:.1f} idle hours."
        _close(notice, StopNotice.State.STOPPED, outcome, now)
        audit_record(
            actor=None,
            action="runpod.pod_autostop",
            target=locked,
            institution_id=notice.lab.institution_id,
            before=before,
            after={
                "status": locked.status,
                "notice_id": notice.pk,
                "idle_since": state.idle_since.isoformat(),
                "spent_idle_usd": str(spent.quantize(Decimal("0.01"))),
                "policy": {
                    "idle_hours": policy.idle_hours,
                    "warn_minutes": policy.warn_minutes,
                    "kept_until": notice.kept_until.isoformat() if notice.kept_until else None,
                },
                "samples": recent_samples(pod.pk, since=state.idle_since),
                "idle_hours_summary": {
                    "hours": idle_hours.hours,
                    "samples": idle_hours.samples,
                    "gpu_util_mean": round(idle_hours.util_mean, 1),
                    "gpu_util_max": idle_hours.util_max,
                    "memory_util_max": idle_hours.memory_util_max,
                }
                if idle_hours
                else None,
            },
            note=f"Automatic stop by the lab's idle policy: {outcome}",
        )
        name = pod.label
        notify(
            recipients=_people(notice.owner_id, notice.lab_id, admins=True),
            kind="idle.stopped",
            subject=f"Idle pod {name} was stopped by your lab's policy",
            body=f"{outcome} {usd(spent)} was spent while it was idle. It was stopped, not "
            "terminated: its volume disk or network volume keeps its data; start it again "
            "to go on working.",
            url=reverse("idle:notice", args=[notice.pk]),
            dedupe_key=f"idle-notice:{notice.pk}:stopped",
            thread_key=f"idle-notice:{notice.pk}",
        )
    return True
