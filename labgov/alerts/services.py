"""What people do with alerts: acknowledge, snooze, resolve, reopen, and stop or start the pod
an alert is about. Each change is audited in its own transaction; a pod action goes through the
Runpod client first and is recorded only once Runpod accepted it. Terminating a pod deletes its
disks and their data, so it is never one person's action from an alert: it goes through a
retention case, where one person requests the deletion and another approves it."""

import datetime as dt
from collections.abc import Callable

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from labgov.accounts import access
from labgov.alerts.models import Alert
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.runpod.errors import RunpodError
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.pricing import pod_storage_monthly_usd
from labgov.runpod.types import PodStatus

MAX_SNOOZE_DAYS = 90

# What each action is called in words, and the pod statuses it applies to.
POD_ACTIONS = {
    "stop": ("Stop", (PodStatus.RUNNING, PodStatus.STARTING)),
    "start": ("Start", (PodStatus.EXITED,)),
}
PAST = {"stop": "stopped", "start": "started", "terminate": "terminated"}
# Members may stop and start their own pods; terminating loses data and needs two people.
OWNER_ACTIONS = ("stop", "start")
TERMINATE_REFUSED = (
    "Terminating a pod deletes its disks and their data, which needs two people: open a "
    "retention case for it from this alert (stop the pod first if it runs), request its "
    "deletion there, and another person approves it."
)


def _require_manager(actor, alert: Alert) -> None:
    access.deny_unless(
        access.can_manage_alert(actor, institution_id=alert.institution_id, lab_id=alert.lab_id)
    )


def _iso(moment):
    return moment.isoformat() if moment else None


def _change(actor, alert: Alert, action: str, *, unless_state=None, note="", **fields) -> Alert:
    """Change an unresolved alert under its row lock and audit the change. Nothing happens
    when it is already in `unless_state`."""
    alert = Alert.objects.select_for_update().get(pk=alert.pk)
    if alert.state == Alert.State.RESOLVED:
        raise DomainError("This alert is already resolved.")
    if alert.state == unless_state:
        return alert
    before = {"state": alert.state, "snoozed_until": _iso(alert.snoozed_until)}
    for name, value in fields.items():
        setattr(alert, name, value)
    alert.save(update_fields=list(fields))
    audit_record(
        actor=actor,
        action=f"alert.{action}",
        target=alert,
        institution_id=alert.institution_id,
        before=before,
        after={"state": alert.state, "snoozed_until": _iso(alert.snoozed_until)},
        note=note,
    )
    return alert


@transaction.atomic
def alert_acknowledge(*, actor, alert: Alert) -> Alert:
    _require_manager(actor, alert)
    return _change(
        actor,
        alert,
        "acknowledge",
        unless_state=Alert.State.ACKNOWLEDGED,
        state=Alert.State.ACKNOWLEDGED,
        acknowledged_by=actor,
        acknowledged_at=timezone.now(),
        snoozed_until=None,
    )


@transaction.atomic
def alert_snooze(*, actor, alert: Alert, until: dt.datetime) -> Alert:
    _require_manager(actor, alert)
    now = timezone.now()
    if until <= now:
        raise DomainError("Snooze until a time in the future.", field="until")
    if until > now + dt.timedelta(days=MAX_SNOOZE_DAYS):
        raise DomainError(
            f"Snooze for at most {MAX_SNOOZE_DAYS} days; resolve the alert instead.",
            field="until",
        )
    return _change(
        actor, alert, "snooze", state=Alert.State.SNOOZED, snoozed_until=until, snoozed_by=actor
    )


@transaction.atomic
def alert_reopen(*, actor, alert: Alert) -> Alert:
    """Back to open from acknowledged or snoozed."""
    _require_manager(actor, alert)
    return _change(
        actor,
        alert,
        "reopen",
        unless_state=Alert.State.OPEN,
        state=Alert.State.OPEN,
        snoozed_until=None,
    )


@transaction.atomic
def alert_resolve(*, actor, alert: Alert, note: str = "", check: bool = True) -> Alert:
    """Resolve by hand. If the condition still holds at the next evaluation, a new alert
    opens: to quiet one for a while, snooze it."""
    if check:
        _require_manager(actor, alert)
    return _change(
        actor,
        alert,
        "resolve",
        note=note,
        state=Alert.State.RESOLVED,
        resolved_at=timezone.now(),
        resolved_by=actor,
        resolution=(note or "Resolved by hand.")[:500],
    )


# -- Acting on the pod --------------------------------------------------------------------------


def may_act_on_pod(user, alert: Alert, action: str) -> bool:
    """Whether this person may take this action on the alert's pod at all (whatever its
    status now): lab and institution admins any; the pod's owner stop and start."""
    if action not in POD_ACTIONS:
        return False
    if access.can_manage_alert(user, institution_id=alert.institution_id, lab_id=alert.lab_id):
        return True
    if alert.owner_id is None or alert.owner_id != user.pk or action not in OWNER_ACTIONS:
        return False
    # An owner whose membership has ended keeps seeing the alert but no longer runs the pod.
    if alert.lab_id is not None:
        return access.is_active_in_lab(user.pk, alert.lab_id)
    return access.is_active_in_institution_lab(user.pk, alert.institution_id)


def pod_actions_for(user, alert: Alert) -> list[tuple[str, str]]:
    """The pod actions this person may take from this alert now, as (action, label)."""
    resource = alert.resource
    if (
        alert.is_resolved
        or resource is None
        or resource.kind != ResourceKind.POD
        or resource.cluster_id  # a cluster's pod is not stopped alone
        or resource.gone_at is not None
    ):
        return []
    return [
        (action, label)
        for action, (label, statuses) in POD_ACTIONS.items()
        if resource.status in statuses and may_act_on_pod(user, alert, action)
    ]


def refuse_terminate(actor, alert: Alert) -> None:
    """Terminating from an alert is refused: to whoever may handle the alert, in words naming
    the retention case; to anyone else, as any power they lack."""
    _require_manager(actor, alert)
    raise DomainError(TERMINATE_REFUSED)


def _pod_call(resource: Resource, action: str, client_factory: Callable | None):
    """Stop or start a pod on Runpod (outside any transaction: it is a network
    call). Runpod's refusal is a DomainError in words."""
    from labgov.runpod.services import write_client_for_account

    factory = client_factory or write_client_for_account
    try:
        with factory(resource.account) as client:
            return client.pod_action(resource.runpod_id, action)
    except RunpodError as exc:
        raise DomainError(f"Could not {action} the pod on Runpod: {exc.message}") from exc


def _pod_record(*, actor, resource: Resource, action: str, pod, institution_id, alert_id, note):
    """The pod's new status and the audit event, in the caller's transaction."""
    now = timezone.now()
    locked = Resource.objects.select_for_update().get(pk=resource.pk)
    before = {"status": locked.status}
    if pod is not None:
        locked.status = pod.status
        locked.cost_per_hr_usd = pod.cost_per_hr_usd
    else:
        locked.status = PodStatus.EXITED if action == "stop" else PodStatus.STARTING
    locked.status_changed_at = now
    locked.save(update_fields=["status", "status_changed_at", "cost_per_hr_usd"])
    after = {"status": locked.status}
    if alert_id is not None:
        after["alert_id"] = alert_id
    event = audit_record(
        actor=actor,
        action=f"runpod.pod_{action}",
        target=locked,
        institution_id=institution_id,
        before=before,
        after=after,
        note=note,
    )
    return locked, event


def owns_pod(user, resource: Resource) -> bool:
    """The pod is paid by an allocation the person holds, and they are still in its lab (an
    ended member keeps seeing their pod but no longer runs it)."""
    allocation = resource.current_allocation
    return (
        resource.kind == ResourceKind.POD
        and allocation is not None
        and allocation.user_id == user.pk
        # The signed-in person's own roles, read once per request (an ended membership
        # grants nothing).
        and allocation.funding_source.lab_id
        in (access.scope_for(user).member_labs | access.scope_for(user).admin_labs)
    )


def stopped_monthly_usd(resource: Resource):
    """What the pod bills per month once stopped: its volume disk, at the stopped rate."""
    return pod_storage_monthly_usd(
        status=PodStatus.EXITED,
        container_disk_gb=resource.container_disk_gb,
        volume_disk_gb=resource.volume_disk_gb,
    )


def own_pod_actions_for(user, resource: Resource) -> list[tuple[str, str]]:
    """What a person may do to a pod of their own from their own page: stop and start, as
    from its alert (OWNER_ACTIONS); terminating stays with lab admins."""
    if resource.gone_at is not None or not owns_pod(user, resource):
        return []
    return [
        (action, POD_ACTIONS[action][0])
        for action in OWNER_ACTIONS
        if resource.status in POD_ACTIONS[action][1]
    ]


def own_pod_action(
    *, actor, resource: Resource, action: str, client_factory: Callable | None = None
) -> Resource:
    """The owner stops or starts their pod from their own page: the same call, record and
    audit as from an alert; an open alert the action ends is resolved by them."""
    access.deny_unless(action in OWNER_ACTIONS and owns_pod(actor, resource))
    if action not in dict(own_pod_actions_for(actor, resource)):
        status = (resource.status or "gone").lower() if resource.gone_at is None else "gone"
        raise DomainError(f"You cannot have the pod {PAST[action]} now (it is {status}).")
    pod = _pod_call(resource, action, client_factory)
    with transaction.atomic():
        locked, _event = _pod_record(
            actor=actor,
            resource=resource,
            action=action,
            pod=pod,
            institution_id=resource.account.institution_id,
            alert_id=None,
            note="By its owner, from their own page",
        )
        for alert in Alert.objects.filter(resource=locked, resolved_at__isnull=True):
            if _ends_condition(alert, action):
                alert_resolve(
                    actor=actor, alert=alert, note=f"Pod {PAST[action]} by its owner.", check=False
                )
    return locked


def alert_pod_action(
    *, actor, alert: Alert, action: str, client_factory: Callable | None = None
) -> Alert:
    """Stop or start the alert's pod on Runpod, then record it: the pod's new status, an audit
    event, and (when the action ends the waste) the alert resolved by the actor. Runpod's
    refusal is a DomainError in words, and nothing is recorded. Terminating is refused (see
    refuse_terminate): deleting data needs a retention case and a second person."""
    if action == "terminate":
        refuse_terminate(actor, alert)
    access.deny_unless(may_act_on_pod(actor, alert, action))
    if action not in dict(pod_actions_for(actor, alert)):
        status = alert.resource.status.lower() if alert.resource else "gone"
        raise DomainError(f"You cannot have the pod {PAST[action]} now (it is {status}).")
    pod = _pod_call(alert.resource, action, client_factory)
    with transaction.atomic():
        locked, event = _pod_record(
            actor=actor,
            resource=alert.resource,
            action=action,
            pod=pod,
            institution_id=alert.institution_id,
            alert_id=alert.pk,
            note=f"From alert #{alert.pk}: {alert.title}",
        )
        _tell_owner(actor, alert, locked, action, event_id=event.pk)
        alert = Alert.objects.get(pk=alert.pk)
        if not alert.is_resolved and _ends_condition(alert, action):
            alert = alert_resolve(
                actor=actor, alert=alert, note=f"Pod {PAST[action]} from the alert.", check=False
            )
    return alert


OWNER_TOLD = {
    "stop": (
        "pod.stopped_by_other",
        "Its compute no longer bills; its volume disk ({gb} GB) keeps billing while it is "
        "stopped, at $0.20/GB/month. Start it again to go on working.",
    ),
}


def _tell_owner(actor, alert: Alert, pod: Resource, action: str, *, event_id: int) -> None:
    """The pod's owner is told, once (per action taken), when someone else stopped their pod,
    naming who did it."""
    from labgov.notifications.services import notify

    if action not in OWNER_TOLD:
        return
    owner = pod.current_allocation.user if pod.current_allocation_id else alert.owner
    if owner is None or (actor is not None and owner.pk == actor.pk) or not owner.is_active:
        return
    kind, consequence = OWNER_TOLD[action]
    name = pod.label
    who = "labgov" if actor is None else (actor.get_full_name() or actor.username)
    notify(
        recipients=[owner],
        kind=kind,
        subject=f"{who} {PAST[action]} your pod {name}",
        body=f"{who} {PAST[action]} your pod {name} ({pod.runpod_id}) on Runpod at "
        f'{timezone.now():%Y-%m-%d %H:%M} UTC, from the alert "{alert.title}". '
        + consequence.format(gb=pod.volume_disk_gb),
        url=reverse("alerts:detail", args=[alert.pk]),
        dedupe_key=f"pod-action:{event_id}",
        thread_key=f"alert:{alert.pk}",
    )


def _ends_condition(alert: Alert, action: str) -> bool:
    from labgov.alerts.models import Kind

    if alert.kind == Kind.STOPPED_POD_DISK:
        return action == "start"
    if alert.kind == Kind.RUNNING_IDLE:
        return action == "stop"
    return False


# -- Settings ---------------------------------------------------------------------------------


@transaction.atomic
def alert_settings_save(*, actor, institution, lab, values: dict):
    """Save an institution's default alert settings (lab None) or a lab's own, audited."""
    from labgov.alerts.config import parse_thresholds
    from labgov.alerts.models import AlertSettings, Kind
    from labgov.core.snapshots import snapshot

    access.deny_unless(
        access.can_edit_alert_settings(
            actor, institution_id=institution.pk, lab_id=lab.pk if lab else None
        )
    )
    if lab is not None and lab.institution_id != institution.pk:
        raise DomainError("The lab belongs to another institution.")
    thresholds = parse_thresholds(values["budget_thresholds"])
    enabled = set(values.get("enabled_kinds") or [])
    row = AlertSettings.objects.select_for_update().filter(institution=institution, lab=lab).first()
    before = snapshot(row) if row else None
    if row is None:
        row = AlertSettings(institution=institution, lab=lab)
    row.disabled_kinds = [k for k in Kind.values if k not in enabled]
    row.idle_volume_days = values["idle_volume_days"]
    row.budget_thresholds = ", ".join(str(t) for t in thresholds)
    row.funding_ending_days = values["funding_ending_days"]
    row.balance_days = values["balance_days"]
    row.unattributed_threshold_usd = values["unattributed_threshold_usd"]
    row.sync_failing_hours = values["sync_failing_hours"]
    for name in ("idle_gpu_util_percent", "idle_memory_util_percent", "idle_grace_hours"):
        if name in values:
            setattr(row, name, values[name])
    row.updated_at = timezone.now()
    row.updated_by = actor
    row.save()
    audit_record(
        actor=actor,
        action="alert_settings.save",
        target=row,
        institution_id=institution.pk,
        before=before,
        after=snapshot(row),
    )
    return row
