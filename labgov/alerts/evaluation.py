"""Evaluate the rules and keep the alerts in step: one unresolved alert per kind and subject,
updated in place while its condition holds, resolved automatically when it clears.

Each person is told once per alert, and again only when it gets worse (a higher threshold),
when its snooze runs out, or when it comes back after being resolved (a new alert).
"""

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from labgov.accounts.models import Institution, Lab, Membership, Role, User
from labgov.alerts.config import Resolver
from labgov.alerts.findings import Context, Finding, usd
from labgov.alerts.models import Alert, Kind
from labgov.alerts.rules import findings_for
from labgov.core import dataversion
from labgov.notifications.services import notify

log = logging.getLogger(__name__)

UPDATED_FIELDS = (
    "subject_label",
    "lab_id",
    "owner_id",
    "resource_id",
    "account_id",
    "funding_source_id",
    "allocation_id",
    "severity",
    "level",
    "title",
    "detail",
    "monthly_cost_usd",
    "facts",
)


@dataclass
class Outcome:
    opened: list[int] = field(default_factory=list)
    updated: int = 0
    reopened: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    notified: int = 0

    def as_dict(self) -> dict:
        return {
            "opened": len(self.opened),
            "updated": self.updated,
            "reopened": len(self.reopened),
            "resolved": len(self.resolved),
            "notified": self.notified,
        }


@dataversion.scoped(lambda *, institution_id, **_: [institution_id])
def alerts_evaluate(*, institution_id: int, now: dt.datetime | None = None) -> Outcome:
    """Run every rule for one institution and bring its alerts in step, in one transaction
    holding the institution's row, so two evaluations never race each other."""
    now = now or timezone.now()
    with transaction.atomic():
        Institution.objects.select_for_update().filter(pk=institution_id).first()
        ctx = Context(institution_id=institution_id, now=now, settings=Resolver(institution_id))
        findings = {(f.kind, f.subject_key): f for f in findings_for(ctx)}
        current = {
            (a.kind, a.subject_key): a
            for a in Alert.objects.filter(institution_id=institution_id).unresolved()
        }
        audience = Audience(institution_id, {f.owner_id for f in findings.values()})
        outcome = Outcome()
        unchanged = []
        for key, finding in findings.items():
            alert = current.pop(key, None)
            if alert is None:
                alert = _open(institution_id, finding, now)
                outcome.opened.append(alert.pk)
                outcome.notified += _tell(alert, audience, reason="open")
                continue
            outcome.updated += 1
            if _same(alert, finding, now):
                unchanged.append(alert.pk)
                continue
            moved = (alert.lab_id, alert.owner_id) != (finding.lab_id, finding.owner_id)
            reason = _update(alert, finding, now)
            if reason:
                outcome.reopened.append(alert.pk)
                outcome.notified += _tell(alert, audience, reason=reason)
            elif moved:
                # Someone new owns or governs it now (a resource was assigned): tell them,
                # under the opening's key, so those already told are not told again.
                outcome.notified += _tell(alert, audience, reason="open")
        outcome.resolved = [alert.pk for alert in current.values()]
        # Most alerts stand still from one evaluation to the next: one statement for them all,
        # named by what they are (the institution's unresolved alerts, but for those about to
        # be resolved), not by a list of a thousand ids.
        if unchanged:
            Alert.objects.filter(institution_id=institution_id).unresolved().exclude(
                pk__in=outcome.resolved
            ).update(last_seen_at=now)
        Alert.objects.filter(pk__in=outcome.resolved).update(
            state=Alert.State.RESOLVED,
            resolved_at=now,
            resolved_by=None,
            resolution="The condition cleared.",
        )
    return outcome


def alerts_evaluate_all(*, now: dt.datetime | None = None) -> dict[int, dict]:
    results = {}
    for institution_id in Institution.objects.values_list("pk", flat=True):
        try:
            results[institution_id] = alerts_evaluate(
                institution_id=institution_id, now=now
            ).as_dict()
        except Exception:
            # One institution's failure must not silence the others' alerts.
            log.exception("alert evaluation failed for institution %s", institution_id)
    return results


def _open(institution_id: int, finding: Finding, now: dt.datetime) -> Alert:
    alert = Alert(
        institution_id=institution_id,
        kind=finding.kind,
        subject_key=finding.subject_key,
        state=Alert.State.OPEN,
        first_seen_at=now,
        last_seen_at=now,
    )
    _copy(alert, finding)
    try:
        with transaction.atomic():
            alert.save()
    except IntegrityError:
        # Someone else opened it between our read and write (the lock makes this rare).
        alert = Alert.objects.unresolved().get(kind=finding.kind, subject_key=finding.subject_key)
    return alert


def _copy(alert: Alert, finding: Finding) -> None:
    for name in UPDATED_FIELDS:
        setattr(alert, name, getattr(finding, name))


def _same(alert: Alert, finding: Finding, now: dt.datetime) -> bool:
    """Nothing to write but the time it was last seen, and nobody to tell."""
    if alert.state == Alert.State.SNOOZED and alert.snoozed_until and alert.snoozed_until <= now:
        return False
    return finding.level <= alert.level and all(
        getattr(alert, name) == getattr(finding, name) for name in UPDATED_FIELDS
    )


def _update(alert: Alert, finding: Finding, now: dt.datetime) -> str:
    """Update a standing alert; returns why its people must be told again ("" if not)."""
    reason = ""
    if finding.level > alert.level:
        reason = f"level-{finding.level}"
    elif alert.state == Alert.State.SNOOZED and alert.snoozed_until and alert.snoozed_until <= now:
        reason = f"snooze-ended-{alert.snoozed_until:%Y%m%dT%H%M}"
    _copy(alert, finding)
    alert.last_seen_at = now
    fields = [*UPDATED_FIELDS, "last_seen_at"]
    if reason:
        alert.state = Alert.State.OPEN
        alert.snoozed_until = None
        fields += ["state", "snoozed_until"]
    alert.save(update_fields=fields)
    return reason


GOVERNING_ROLES = (Role.LAB_ADMIN, Role.INSTITUTION_ADMIN)


class Audience:
    """Who is told about an institution's alerts, read once per evaluation: the owner of the
    resource or allocation, and who governs it (the lab's admins, or the institution's admins
    when the alert has no lab or its lab has no admin)."""

    def __init__(self, institution_id: int, owner_ids):
        self.labs = {lab.pk: lab for lab in Lab.objects.filter(institution_id=institution_id)}
        self.lab_admins: dict[int, list[int]] = defaultdict(list)
        self.institution_admins: list[int] = []
        for role, lab_id, user_id in (
            Membership.objects.active()
            .filter(institution_id=institution_id, role__in=GOVERNING_ROLES)
            .values_list("role", "lab_id", "user_id")
        ):
            if role == Role.LAB_ADMIN:
                self.lab_admins[lab_id].append(user_id)
            else:
                self.institution_admins.append(user_id)
        self._wanted = {*owner_ids, *self.institution_admins}
        self._wanted.update(i for ids in self.lab_admins.values() for i in ids)
        self._users: dict[int, User] | None = None

    @property
    def users(self) -> dict[int, User]:
        """Read when the first person is to be told: most evaluations tell nobody."""
        if self._users is None:
            self._users = User.objects.filter(is_active=True).in_bulk(self._wanted - {None})
        return self._users

    def of(self, alert: Alert) -> list[User]:
        managers = self.lab_admins.get(alert.lab_id, []) or self.institution_admins
        ids = {alert.owner_id, *managers} - {None}
        users = self.users
        return [users[i] for i in sorted(ids) if i in users]


def _tell(alert: Alert, audience: Audience, *, reason: str) -> int:
    body = alert.detail
    if alert.monthly_cost_usd is not None and alert.kind in (
        Kind.STOPPED_POD_DISK,
        Kind.IDLE_NETWORK_VOLUME,
        Kind.FUNDING_ENDING,
    ):
        body = f"Costs {usd(alert.monthly_cost_usd)} a month.\n{body}"
    if reason.startswith("snooze-ended"):
        # The same alert, told again: say why, so it does not read as a repeat.
        body = f"Its snooze has ended and it still stands.\n{body}"
    return len(
        notify(
            recipients=audience.of(alert),
            kind=f"alert.{alert.kind}",
            subject=alert.title,
            body=body,
            url=reverse("alerts:detail", args=[alert.pk]),
            dedupe_key=f"alert:{alert.pk}:{reason}",
            thread_key=f"alert:{alert.pk}",
            severity=alert.severity,
            lab=audience.labs.get(alert.lab_id),
        )
    )
