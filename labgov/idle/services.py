"""Changing a lab's auto-stop policy, marking pods, and keeping a warned pod running. Each write
is audited in its own transaction."""

import datetime as dt

from django.db import transaction
from django.utils import timezone

from labgov.accounts import access
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.snapshots import snapshot
from labgov.idle.models import AutoStopMark, AutoStopPolicy, StopNotice

MAX_KEEP_HOURS = 72
MAX_NEVER_STOP_DAYS = 366


def policy_for(lab) -> AutoStopPolicy:
    return AutoStopPolicy.objects.filter(lab=lab).first() or AutoStopPolicy(lab=lab)


@transaction.atomic
def autostop_policy_save(*, actor, lab, values: dict) -> AutoStopPolicy:
    access.deny_unless(access.can_manage_lab(actor, lab.pk))
    if not 1 <= values["idle_hours"] <= 168:
        raise DomainError("Stop after 1 to 168 idle hours.", field="idle_hours")
    if not 5 <= values["warn_minutes"] <= 24 * 60:
        raise DomainError("Warn 5 minutes to 24 hours ahead.", field="warn_minutes")
    if not 1 <= values["keep_hours"] <= MAX_KEEP_HOURS:
        raise DomainError(f"Keep running 1 to {MAX_KEEP_HOURS} hours.", field="keep_hours")
    row = AutoStopPolicy.objects.select_for_update().filter(lab=lab).first()
    before = snapshot(row) if row else None
    row = row or AutoStopPolicy(lab=lab)
    for name in ("enabled", "idle_hours", "warn_minutes", "keep_hours"):
        setattr(row, name, values[name])
    row.scale_idle_endpoints = bool(values.get("scale_idle_endpoints", False))
    row.updated_at = timezone.now()
    row.updated_by = actor
    row.save()
    audit_record(
        actor=actor,
        action="autostop_policy.save",
        target=row,
        institution_id=lab.institution_id,
        before=before,
        after=snapshot(row),
    )
    return row


def _lab_of(resource):
    allocation = resource.current_allocation
    return allocation.funding_source.lab if allocation is not None else resource.account.lab


def _owner_id(resource):
    return resource.current_allocation.user_id if resource.current_allocation_id else None


@transaction.atomic
def never_stop_mark(*, actor, resource, reason: str, until: dt.datetime) -> AutoStopMark:
    """A lab admin exempts a pod from automatic stops, with a reason and an end."""
    lab = _lab_of(resource)
    access.deny_unless(lab is not None and access.can_manage_lab(actor, lab.pk))
    now = timezone.now()
    if not reason.strip():
        raise DomainError("Say why this pod must never be stopped automatically.", field="reason")
    if until <= now or until > now + dt.timedelta(days=MAX_NEVER_STOP_DAYS):
        raise DomainError("End the exemption within a year from now.", field="until")
    _end_marks(actor, resource, AutoStopMark.Kind.NEVER_STOP, now)
    mark = AutoStopMark.objects.create(
        resource=resource,
        kind=AutoStopMark.Kind.NEVER_STOP,
        reason=reason.strip()[:300],
        until=until,
        created_by=actor,
        created_at=now,
    )
    audit_record(
        actor=actor, action="autostop.never_stop", target=mark, institution_id=lab.institution_id
    )
    return mark


@transaction.atomic
def owner_allows_stop(*, actor, resource, allowed: bool) -> AutoStopMark | None:
    """The pod's owner confirms (or withdraws) that the policy may stop it although its only
    storage is its container disk, whose data a stop erases."""
    access.require_person(actor, "Allowing a stop of one's own pod")
    lab = _lab_of(resource)
    access.deny_unless(lab is not None and _owner_id(resource) == actor.pk)
    now = timezone.now()
    _end_marks(actor, resource, AutoStopMark.Kind.OWNER_ALLOWS_STOP, now)
    mark = None
    if allowed:
        mark = AutoStopMark.objects.create(
            resource=resource,
            kind=AutoStopMark.Kind.OWNER_ALLOWS_STOP,
            reason="The owner accepts losing the container disk's data on an automatic stop.",
            created_by=actor,
            created_at=now,
        )
    audit_record(
        actor=actor,
        action="autostop.owner_allows_stop" if allowed else "autostop.owner_withdraws_stop",
        target=resource,
        institution_id=lab.institution_id,
        before=None,
        after={"allowed": allowed},
    )
    return mark


def _end_marks(actor, resource, kind, now) -> None:
    AutoStopMark.objects.filter(resource=resource, kind=kind, ended_at__isnull=True).update(
        ended_at=now, ended_by=actor
    )


def may_keep_running(user, notice: StopNotice) -> bool:
    return notice.owner_id == user.pk or access.can_manage_lab(user, notice.lab_id)


@transaction.atomic
def stop_notice_keep(*, actor, notice: StopNotice, hours: int | None = None) -> StopNotice:
    """The one click: keep the warned pod running for the policy's hours from now (never
    longer: the lab's policy says how long an idle pod may be kept). The keeps are counted;
    at the second the lab's admins are told."""
    notice = StopNotice.objects.select_for_update().get(pk=notice.pk)
    access.deny_unless(may_keep_running(actor, notice))
    if notice.state not in (StopNotice.State.WARNED, StopNotice.State.KEPT):
        raise DomainError("This pod is no longer waiting to be stopped.")
    policy = policy_for(notice.lab)
    hours = hours or policy.keep_hours
    limit = min(policy.keep_hours, MAX_KEEP_HOURS)
    if not 1 <= hours <= limit:
        raise DomainError(
            f"Keep it running 1 to {limit} hours: the lab's policy keeps an idle pod running "
            f"for at most {policy.keep_hours} hours at a time."
        )
    now = timezone.now()
    before = {"state": notice.state, "stop_at": notice.stop_at.isoformat()}
    notice.state = StopNotice.State.KEPT
    notice.kept_until = now + dt.timedelta(hours=hours)
    notice.kept_by = actor
    notice.stop_at = notice.kept_until
    notice.keeps += 1
    notice.save(update_fields=["state", "kept_until", "kept_by", "stop_at", "keeps"])
    audit_record(
        actor=actor,
        action="autostop.keep_running",
        target=notice,
        institution_id=notice.lab.institution_id,
        before=before,
        after={
            "state": notice.state,
            "stop_at": notice.stop_at.isoformat(),
            "hours": hours,
            "keeps": notice.keeps,
        },
    )
    if notice.keeps == 2:
        _tell_admins_of_keeps(notice, actor)
    return notice


def _tell_admins_of_keeps(notice: StopNotice, actor) -> None:
    from django.urls import reverse

    from labgov.idle.policy import _lab_admins
    from labgov.notifications.services import notify

    pod = notice.resource
    notify(
        recipients=[u for u in _lab_admins(notice.lab_id) if u.pk != actor.pk],
        kind="idle.kept_again",
        subject=f"Idle pod {pod.label} kept running a second time",
        body=f"{actor} kept the idle pod {pod.label} running again, until "
        f"{notice.kept_until:%Y-%m-%d %H:%M} UTC. Its GPUs have done nothing since "
        f"{notice.idle_since:%Y-%m-%d %H:%M} UTC.",
        url=reverse("idle:notice", args=[notice.pk]),
        dedupe_key=f"idle-notice:{notice.pk}:kept-again",
        thread_key=f"idle-notice:{notice.pk}",
    )
