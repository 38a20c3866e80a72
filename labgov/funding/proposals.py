"""Lab admins propose funding sources and changes; finance or an institution admin decides.

A lab admin cannot set an amount, a date or a status of a funding source (that would let them
mint their own budget). They propose; the proposal changes nothing until someone with the
money role of the institution, and never the proposer, approves it. The approval creates or
changes the source as the approver (its usual `funding_source.*` audit row) and writes a
`funding_proposal.approve` row naming both people.
"""

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from labgov.accounts import access
from labgov.accounts.models import Lab
from labgov.accounts.services import money_deciders
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.funding.models import FundingProposal, FundingSource
from labgov.funding.services import (
    FUNDING_FIELDS,
    _check_award_number_free,
    funding_source_create,
    funding_source_update,
    validate_funding_values,
)

P = FundingProposal.State

PROPOSED_FIELDS = FUNDING_FIELDS


def _clean(values: dict) -> dict:
    unknown = set(values) - set(PROPOSED_FIELDS)
    if unknown:
        raise TypeError(f"unknown proposal fields {sorted(unknown)}")
    clean = {k: (v.strip() if isinstance(v, str) else v) for k, v in values.items()}
    clean.setdefault("sponsor", "")
    clean.setdefault("award_number", "")
    clean.setdefault("cost_center", "")
    clean.setdefault("kind", FundingSource.Kind.GRANT)
    clean.setdefault("status", FundingSource.Status.ACTIVE)
    clean.setdefault("indirect_cost_rate_percent", None)
    validate_funding_values(
        name=clean["name"],
        start_date=clean["start_date"],
        end_date=clean["end_date"],
        amount_usd=clean["amount_usd"],
        indirect_cost_rate_percent=clean["indirect_cost_rate_percent"],
        kind=clean["kind"],
        status=clean["status"],
    )
    return clean


def _notify(*, recipients, kind: str, proposal: FundingProposal, subject: str, body: str = ""):
    from labgov.notifications.services import notify

    notify(
        recipients=recipients,
        kind=kind,
        subject=subject,
        body=body,
        url=reverse("funding:proposals"),
        dedupe_key=f"{kind}:{proposal.pk}",
        thread_key=f"funding_proposal:{proposal.pk}",
    )


@transaction.atomic
def funding_proposal_create(
    *,
    actor,
    lab: Lab,
    values: dict,
    funding_source: FundingSource | None = None,
    reason: str = "",
) -> FundingProposal:
    """Propose a new funding source for `lab` (funding_source None) or a change to one."""
    if not access.can_propose_funding(actor, lab.pk):
        raise DomainError("Only the lab's admins propose funding for it.")
    clean = _clean(values)
    if funding_source is None:
        _check_award_number_free(lab.institution_id, clean["award_number"])
        changed = list(PROPOSED_FIELDS)
    else:
        if funding_source.lab_id != lab.pk:
            raise DomainError("That funding source belongs to another lab.")
        _check_award_number_free(
            lab.institution_id, clean["award_number"], exclude_pk=funding_source.pk
        )
        changed = [f for f in PROPOSED_FIELDS if getattr(funding_source, f) != clean[f]]
        if not changed:
            raise DomainError("The proposal changes nothing.")
    proposal = FundingProposal.objects.create(
        institution_id=lab.institution_id,
        lab=lab,
        funding_source=funding_source,
        is_new_source=funding_source is None,
        changed_fields=changed,
        reason=reason.strip()[:1000],
        proposed_by=actor,
        **clean,
    )
    audit_record(
        actor=actor,
        action="funding_proposal.create",
        target=proposal,
        institution_id=lab.institution_id,
        after={"changed_fields": changed, "amount_usd": str(clean["amount_usd"])},
        note=proposal.reason,
    )
    what = "a new funding source" if funding_source is None else f"a change to {funding_source}"
    _notify(
        recipients=[u for u in money_deciders(lab.institution_id) if u.pk != actor.pk],
        kind="funding.proposal",
        proposal=proposal,
        subject=f"{actor} proposes {what} for {lab}",
        body=proposal.reason,
    )
    return proposal


def _lock_pending(proposal: FundingProposal, actor) -> FundingProposal:
    locked = (
        FundingProposal.objects.select_for_update()
        .select_related("lab", "proposed_by")
        .get(pk=proposal.pk)
    )
    if locked.state != P.PENDING:
        raise DomainError(f"Proposal #{locked.pk} is {locked.get_state_display().lower()}.")
    if actor is None or not access.can_decide_funding_proposals(actor, locked.institution_id):
        raise DomainError("Only finance or an institution admin decides on funding proposals.")
    if locked.proposed_by_id == actor.pk:
        raise DomainError("You cannot decide on your own proposal; someone else must.")
    return locked


def _decide(locked: FundingProposal, actor, state: str, note: str) -> None:
    locked.state = state
    locked.decided_by = actor
    locked.decided_at = timezone.now()
    locked.decision_note = note
    locked.save()


@transaction.atomic
def funding_proposal_approve(
    *, actor, proposal: FundingProposal, note: str = ""
) -> FundingProposal:
    locked = _lock_pending(proposal, actor)
    note = note.strip()[:1000]
    values = {f: getattr(locked, f) for f in locked.changed_fields}
    if locked.is_new_source:
        funding_source = funding_source_create(actor=actor, lab=locked.lab, **values)
        locked.funding_source = funding_source
    else:
        funding_source = funding_source_update(
            actor=actor, funding_source=locked.funding_source, **values
        )
    _decide(locked, actor, P.APPROVED, note)
    audit_record(
        actor=actor,
        action="funding_proposal.approve",
        target=locked,
        institution_id=locked.institution_id,
        after={
            "proposed_by": locked.proposed_by_id,
            "approved_by": actor.pk,
            "funding_source_id": funding_source.pk,
            "changed_fields": locked.changed_fields,
        },
        note=f"Proposed by {locked.proposed_by}, approved by {actor}. {note}".strip(),
    )
    _notify(
        recipients=[locked.proposed_by],
        kind="funding.proposal_decided",
        proposal=locked,
        subject=f"Your funding proposal #{locked.pk} was approved by {actor}",
        body=note,
    )
    return locked


@transaction.atomic
def funding_proposal_reject(*, actor, proposal: FundingProposal, note: str) -> FundingProposal:
    note = (note or "").strip()[:1000]
    if not note:
        raise DomainError("Say why the proposal is rejected.", field="note")
    locked = _lock_pending(proposal, actor)
    _decide(locked, actor, P.REJECTED, note)
    audit_record(
        actor=actor,
        action="funding_proposal.reject",
        target=locked,
        institution_id=locked.institution_id,
        after={"proposed_by": locked.proposed_by_id, "rejected_by": actor.pk},
        note=f"Proposed by {locked.proposed_by}, rejected by {actor}: {note}",
    )
    _notify(
        recipients=[locked.proposed_by],
        kind="funding.proposal_decided",
        proposal=locked,
        subject=f"Your funding proposal #{locked.pk} was rejected by {actor}",
        body=note,
    )
    return locked


def proposal_values_from(funding_source: FundingSource) -> dict:
    return {f: getattr(funding_source, f) for f in PROPOSED_FIELDS}
