"""What people (and the evaluation) do with retention cases. Every change locks the case row,
checks the state it leaves, writes its audit event in the same transaction and tells the
owner and the lab's admins.

    open → kept (reason, review date) → open again on that date
    open | kept | deletion requested | deletion approved → hold (names who pays) → open (lifted)
    open | kept → moved to other funding                                  (closed)
    open | kept → deletion requested → deletion approved → deleted        (closed)
    deletion requested | approved → open (withdrawn, or sent back for review by the re-read)
    open | kept | deletion requested | approved → cancelled (the condition cleared)  (closed)

A hold is a row of its own, checked by the deletion itself, so it wins over any state.
"""

import datetime as dt
from decimal import Decimal

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from labgov.accounts import access
from labgov.accounts.models import Membership, Role
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.periods import hour_floor
from labgov.core.queue import task_enqueue_on_commit
from labgov.funding.models import Allocation, FundingSource
from labgov.retention.models import (
    Approval,
    Hold,
    RetentionCase,
    RetentionPolicy,
    State,
    parse_warning_days,
)
from labgov.retention.policies import Resolver
from labgov.retention.triggers import Candidate, candidates, lab_of, storage_of
from labgov.runpod.locks import account_lock
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import PodStatus

# The states each action may leave.
ALLOWED = {
    "keep": (State.OPEN,),
    "reopen": (State.KEPT,),
    "hold": (State.OPEN, State.KEPT, State.DELETION_REQUESTED, State.DELETION_APPROVED),
    "lift": (State.HOLD,),
    "move": (State.OPEN, State.KEPT),
    "request": (State.OPEN, State.KEPT),
    "approve": (State.DELETION_REQUESTED,),
    "withdraw": (State.DELETION_REQUESTED, State.DELETION_APPROVED),
    "cancel": (State.OPEN, State.KEPT, State.DELETION_REQUESTED, State.DELETION_APPROVED),
    "return": (State.DELETION_APPROVED,),
    # Stopped pods that block a volume's deletion join the case before anyone approves.
    "include": (State.OPEN, State.KEPT, State.DELETION_REQUESTED),
}
ACTION_WORDS = {
    "keep": "kept",
    "reopen": "opened again for review",
    "hold": "put on hold",
    "lift": "released from its hold",
    "move": "moved to other funding",
    "request": "put up for deletion",
    "approve": "approved for deletion",
    "withdraw": "withdrawn from deletion",
    "cancel": "cancelled",
    "return": "sent back for review",
    "open": "opened",
    "delete": "deleted",
    "include": "extended to a stopped pod that mounts the volume",
    "follow": "handed to the lab that pays for the volume now",
}
MAX_KEEP_DAYS = 3 * 365


def _who(user) -> str:
    if user is None:
        return "labgov"
    return user.get_full_name() or user.username


def paying_lab_id(resource: Resource) -> int | None:
    """The lab that pays for the resource now, read afresh (not from a page's copy)."""
    fresh = Resource.objects.select_related("account", "current_allocation__funding_source").get(
        pk=resource.pk
    )
    return lab_of(fresh)


def require_decider(actor, case: RetentionCase) -> None:
    """The case's lab's admins, or the institution's, decide; and only while that lab still
    pays for the volume (a re-attribution hands the case to the lab that pays:
    case_follow_payer)."""
    access.deny_unless(
        access.can_decide_retention(actor, institution_id=case.institution_id, lab_id=case.lab_id)
    )
    if paying_lab_id(case.resource) != case.lab_id:
        raise DomainError("Another lab pays for this volume now: its case is that lab's to decide.")


def _lock(case: RetentionCase, action: str) -> RetentionCase:
    locked = RetentionCase.objects.select_for_update().select_related("resource").get(pk=case.pk)
    if locked.state not in ALLOWED[action]:
        raise DomainError(
            f"A case that is {locked.get_state_display().lower()} cannot be {ACTION_WORDS[action]}."
        )
    return locked


def _decider_ids(case: RetentionCase) -> set[int]:
    members = Membership.objects.active()
    if case.lab_id is not None:
        members = members.filter(lab_id=case.lab_id, role=Role.LAB_ADMIN)
    else:
        members = members.filter(institution_id=case.institution_id, role=Role.INSTITUTION_ADMIN)
    return set(members.values_list("user_id", flat=True))


def recipients(case: RetentionCase, *, also=()) -> list:
    """Who follows the case: the owner and the lab's admins (the institution's admins for a
    case of no lab), and `also` (user ids: the requester and approvers of a deletion)."""
    from labgov.accounts.models import User

    ids = _decider_ids(case)
    if case.owner_id:
        ids.add(case.owner_id)
    ids.update(i for i in also if i)
    return list(User.objects.filter(pk__in=ids, is_active=True))


def deletion_people(case: RetentionCase) -> set[int]:
    """Who asked for and approved the case's current deletion request."""
    ids = set(
        Approval.objects.filter(case=case, requested_at=case.deletion_requested_at).values_list(
            "approver_id", flat=True
        )
    )
    if case.deletion_requested_by_id:
        ids.add(case.deletion_requested_by_id)
    return ids


def payer_user_id(case: RetentionCase) -> int | None:
    allocation = case.resource.current_allocation if case.resource.current_allocation_id else None
    return allocation.user_id if allocation else None


def concerned(case: RetentionCase, action: str, actor) -> set[int]:
    """Who an action on the case concerns: those who can act on what it asks for, and those
    whose data or money it is; never the person who did it (they know).

    - the case opened by hand, a warning, a review date come, a hold lifted, the case moved
      to another lab: the owner and the deciders (something to decide);
    - kept, cancelled: the owner (their data stays);
    - held, moved to other funding: the owner and whoever pays now;
    - deletion requested: the deciders who may approve it (not the owner: the warning told
      them, and the outcome will);
    - an approval (more may be needed), a withdrawal: nobody (the thread shows it);
    - deleted, or not deleted (refused, sent back, held): the owner where it was deleted,
      and the requester (a refusal is theirs to ask again); the approvers only where labgov
      never asked them (`_outcome_told`).
    A case the evaluation opens tells nobody by itself: its first warning follows at once."""
    owner = {case.owner_id} - {None}
    if action in ("open", "warn", "reopen", "lift", "follow"):
        ids = owner | _decider_ids(case) if (action != "open" or actor is not None) else set()
    elif action in ("keep", "cancel"):
        ids = owner
    elif action in ("hold", "move"):
        ids = owner | ({payer_user_id(case)} - {None})
    elif action == "request":
        ids = _decider_ids(case) - {case.deletion_requested_by_id}
    elif action == "delete":
        ids = owner | _outcome_told(case)
    elif action in ("return", "held_at_deletion"):
        ids = _outcome_told(case)
    else:
        ids = set()
    return ids - {getattr(actor, "pk", None)}


def thread_key(case: RetentionCase) -> str:
    return f"retention:{case.pk}"


def _outcome_told(case: RetentionCase) -> set[int]:
    """Who is told a deletion's outcome: the requester, and the approvers who have no
    notification of the case (an institution admin who came to it unasked: else they would
    never hear). An approver labgov asked is told only what asks them to act: the outcome
    shows on the notification that asked them, updated in place, and a deletion asked for
    again after a refusal asks them again, naming the refusal (deletion_request). So on the
    path a refused deletion walks (warned, asked, refused, asked again, deleted) an approver
    is told three times, not five."""
    from labgov.notifications.models import Notification

    requester = {case.deletion_requested_by_id} - {None}
    approvers = deletion_people(case) - requester
    asked = set(
        Notification.objects.filter(
            thread_key=thread_key(case), recipient_id__in=approvers
        ).values_list("recipient_id", flat=True)
    )
    return requester | (approvers - asked)


def case_label(case: RetentionCase) -> str:
    resource = case.resource
    kind = (
        "network volume" if resource.kind == ResourceKind.NETWORK_VOLUME else "pod volume disk of"
    )
    return f"{kind} {resource.label} ({case.size_gb} GB)"


def tell(
    case: RetentionCase,
    *,
    kind: str,
    subject: str,
    body: str,
    key: str,
    told=None,
    severity=None,
    also=(),
):
    """One notification per person per case (its thread), updated at each event: `told`
    (user ids; default the owner and the deciders) find it unread again; everyone else who
    follows the case and has it sees its words change, quietly."""
    from labgov.accounts.models import User
    from labgov.notifications.services import notify

    if told is None:
        told = _decider_ids(case) | ({case.owner_id} - {None})
    followers = recipients(case, also=also)
    told_users = list(User.objects.filter(pk__in=set(told), is_active=True))
    notify(
        recipients=told_users,
        quiet_recipients=followers,
        kind=kind,
        subject=subject,
        body=body,
        url=reverse("retention:detail", args=[case.pk]),
        dedupe_key=f"retention:{case.pk}:{key}",
        severity=severity,
        lab=case.lab,
        thread_key=thread_key(case),
    )


def sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if not text or text[-1] in ".!?…" else f"{text}."


def record(
    actor,
    case: RetentionCase,
    action: str,
    *,
    before: str,
    note: str = "",
    words: tuple[str, str, str] | None = None,
    severity=None,
    told_also=(),
    **after,
):
    """Audit a transition and tell the people it concerns (`concerned`), in the caller's
    transaction. `words` (kind, subject, body) replace the plain account of the event."""
    event = audit_record(
        actor=actor,
        action=f"retention.{action}",
        target=case,
        institution_id=case.institution_id,
        before={"state": before},
        after={"state": case.state, "resource": case.resource.runpod_id, **after},
        note=note,
    )
    if words is None:
        done = ACTION_WORDS[action]
        words = (
            "retention.transition",
            f"Retention: the {case_label(case)} was {done}",
            f"{_who(actor)} {done} the retention case of the {case_label(case)}"
            + (f": {sentence(note)}" if note.strip() else ".")
            + f" Its due date is {case.due_date:%Y-%m-%d}.",
        )
    kind, subject, body = words
    tell(
        case,
        kind=kind,
        subject=subject,
        body=body,
        key=f"event:{event.pk}",
        told=concerned(
            case, "held_at_deletion" if action == "hold" and not actor else action, actor
        )
        | ({i for i in told_also if i} - {getattr(actor, "pk", None)}),
        severity=severity,
        also=deletion_people(case),
    )
    return event


def _save(case: RetentionCase, state: str, **fields) -> None:
    case.state = state
    for name, value in fields.items():
        setattr(case, name, value)
    case.updated_at = timezone.now()
    case.save(update_fields=["state", "updated_at", *fields])


# -- Opening -----------------------------------------------------------------------------------


def case_open(*, actor, candidate: Candidate, note: str = "") -> RetentionCase:
    """Open the case of a volume a policy reached (actor None: the evaluation)."""
    resource = candidate.resource
    existing = RetentionCase.objects.active().filter(resource=resource).first()
    if existing is not None:
        return existing
    case = RetentionCase.objects.create(
        institution_id=resource.account.institution_id,
        lab_id=candidate.lab_id,
        resource=resource,
        reason=candidate.reason,
        reason_detail=candidate.detail[:300],
        owner_id=candidate.owner_id,
        payer_id=candidate.payer_id,
        funding_source_id=candidate.funding_source_id,
        size_gb=candidate.size_gb,
        monthly_cost_usd=candidate.monthly_cost_usd,
        due_date=candidate.due_date,
        opened_by=actor if actor is not None and actor.is_authenticated else None,
        note=note[:500],
    )
    record(
        actor,
        case,
        "open",
        before="",
        note=note or candidate.detail,
        reason=case.reason,
        due_date=case.due_date.isoformat(),
        size_gb=case.size_gb,
        monthly_cost_usd=str(case.monthly_cost_usd),
    )
    return case


@transaction.atomic
def case_open_for_resource(*, actor, resource: Resource, note: str = "") -> RetentionCase:
    """Open a case by hand (from an alert): the volume's reason and due date as its lab's
    policy judges it, or idle and due at the policy's first warning step when it reaches
    none of its conditions yet."""
    from labgov.retention.models import Reason

    locked = (
        Resource.objects.select_for_update(of=("self",))
        .select_related("account", "current_allocation__funding_source")
        .get(pk=resource.pk)
    )
    lab_id = lab_of(locked)
    access.deny_unless(
        access.can_decide_retention(
            actor, institution_id=locked.account.institution_id, lab_id=lab_id
        )
    )
    if locked.gone_at is not None:
        raise DomainError("The resource is gone from Runpod already.")
    resolver = Resolver(locked.account.institution_id)
    policy = resolver.for_lab(lab_id)
    found = candidates(
        locked.account.institution_id,
        resolver=resolver,
        resource_ids=[locked.pk],
        policy=policy,
        lab_id=lab_id,
    )
    if found:
        candidate = found[0]
    elif locked.kind == ResourceKind.NETWORK_VOLUME or (
        locked.kind == ResourceKind.POD and locked.volume_disk_gb > 0
    ):
        gb, monthly = storage_of(locked)
        allocation = locked.current_allocation
        candidate = Candidate(
            resource=locked,
            lab_id=lab_id,
            reason=Reason.IDLE,
            detail="opened by hand",
            due_date=timezone.now().date() + dt.timedelta(days=max(policy.warning_steps)),
            size_gb=gb,
            monthly_cost_usd=monthly,
            owner_id=allocation.user_id if allocation else None,
            payer_id=allocation.pk if allocation else None,
            funding_source_id=allocation.funding_source_id if allocation else None,
        )
    else:
        raise DomainError("Only network volumes and pods' volume disks have retention cases.")
    return case_open(actor=actor, candidate=candidate, note=note or "Opened by hand.")


# -- Decisions --------------------------------------------------------------------------------


@transaction.atomic
def case_keep(*, actor, case: RetentionCase, reason: str, review_date: dt.date) -> RetentionCase:
    require_decider(actor, case)
    case = _lock(case, "keep")
    today = timezone.now().date()
    if not reason.strip():
        raise DomainError("Say why the volume is kept.", field="reason")
    if review_date <= today:
        raise DomainError("The review date must be in the future.", field="review_date")
    if review_date > today + dt.timedelta(days=MAX_KEEP_DAYS):
        raise DomainError("Review it within three years.", field="review_date")
    before = case.state
    _save(case, State.KEPT, kept_reason=reason.strip()[:300], review_date=review_date)
    record(actor, case, "keep", before=before, note=reason, review_date=review_date.isoformat())
    return case


@transaction.atomic
def case_reopen(*, actor, case: RetentionCase, note: str = "") -> RetentionCase:
    """Kept → open (the review date came, or a decider asks)."""
    if actor is not None:
        require_decider(actor, case)
    case = _lock(case, "reopen")
    before = case.state
    _save(case, State.OPEN, review_date=None)
    record(actor, case, "reopen", before=before, note=note or "The review date has come.")
    return case


def payer_check(case: RetentionCase, allocation: Allocation, *, field: str) -> None:
    """Who may pay for a case's storage: an active allocation of a funding source that is not
    closed, of the case's lab, and on an account that lab may use (the rules of
    attribution)."""
    source = allocation.funding_source
    today = timezone.now().date()
    if source.institution_id != case.institution_id:
        raise DomainError("Choose an allocation of this institution.", field=field)
    if case.lab_id is not None and source.lab_id != case.lab_id:
        raise DomainError("Choose an allocation of the case's lab.", field=field)
    account = case.resource.account
    if account.lab_id is not None and account.lab_id != source.lab_id:
        raise DomainError(
            "The allocation's lab may not use this Runpod account (another lab's own).",
            field=field,
        )
    if not allocation.start_date <= today <= allocation.end_date:
        raise DomainError("The allocation is not active today.", field=field)
    if source.status == FundingSource.Status.CLOSED or source.end_date < today:
        raise DomainError("The allocation's funding source has ended.", field=field)


def _reattribute(actor, case: RetentionCase, allocation: Allocation, since: dt.datetime, note: str):
    """Pay for the volume by `allocation` from `since` on, with a cost transfer's checks on
    any spend already incurred that it moves (labgov/transfers/splits.py). Returns the
    pending proposal when the move is back-dated and waits for a second person."""
    from labgov.transfers.models import SpendMove
    from labgov.transfers.splits import spend_reassign

    if case.resource.current_allocation_id == allocation.pk:
        return None
    done = spend_reassign(
        actor=actor,
        resource=case.resource,
        shares=[(allocation, Decimal(100))],
        starts_at=since,
        note=note,
        origin=f"retention-case:{case.pk}",
    )
    case.resource.refresh_from_db()
    return done if isinstance(done, SpendMove) else None


@transaction.atomic
def case_hold(
    *,
    actor,
    case: RetentionCase,
    kind: str,
    reason: str,
    payer: Allocation,
    until: dt.date | None = None,
) -> Hold:
    """Hold a volume: nothing deletes it while the hold stands, not even a deletion approved
    before it. The payer pays for its storage from this hour on."""
    require_decider(actor, case)
    # The account before the case and its resource (_lock): the hold re-attributes synced
    # spend, whose writers all lock the account first (labgov/runpod/sync.py).
    account_lock(case.resource.account_id)
    case = _lock(case, "hold")
    if kind not in Hold.Kind.values:
        raise DomainError("Choose thesis, legal or audit.", field="kind")
    if not reason.strip():
        raise DomainError("Say why the volume is held.", field="reason")
    if until is not None and until <= timezone.now().date():
        raise DomainError("A hold lasts until a day in the future.", field="until")
    payer_check(case, payer, field="payer")
    since = hour_floor(timezone.now())
    _reattribute(actor, case, payer, since, f"Held (retention case #{case.pk}): {reason}"[:300])
    hold = Hold.objects.create(
        resource=case.resource,
        case=case,
        kind=kind,
        reason=reason.strip()[:300],
        until=until,
        payer=payer,
        placed_by=actor,
        placed_as=placing_role(actor, case),
    )
    before = case.state
    _save(case, State.HOLD)
    record(
        actor,
        case,
        "hold",
        before=before,
        note=reason,
        hold_id=hold.pk,
        kind=kind,
        until=until.isoformat() if until else None,
        payer_allocation_id=payer.pk,
        payer=str(payer),
        paid_from=since.isoformat(),
    )
    return hold


LIFTED_BY_INSTITUTION = (Hold.Kind.LEGAL, Hold.Kind.AUDIT)


def placing_role(actor, case: RetentionCase) -> str:
    if case.institution_id in access.scope_for(actor).admin_institutions:
        return Role.INSTITUTION_ADMIN
    return Role.LAB_ADMIN


def may_lift(actor, hold: Hold) -> bool:
    """A legal or audit hold is lifted by an institution admin, or by someone in the role that
    placed it (a lab admin's own legal hold, another lab admin); a thesis hold by any decider.
    A hold placed before roles were recorded counts as an institution admin's."""
    if hold.kind not in LIFTED_BY_INSTITUTION:
        return True
    if hold.case.institution_id in access.scope_for(actor).admin_institutions:
        return True
    return hold.placed_as == Role.LAB_ADMIN


@transaction.atomic
def hold_lift(*, actor, case: RetentionCase, note: str = "") -> RetentionCase:
    """End the case's holds (actor None: their last day passed); the case is open again and
    any deletion must be requested and approved afresh."""
    if actor is not None:
        require_decider(actor, case)
    case = _lock(case, "lift")
    now = timezone.now()
    standing = list(Hold.objects.filter(case=case, lifted_at__isnull=True).select_related("case"))
    if actor is not None:
        refused = [h for h in standing if not may_lift(actor, h)]
        if refused:
            kinds = " and ".join(sorted({h.get_kind_display().lower() for h in refused}))
            raise DomainError(
                f"An institution admin placed the {kinds} hold: only an institution admin lifts it."
            )
    Hold.objects.filter(pk__in=[h.pk for h in standing]).update(
        lifted_at=now, lifted_by=actor if actor is not None else None
    )
    before = case.state
    _save(case, State.OPEN)
    record(
        actor,
        case,
        "lift",
        before=before,
        note=note or "The hold ended.",
        holds=[{"id": h.pk, "kind": h.kind, "placed_as": h.placed_as} for h in standing],
    )
    return case


@transaction.atomic
def case_move(
    *, actor, case: RetentionCase, allocation: Allocation, starts_on: dt.date, note: str = ""
) -> RetentionCase:
    """Pay for the volume from other funding from a day on, within the rules of attribution
    (never before its current assignment, never in a closed period). A lab admin's move from
    before today that moves spend already incurred waits for finance or an institution admin
    (a back-dated move, as a cost transfer); the case stays as it is until then."""
    require_decider(actor, case)
    account_lock(case.resource.account_id)  # first, as in case_hold
    case = _lock(case, "move")
    payer_check(case, allocation, field="allocation")
    if allocation.pk == case.resource.current_allocation_id:
        raise DomainError("The volume is paid from that allocation already.", field="allocation")
    since = dt.datetime.combine(starts_on, dt.time(), tzinfo=dt.UTC)
    proposal = _reattribute(actor, case, allocation, since, f"Moved (retention case #{case.pk})")
    if proposal is not None:
        audit_record(
            actor=actor,
            action="retention.move_propose",
            target=case,
            institution_id=case.institution_id,
            after={"spend_move_id": proposal.pk, "allocation_id": allocation.pk},
            note=note,
        )
        return case
    _moved(actor, case, allocation, since, note)
    return case


def _moved(actor, case: RetentionCase, allocation: Allocation, since: dt.datetime, note: str):
    before = case.state
    _save(case, State.MOVED, moved_to=allocation, moved_from=since)
    record(
        actor,
        case,
        "move",
        before=before,
        note=note,
        allocation_id=allocation.pk,
        allocation=str(allocation),
        starts_at=since.isoformat(),
    )


def case_move_approved(*, move, actor) -> None:
    """A back-dated move asked for by a case was approved (settings LABGOV_SPEND_MOVE_ORIGINS):
    the case is moved, if it still may be; otherwise the approval is refused whole."""
    case = RetentionCase.objects.get(pk=int(move.origin.split(":")[1]))
    case = _lock(case, "move")
    allocation = move.shares.get().allocation
    _moved(actor, case, allocation, move.starts_at, f"Back-dated move #{move.pk} approved.")


def describe(resource: Resource) -> dict:
    """The resource's last known description, for the re-read and the audit."""
    from labgov.runpod.history import since_words

    facts = {
        "kind": resource.kind,
        "runpod_id": resource.runpod_id,
        "name": resource.name,
        "data_center": resource.data_center_id,
        "allocation_id": resource.current_allocation_id,
        "account_id": resource.account_id,
    }
    if resource.kind == ResourceKind.NETWORK_VOLUME:
        from labgov.runpod.history import volume_uses

        in_use, last_used, observed = volume_uses(resource.account.institution_id)
        key = (resource.account_id, resource.runpod_id)
        moment = max([m for m in (last_used.get(key), observed.get(key)) if m], default=None)
        facts.update(
            size_gb=resource.size_gb,
            volume_type=resource.volume_type,
            mounted_now=key in in_use,
            last_mounted=since_words(moment) if moment else "never, in the history labgov holds",
        )
    else:
        facts.update(
            size_gb=resource.volume_disk_gb,
            status=resource.status,
            network_volume_id=resource.network_volume_id,
            last_mounted=f"stopped since {since_words(resource.status_changed_at)}",
        )
    return facts


def _included_facts(case: RetentionCase) -> list[dict]:
    return [
        {
            "runpod_id": p.runpod_id,
            "name": p.name,
            "status": p.status,
            "volume_disk_gb": p.volume_disk_gb,
            "container_disk_gb": p.container_disk_gb,
        }
        for p in case.included_pods.order_by("pk")
    ]


@transaction.atomic
def deletion_request(*, actor, case: RetentionCase, reason: str = "") -> RetentionCase:
    require_decider(actor, case)
    case = _lock(case, "request")
    if Hold.objects.active().filter(resource=case.resource).exists():
        raise DomainError("The volume is on hold: lift the hold first.")
    if case.resource.gone_at is not None:
        raise DomainError("The resource is gone from Runpod already.")
    facts = describe(case.resource)
    if facts.get("mounted_now"):
        raise DomainError("A running pod mounts this volume now: it is in use.")
    facts["included_pods"] = _included_facts(case)
    before = case.state
    # Asked again after labgov could not delete it: the approvers hear of that refusal here,
    # where it asks them to act, and not once more on their own (concerned).
    refused = case.refusal
    _save(
        case,
        State.DELETION_REQUESTED,
        deletion_requested_by=actor,
        deletion_requested_at=timezone.now(),
        deletion_reason=reason.strip()[:300],
        last_known=facts,
        review_date=None,
        refusal="",
        refused_at=None,
    )
    needed = approvers_required(case)
    record(
        actor,
        case,
        "request",
        before=before,
        note=reason,
        last_known=facts,
        words=(
            "retention.approval_needed",
            f"Approve or withdraw: deletion of the {case_label(case)}",
            f"{_who(actor)} asks to delete the {case_label(case)}"
            + (f" ({' '.join(reason.split())})" if reason.strip() else "")
            + f"; {'another person' if needed == 1 else f'{needed} other people'} must "
            "approve it before labgov deletes anything."
            + (
                f" Asked again after the last attempt failed: {sentence(refused)}"
                if refused
                else ""
            ),
        ),
    )
    return case


def approvers_required(case: RetentionCase) -> int:
    return Resolver(case.institution_id).for_lab(case.lab_id).approvers_required


def deciders_still_decide(case: RetentionCase, user_ids) -> list[str]:
    """Who of the requester and approvers no longer decides for the lab that pays (a
    membership ended, or the case moved to another lab): their request or approval no longer
    counts."""
    from labgov.accounts.models import User

    people = User.objects.filter(pk__in=[i for i in user_ids if i]).order_by("pk")
    return [
        user.get_full_name() or user.username
        for user in people
        if not access.can_decide_retention(
            user, institution_id=case.institution_id, lab_id=case.lab_id
        )
    ]


@transaction.atomic
def deletion_approve(*, actor, case: RetentionCase) -> RetentionCase:
    """Approve a requested deletion. The requester never approves, nobody approves twice;
    with the two-person setting, two approvers are needed. Nothing known to block the
    deletion may stand (blockers.py). The last approval queues the deletion for after the
    commit."""
    from labgov.retention.blockers import deletion_blockers

    require_decider(actor, case)
    case = _lock(case, "approve")
    if actor.pk == case.deletion_requested_by_id:
        raise DomainError("You asked for this deletion: another person must approve it.")
    approvals = Approval.objects.filter(case=case, requested_at=case.deletion_requested_at)
    if approvals.filter(approver=actor).exists():
        raise DomainError("You approved this deletion already: it needs another approver.")
    if Hold.objects.active().filter(resource=case.resource).exists():
        raise DomainError("The volume is on hold: nothing deletes it.")
    lost = deciders_still_decide(case, [case.deletion_requested_by_id])
    if lost:
        raise DomainError(
            f"{lost[0]} asked for this deletion but no longer decides for the lab that pays "
            "for it: withdraw it, and ask again."
        )
    blockers = deletion_blockers(case)
    if not blockers.possible:
        raise DomainError(f"Deleting is not possible now: {blockers.words}.")
    Approval.objects.create(case=case, approver=actor, requested_at=case.deletion_requested_at)
    count = approvals.count()
    needed = approvers_required(case)
    before = case.state
    if count >= needed:
        _save(case, State.DELETION_APPROVED)
        task_enqueue_on_commit("labgov.retention.tasks.delete_case", case.pk)
    else:
        case.save(update_fields=["updated_at"])
    record(actor, case, "approve", before=before, approvals=count, needed=needed)
    return case


@transaction.atomic
def case_include_pod(*, actor, case: RetentionCase, pod: Resource) -> RetentionCase:
    """Include a stopped pod that mounts the case's network volume: it is terminated with the
    volume (its own disks too) on the case's one request and approval. Never a running pod,
    never a held one, never after an approval was given (withdraw and ask again)."""
    from labgov.retention.blockers import pod_words

    require_decider(actor, case)
    case = _lock(case, "include")
    volume = case.resource
    if volume.kind != ResourceKind.NETWORK_VOLUME:
        raise DomainError("Only a network volume's case includes the pods that mount it.")
    pod = (
        Resource.objects.select_for_update(of=("self",))
        .select_related("account", "current_allocation__funding_source", "current_allocation__user")
        .get(pk=pod.pk)
    )
    if (
        pod.kind != ResourceKind.POD
        or pod.account_id != volume.account_id
        or pod.network_volume_id != volume.runpod_id
        or pod.gone_at is not None
    ):
        raise DomainError("That pod does not mount this volume.", field="pod")
    if pod.status != PodStatus.EXITED:
        raise DomainError(
            "That pod is not stopped: labgov never terminates a running pod for a retention "
            "case. Stop it first.",
            field="pod",
        )
    if not access.can_decide_retention(
        actor, institution_id=case.institution_id, lab_id=lab_of(pod)
    ):
        raise DomainError("That pod is paid by a lab whose retention you do not decide.")
    if Hold.objects.active().filter(resource=pod).exists():
        raise DomainError("That pod is on hold: nothing deletes it.", field="pod")
    if (
        case.state == State.DELETION_REQUESTED
        and Approval.objects.filter(case=case, requested_at=case.deletion_requested_at).exists()
    ):
        raise DomainError(
            "Someone approved this deletion already: withdraw it, include the pod, and ask "
            "again, so the approval covers the pod."
        )
    if case.included_pods.filter(pk=pod.pk).exists():
        raise DomainError("That pod is included already.", field="pod")
    case.included_pods.add(pod)
    if case.state == State.DELETION_REQUESTED:
        case.last_known = {**case.last_known, "included_pods": _included_facts(case)}
        case.save(update_fields=["last_known"])
    before = case.state
    _save(case, case.state)
    record(
        actor,
        case,
        "include",
        before=before,
        note=f"The {pod_words(pod)} is deleted with the volume, with its own disks.",
        told_also=[pod.current_allocation.user_id if pod.current_allocation_id else None],
        pod=pod.runpod_id,
        pod_name=pod.name,
        pod_volume_disk_gb=pod.volume_disk_gb,
    )
    return case


def case_follow_payer(*, actor, resource: Resource, before_allocation_id: int | None) -> None:
    """After-assign step (settings.LABGOV_AFTER_ASSIGN): a volume re-attributed to another lab
    takes its active case with it, and both labs are told. A deletion the first lab requested
    or approved no longer counts: the case is open for the paying lab to decide (a hold
    stands; holds win)."""
    case = (
        RetentionCase.objects.active()
        .select_for_update(of=("self",))
        .select_related("lab")
        .filter(resource_id=resource.pk)
        .first()
    )
    if case is None:
        return
    fresh = Resource.objects.select_related(
        "account", "current_allocation__funding_source", "current_allocation__user"
    ).get(pk=resource.pk)
    new_lab_id = lab_of(fresh)
    if new_lab_id == case.lab_id:
        return
    from labgov.accounts.models import Lab

    old_lab = case.lab
    new_lab = Lab.objects.filter(pk=new_lab_id).first() if new_lab_id else None
    before = case.state
    voided = before in (State.DELETION_REQUESTED, State.DELETION_APPROVED)
    old_recipients = recipients(case, also=deletion_people(case))
    case.resource = fresh
    case.included_pods.clear()
    # The first lab's request, if any, is no longer the case's: its requester and approvers
    # stop following it (they are told once, below, that it moved).
    _save(
        case,
        State.OPEN if voided else case.state,
        lab=new_lab,
        owner=fresh.current_allocation.user if fresh.current_allocation_id else None,
        deletion_requested_by=None,
        deletion_requested_at=None,
        deletion_reason="",
    )
    words = (
        f"from {old_lab.name if old_lab else 'no lab'} to {new_lab.name if new_lab else 'no lab'}"
    )
    note = f"The volume was re-attributed {words}; the case follows who pays." + (
        " The deletion asked for before no longer counts: ask again." if voided else ""
    )
    event = record(
        actor,
        case,
        "follow",
        before=before,
        note=note,
        from_lab=old_lab.pk if old_lab else None,
        to_lab=new_lab_id,
        allocation_id=fresh.current_allocation_id,
        before_allocation_id=before_allocation_id,
    )
    from labgov.notifications.services import notify

    # The first lab's people hear this once, on their notification of the case, and nothing
    # after: they no longer follow it (recipients() names the paying lab's people only).
    following = {u.pk for u in recipients(case)} | {getattr(actor, "pk", None)}
    notify(
        recipients=[u for u in old_recipients if u.pk not in following],
        kind="retention.transition",
        subject=f"Retention: the {case_label(case)} is another lab's now",
        body=f"{note} {deciders_words(case, new_lab)}",
        url=reverse("retention:list"),
        dedupe_key=f"retention:{case.pk}:follow-old:{event.pk}",
        lab=old_lab,
        thread_key=thread_key(case),
    )


def deciders_words(case: RetentionCase, lab) -> str:
    """Who decides the case now, by name (a few, then how many more)."""
    from labgov.accounts.models import User

    people = User.objects.filter(pk__in=_decider_ids(case), is_active=True).order_by("pk")
    names = [_who(u) for u in people[:4]]
    if len(names) > 3:
        names = [*names[:3], f"{people.count() - 3} more"]
    who = f"{lab.name}'s lab admins" if lab is not None else "The institution's admins"
    if not names:
        return f"{who} decide it now (it has none yet)."
    return f"{who} decide it now: {', '.join(names)}."


@transaction.atomic
def deletion_withdraw(*, actor, case: RetentionCase, note: str = "") -> RetentionCase:
    require_decider(actor, case)
    case = _lock(case, "withdraw")
    before = case.state
    _save(case, State.OPEN)
    record(actor, case, "withdraw", before=before, note=note)
    return case


@transaction.atomic
def case_cancel(*, actor, case: RetentionCase, note: str) -> RetentionCase:
    """The condition cleared (new funding, the volume in use again): nothing to decide."""
    if actor is not None:
        require_decider(actor, case)
        if not note.strip():
            raise DomainError("Say why the case no longer applies.", field="note")
    case = _lock(case, "cancel")
    before = case.state
    _save(case, State.CANCELLED)
    record(actor, case, "cancel", before=before, note=note)
    return case


# -- Policies ---------------------------------------------------------------------------------


POLICY_FIELDS = (
    "is_active",
    "funding_grace_days",
    "membership_grace_days",
    "idle_grace_days",
    "include_stopped_pod_disks",
    "warning_days",
    "approvers_required",
)


@transaction.atomic
def policy_save(*, actor, institution, lab, values: dict) -> RetentionPolicy:
    """Save an institution's default retention policy (lab None) or a lab's own, audited."""
    from labgov.core.snapshots import snapshot

    access.deny_unless(
        access.can_edit_policy(actor, institution_id=institution.pk, lab_id=lab.pk if lab else None)
    )
    if lab is not None and lab.institution_id != institution.pk:
        raise DomainError("The lab belongs to another institution.")
    steps = parse_warning_days(values["warning_days"])
    if values["approvers_required"] not in (1, 2):
        raise DomainError("One or two approvers.", field="approvers_required")
    row = (
        RetentionPolicy.objects.select_for_update().filter(institution=institution, lab=lab).first()
    )
    before = snapshot(row) if row else None
    if row is None:
        row = RetentionPolicy(institution=institution, lab=lab)
    for name in POLICY_FIELDS:
        setattr(row, name, values[name])
    row.warning_days = ",".join(str(s) for s in steps)
    row.updated_at = timezone.now()
    row.updated_by = actor
    row.save()
    audit_record(
        actor=actor,
        action="retention_policy.save",
        target=row,
        institution_id=institution.pk,
        before=before,
        after=snapshot(row),
    )
    return row
