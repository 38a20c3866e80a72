from django.db import models, transaction

from labgov.audit.models import AuditEvent
from labgov.core.snapshots import snapshot


def audit_record(
    *,
    actor,
    action: str,
    target: models.Model,
    institution_id: int | None,
    before: dict | None = None,
    after: dict | None = None,
    note: str = "",
) -> AuditEvent:
    """Record a governance change. Call it inside the transaction that makes the change."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record must run in the transaction of the change it records")
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        institution_id=institution_id,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:300],
        before=before,
        after=after if after is not None else snapshot(target),
        note=note,
    )


def audit_records(
    *,
    actor,
    action: str,
    institution_id: int | None,
    events: list[tuple[models.Model, dict | None, dict]],
) -> list[AuditEvent]:
    """audit_record of one action on many targets, in one insert: `events` are (target,
    before, after). Call it inside the transaction that makes the changes."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_records must run in the transaction of the change it records")
    who = actor if actor is not None and actor.is_authenticated else None
    return AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                actor=who,
                institution_id=institution_id,
                action=action,
                target_type=target._meta.label_lower,
                target_id=str(target.pk),
                target_repr=str(target)[:300],
                before=before,
                after=after,
            )
            for target, before, after in events
        ],
        batch_size=500,
    )
