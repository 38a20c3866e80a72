"""Carrying out an approved deletion on Runpod, once, safely.

- Only a case in `deletion_approved` deletes, and the case row stays locked from the checks
  to the record, so a hold placed meanwhile waits and then finds the case decided: a hold
  that stands when the deletion begins always stops it.
- Before deleting, the resource is read again from Runpod and compared with what labgov knew
  when the deletion was requested; a change (running or mounted now, resized, renamed, moved,
  re-attributed) refuses the deletion and sends the case back for review.
- Idempotent: a resource Runpod no longer has (404, before or after a timeout and retry) is
  recorded as deleted; a 409 (in use) sends the case back for review; a transient failure
  leaves the case approved for the task's retry, which starts again with the re-read.
"""

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from labgov.retention.models import Approval, Hold, RetentionCase, State
from labgov.retention.services import case_label, record, tell
from labgov.runpod.errors import RunpodConflict, RunpodError, RunpodNotFound
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import PodStatus


class Outcome:
    DELETED = "deleted"
    ALREADY_GONE = "already gone"
    HELD = "held"
    CHANGED = "changed"
    NOT_APPROVED = "not approved"


def _reread(client, case: RetentionCase) -> dict | None:
    """The resource as Runpod describes it now (None: Runpod no longer has it)."""
    known = case.last_known
    if case.resource.kind == ResourceKind.NETWORK_VOLUME:
        volume = next(
            (v for v in client.list_network_volumes() if v.id == case.resource.runpod_id), None
        )
        if volume is None:
            return None
        mounted = [
            p.id
            for p in client.list_pods()
            if p.status in (PodStatus.RUNNING, PodStatus.STARTING)
            and p.network_volume_id == volume.id
        ]
        return {
            "name": volume.name,
            "size_gb": volume.size_gb,
            "data_center": volume.data_center_id,
            "mounted_by": mounted,
        }
    try:
        pod = client.get_pod(case.resource.runpod_id)
    except RunpodNotFound:
        return None
    if pod.status == PodStatus.TERMINATED:
        return None
    return {
        "name": pod.name,
        "size_gb": pod.volume_disk_gb,
        "status": pod.status,
        "data_center": pod.data_center_id or known.get("data_center", ""),
    }


def changes(case: RetentionCase, now: dict) -> list[str]:
    """How the resource differs from what labgov knew when the deletion was requested."""
    known = case.last_known
    found = []
    if now.get("mounted_by"):
        found.append(f"a running pod mounts it now ({', '.join(now['mounted_by'])})")
    if now.get("status") and now["status"] != known.get("status"):
        found.append(f"it is {now['status'].lower()} now, not {str(known.get('status')).lower()}")
    if now["size_gb"] != known.get("size_gb"):
        found.append(f"resized from {known.get('size_gb')} GB to {now['size_gb']} GB")
    if now["name"] != known.get("name"):
        found.append(f"renamed from {known.get('name')!r} to {now['name']!r}")
    if known.get("data_center") and now["data_center"] != known.get("data_center"):
        found.append(f"moved from {known.get('data_center')} to {now['data_center']}")
    if case.resource.current_allocation_id != known.get("allocation_id"):
        found.append("re-attributed to other funding since the deletion was requested")
    return found


def _send_back(case: RetentionCase, why: str) -> None:
    before = case.state
    case.state = State.OPEN
    case.note = why[:500]
    case.updated_at = timezone.now()
    case.save(update_fields=["state", "note", "updated_at"])
    record(None, case, "return", before=before, note=why)
    tell(
        case,
        kind="retention.refused",
        subject=f"Not deleted: the {case_label(case)} needs another look",
        body=f"labgov did not delete the {case_label(case)}: {why}. The case is open again; "
        "request and approve its deletion afresh if it should still go.",
        key=f"refused:{timezone.now().isoformat()}",
    )


def _record_deleted(case: RetentionCase, *, already_gone: bool) -> None:
    now = timezone.now()
    resource = Resource.objects.select_for_update().get(pk=case.resource_id)
    resource.gone_at = resource.gone_at or now
    if resource.kind == ResourceKind.POD:
        resource.status = PodStatus.TERMINATED
        resource.cost_per_hr_usd = 0
    resource.status_changed_at = now
    resource.save(update_fields=["gone_at", "status", "cost_per_hr_usd", "status_changed_at"])
    before = case.state
    case.state = State.DELETED
    case.deleted_at = now
    case.updated_at = now
    case.save(update_fields=["state", "deleted_at", "updated_at"])
    approvers = list(
        Approval.objects.filter(case=case, requested_at=case.deletion_requested_at)
        .select_related("approver")
        .values_list("approver__username", flat=True)
    )
    record(
        None,
        case,
        "delete",
        before=before,
        note="Runpod no longer had it (already gone)." if already_gone else "Deleted on Runpod.",
        requested_by=case.deletion_requested_by.username if case.deletion_requested_by else None,
        approved_by=approvers,
        last_known=case.last_known,
    )
    tell(
        case,
        kind="retention.deleted",
        subject=f"Deleted: the {case_label(case)}",
        body=f"labgov deleted the {case_label(case)} on Runpod, as requested by "
        f"{case.deletion_requested_by} and approved by {', '.join(approvers)}.",
        key="deleted",
    )


def case_delete_carry_out(*, case_id: int, client_factory: Callable | None = None) -> str:
    """Delete an approved case's resource on Runpod and record it. Raises the client's
    transient errors (RunpodUnavailable) for the task to retry, with nothing recorded."""
    from labgov.runpod.services import write_client_for_account

    factory = client_factory or write_client_for_account
    with transaction.atomic():
        case = (
            RetentionCase.objects.select_for_update(of=("self",))
            .select_related("resource__account", "deletion_requested_by")
            .get(pk=case_id)
        )
        if case.state != State.DELETION_APPROVED:
            return Outcome.NOT_APPROVED
        if Hold.objects.active().filter(resource=case.resource).exists():
            # A hold wins whatever the case says (it is normally in the hold state already).
            case.state = State.HOLD
            case.save(update_fields=["state"])
            record(None, case, "hold", before=State.DELETION_APPROVED, note="Held: not deleted.")
            return Outcome.HELD
        with factory(case.resource.account) as client:
            now = _reread(client, case)
            if now is None:
                _record_deleted(case, already_gone=True)
                return Outcome.ALREADY_GONE
            changed = changes(case, now)
            if changed:
                _send_back(
                    case, "it changed since the deletion was requested: " + "; ".join(changed)
                )
                return Outcome.CHANGED
            try:
                if case.resource.kind == ResourceKind.NETWORK_VOLUME:
                    client.delete_network_volume(case.resource.runpod_id)
                else:
                    client.pod_action(case.resource.runpod_id, "terminate")
            except RunpodNotFound:
                _record_deleted(case, already_gone=True)
                return Outcome.ALREADY_GONE
            except RunpodConflict as exc:
                _send_back(case, f"Runpod refused: {exc.message}")
                return Outcome.CHANGED
            except RunpodError as exc:
                if exc.transient:
                    raise
                _send_back(case, f"Runpod refused: {exc.message}")
                return Outcome.CHANGED
        _record_deleted(case, already_gone=False)
        return Outcome.DELETED
