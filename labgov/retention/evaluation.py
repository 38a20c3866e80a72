"""The retention evaluation of one institution: runs after every sync and once a day.

Each step is idempotent, so running it twice, or on several workers, changes nothing more:
cases open once per volume (a partial unique index), warnings go out once per step (the step
is recorded under the case's row lock, and each notification has its own dedupe key)."""

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from labgov.core import dataversion
from labgov.core.queue import task_enqueue_on_commit
from labgov.retention import services
from labgov.retention.models import Hold, RetentionCase, State
from labgov.retention.policies import Resolver
from labgov.retention.triggers import candidates, lab_of

log = logging.getLogger(__name__)

# States in which the owner still has a decision to make before the due date.
WARNED_STATES = (State.OPEN, State.KEPT, State.DELETION_REQUESTED)
# States the evaluation may cancel when the condition cleared (a hold stands until lifted).
CANCELLABLE = (State.OPEN, State.KEPT, State.DELETION_REQUESTED)


@dataclass
class Result:
    opened: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    lifted: list[int] = field(default_factory=list)
    warned: list[tuple[int, int]] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {name: len(getattr(self, name)) for name in self.__dataclass_fields__}


@dataversion.scoped(lambda *, institution_id, **_: [institution_id])
def retention_evaluate(*, institution_id: int, now: dt.datetime | None = None) -> Result:
    now = now or timezone.now()
    today = now.date()
    result = Result()
    resolver = Resolver(institution_id)
    found = {c.resource.pk: c for c in candidates(institution_id, resolver=resolver)}
    active = {
        c.resource_id: c
        for c in RetentionCase.objects.active()
        .filter(institution_id=institution_id)
        .select_related("resource__account", "resource__current_allocation__funding_source")
    }
    for resource_id, candidate in found.items():
        policy = resolver.for_lab(candidate.lab_id)
        near = candidate.opens_on(policy) <= today
        if not policy.is_active or not near or resource_id in active:
            continue
        try:
            with transaction.atomic():
                case = services.case_open(actor=None, candidate=candidate)
        except IntegrityError:  # another worker opened it meanwhile
            continue
        active[resource_id] = case
        result.opened.append(case.pk)
    for resource_id, case in active.items():
        if lab_of(case.resource) != case.lab_id:
            # Re-attributed where no after-assign step ran (a rule, a script): the case goes
            # to the lab that pays before anything else is decided on it.
            with transaction.atomic():
                services.case_follow_payer(
                    actor=None, resource=case.resource, before_allocation_id=None
                )
            case.refresh_from_db()
        _follow(case, found.get(resource_id), resolver, today, result)
    return result


def _cleared(case, candidate, resolver, today) -> bool:
    """Gone from Runpod, or (for a case the evaluation opened) no longer near its due date:
    new funding, a new owner, or in use again."""
    if case.resource.gone_at is not None:
        return True
    if case.opened_by_id is not None:
        return False
    if candidate is None:
        return True
    return candidate.opens_on(resolver.for_lab(candidate.lab_id)) > today


def _follow(case, candidate, resolver, today, result) -> None:
    if case.state in CANCELLABLE and _cleared(case, candidate, resolver, today):
        note = (
            "The volume is gone from Runpod."
            if case.resource.gone_at is not None
            else "The condition cleared (new funding, or the volume is in use again)."
        )
        with transaction.atomic():
            services.case_cancel(actor=None, case=case, note=note)
        result.cancelled.append(case.pk)
        return
    if case.state == State.HOLD:
        if not Hold.objects.active(on=today).filter(case=case).exists():
            with transaction.atomic():
                services.hold_lift(actor=None, case=case, note="The hold's last day has passed.")
            result.lifted.append(case.pk)
        return
    if case.state == State.KEPT and case.review_date and case.review_date <= today:
        with transaction.atomic():
            case = services.case_reopen(actor=None, case=case)
        result.reopened.append(case.pk)
    if case.state == State.DELETION_APPROVED:
        # A deletion whose task was lost (a worker killed, the broker down) is queued again;
        # the task does nothing to a case already decided.
        with transaction.atomic():
            task_enqueue_on_commit("labgov.retention.tasks.delete_case", case.pk)
        result.queued.append(case.pk)
        return
    if case.state in WARNED_STATES:
        steps = resolver.for_lab(case.lab_id).warning_steps
        warn(case, steps, today, result)


def warn(case: RetentionCase, steps, today: dt.date, result: Result) -> None:
    """Tell the owner and the lab's admins at each warning step, once: a step passed before
    the case opened (or while nothing ran) is not told late, only the nearest one due."""
    days_left = (case.due_date - today).days
    reached = [s for s in steps if days_left <= s]
    if not reached:
        return
    with transaction.atomic():
        locked = RetentionCase.objects.select_for_update().get(pk=case.pk)
        told = set(locked.warned_days or [])
        fresh = [s for s in reached if s not in told]
        if not fresh:
            return
        step = min(fresh)
        locked.warned_days = sorted(told | set(reached), reverse=True)
        locked.save(update_fields=["warned_days"])
        when = (
            f"in {days_left} day{'s' if days_left != 1 else ''}"
            if days_left > 0
            else "today"
            if days_left == 0
            else f"{-days_left} day{'s' if days_left != -1 else ''} ago"
        )
        services.tell(
            locked,
            kind="retention.warning",
            subject=f"Retention: the {services.case_label(locked)} is due {when}",
            body=f"The {services.case_label(locked)} ({locked.reason_text.lower()}: "
            f"{locked.reason_detail}) is due on {locked.due_date:%Y-%m-%d}. Keep it, hold it, "
            "move it to other funding, or have its deletion approved. Nothing is deleted "
            "without an approval.",
            key=f"warn:{step}",
        )
        result.warned.append((case.pk, step))


def retention_evaluate_all() -> dict:
    from labgov.accounts.models import Institution

    totals: dict[str, int] = {}
    for institution_id in Institution.objects.values_list("pk", flat=True):
        try:
            counts = retention_evaluate(institution_id=institution_id).as_dict()
        except Exception:
            log.exception("retention evaluation of institution %s failed", institution_id)
            continue
        for name, value in counts.items():
            totals[name] = totals.get(name, 0) + value
    return totals
