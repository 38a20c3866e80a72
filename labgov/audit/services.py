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
