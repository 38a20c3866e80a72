"""Carrying out an approved deletion on Runpod, once, safely.

- Only a case in `deletion_approved` deletes, and the case row stays locked from the checks
  to the record, so a hold placed meanwhile waits and then finds the case decided: a hold
  that stands when the deletion begins always stops it.
- Before deleting, the resource is read again from Runpod and compared with what labgov knew
  when the deletion was requested; a change (running or mounted now, resized, renamed, moved,
  re-attributed) refuses the deletion and sends the case back for review.
- The deciders' lab must still pay: a volume re-attributed to another lab, or a requester or
  approver who no longer decides for the paying lab, refuses the deletion.
- Stopped pods included in the case (blockers.py) are terminated first, then the volume is
  deleted; a pod that mounts the volume and is not included, or runs, refuses it.
- Idempotent: a resource Runpod no longer has (404, before or after a timeout and retry) is
  recorded as deleted; a 409 (in use) sends the case back for review; a transient failure
  leaves the case approved for the task's retry, which starts again with the re-read.
- A refusal is never reported as success: the case keeps it in words (`refusal`), goes back
  to open, and the requester is told; the approvers see it on their notification of the case
  and are asked again, the refusal named, when the deletion is asked for again
  (services.concerned).
"""

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from labgov.audit.services import audit_record
from labgov.core import dataversion
from labgov.retention.blockers import bounded
from labgov.retention.models import Approval, Hold, RetentionCase, State
from labgov.retention.services import _who, case_label, record, sentence
from labgov.runpod.errors import RunpodConflict, RunpodError, RunpodNotFound
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.types import PodStatus


class Outcome:
    DELETED = "deleted"
    ALREADY_GONE = "already gone"
    HELD = "held"
    CHANGED = "changed"
    NOT_APPROVED = "not approved"
    REFUSED = "refused by Runpod"


def _terminate_included(client, case: RetentionCase, mounts: dict) -> None:
    """Terminate the stopped pods included in the case (checked stopped by the re-read just
    before), recording each; one Runpod no longer has counts as gone."""
    for pod in case.included_pods.order_by("pk"):
        if pod.gone_at is not None:
            continue
        if pod.runpod_id not in mounts:
            _record_pod_terminated(case, pod, already_gone=True)
            continue
        try:
            client.pod_action(pod.runpod_id, "terminate")
        except RunpodNotFound:
            _record_pod_terminated(case, pod, already_gone=True)
            continue
        _record_pod_terminated(case, pod, already_gone=False)


def _reread(client, case: RetentionCase) -> dict | None:
    """The resource as Runpod describes it now (None: Runpod no longer has it)."""
    known = case.last_known
    if case.resource.kind == ResourceKind.NETWORK_VOLUME:
        volume = next(
            (v for v in client.list_network_volumes() if v.id == case.resource.runpod_id), None
        )
        if volume is None:
            return None
        mounting = {
            p.id: p
            for p in client.list_pods()
            if p.network_volume_id == volume.id and p.status != PodStatus.TERMINATED
        }
        return {
            "name": volume.name,
            "size_gb": volume.size_gb,
            "data_center": volume.data_center_id,
            "mounted_by": [
                p.id
                for p in mounting.values()
                if p.status in (PodStatus.RUNNING, PodStatus.STARTING)
            ],
            "mounts": mounting,
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


def _pod_named(pod) -> str:
    return f"{bounded(pod.name or pod.id)} ({pod.id})"


def changes(case: RetentionCase, now: dict) -> list[str]:
    """How the resource, and who pays for it, differ from when the deletion was requested."""
    known = case.last_known
    found = []
    mounts = now.get("mounts", {})
    if now.get("mounted_by"):
        running = ", ".join(_pod_named(mounts[i]) if i in mounts else i for i in now["mounted_by"])
        found.append(f"a running pod mounts it now ({running})")
    included = set(case.included_pods.values_list("runpod_id", flat=True))
    found.extend(
        f"the stopped pod {_pod_named(pod)} mounts it, and Runpod refuses to delete a volume a "
        "pod mounts: include the pod in the case"
        for pod in mounts.values()
        if pod.status == PodStatus.EXITED and pod.id not in included
    )
    if now.get("status") and now["status"] != known.get("status"):
        found.append(f"it is {now['status'].lower()} now, not {str(known.get('status')).lower()}")
    if now["size_gb"] != known.get("size_gb"):
        found.append(f"resized from {known.get('size_gb')} GB to {now['size_gb']} GB")
    if now["name"] != known.get("name"):
        found.append(
            f"renamed from {bounded(str(known.get('name')))!r} to {bounded(now['name'])!r}"
        )
    if known.get("data_center") and now["data_center"] != known.get("data_center"):
        found.append(
            f"moved from {bounded(known.get('data_center'))} to {bounded(now['data_center'])}"
        )
    if case.resource.current_allocation_id != known.get("allocation_id"):
        found.append("re-attributed to other funding since the deletion was requested")
    found += _deciders_changed(case)
    return found


def _deciders_changed(case: RetentionCase) -> list[str]:
    """The lab whose admins asked and approved must still pay, and they still decide for it."""
    from labgov.retention.services import deciders_still_decide, paying_lab_id

    if paying_lab_id(case.resource) != case.lab_id:
        return ["another lab pays for it now: the deletion is that lab's to decide"]
    approvers = Approval.objects.filter(case=case, requested_at=case.deletion_requested_at)
    lost = deciders_still_decide(
        case, [case.deletion_requested_by_id, *approvers.values_list("approver_id", flat=True)]
    )
    return [f"{', '.join(lost)} no longer decide{'s' if len(lost) == 1 else ''} for its lab"] * (
        1 if lost else 0
    )


def _refusal_words(case: RetentionCase, exc: RunpodError) -> str:
    """Runpod's answer in words: what it said (bounded: it is Runpod's text), and the pods
    labgov knows that the answer names, by name and owner."""
    from labgov.retention.blockers import mounting_pods, pod_words

    # Runpod's words may end in a full stop of their own.
    said = bounded(exc.detail or exc.title or exc.message, 200).rstrip(". ")
    words = f"Runpod refused to delete it (HTTP {exc.status}): {said}"
    if case.resource.kind == ResourceKind.NETWORK_VOLUME:
        named = [p for p in mounting_pods(case.resource) if p.runpod_id in (exc.message or "")]
        if named:
            words += ". It means: " + "; ".join(f"the {pod_words(p)} mounts it" for p in named)
        if exc.status == 409:
            words += (
                ". Runpod deletes no volume that a pod mounts, running or stopped: stop the "
                "running ones, include the stopped ones in the case, and ask again"
            )
    return words


def _send_back(case: RetentionCase, why: str) -> None:
    before = case.state
    now = timezone.now()
    case.state = State.OPEN
    case.note = why[:500]
    case.refusal = why[:500]
    case.refused_at = now
    case.updated_at = now
    case.save(update_fields=["state", "note", "refusal", "refused_at", "updated_at"])
    record(
        None,
        case,
        "return",
        before=before,
        note=why,
        words=(
            "retention.refused",
            f"Not deleted: the {case_label(case)} needs another look",
            f"labgov did not delete the {case_label(case)}: {sentence(why)} The case is open "
            "again; request and approve its deletion afresh if it should still go.",
        ),
    )


def _record_pod_terminated(case: RetentionCase, pod: Resource, *, already_gone: bool) -> None:
    now = timezone.now()
    Resource.objects.filter(pk=pod.pk, gone_at__isnull=True).update(
        gone_at=now, status=PodStatus.TERMINATED, cost_per_hr_usd=0, status_changed_at=now
    )
    audit_record(
        actor=None,
        action="retention.delete_pod",
        target=pod,
        institution_id=case.institution_id,
        before={"status": pod.status},
        after={
            "status": PodStatus.TERMINATED,
            "case_id": case.pk,
            "volume": case.resource.runpod_id,
            "volume_disk_gb": pod.volume_disk_gb,
        },
        note="Runpod no longer had it (already gone)."
        if already_gone
        else "Terminated on Runpod with its disks: it mounted the volume the case deletes.",
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
    approvals = list(
        Approval.objects.filter(case=case, requested_at=case.deletion_requested_at)
        .select_related("approver")
        .order_by("pk")
    )
    approvers = [a.approver.username for a in approvals]
    approver_names = [_who(a.approver) for a in approvals]
    requester = case.deletion_requested_by
    record(
        None,
        case,
        "delete",
        before=before,
        note="Runpod no longer had it (already gone)." if already_gone else "Deleted on Runpod.",
        requested_by=requester.username if requester else None,
        approved_by=approvers,
        last_known=case.last_known,
        words=(
            "retention.deleted",
            f"Deleted: the {case_label(case)}",
            f"labgov deleted the {case_label(case)} on Runpod, as requested by "
            f"{_who(requester) if requester else 'nobody known'} and approved by "
            f"{', '.join(approver_names) or 'nobody known'}.",
        ),
    )


def _institution_of_case(*, case_id: int, **_):
    return RetentionCase.objects.filter(pk=case_id).values_list("institution_id", flat=True)


@dataversion.scoped(_institution_of_case)
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
                    case,
                    "read again from Runpod just before deleting, it differs from when the "
                    "deletion was requested: " + "; ".join(changed),
                )
                return Outcome.CHANGED
            try:
                if case.resource.kind == ResourceKind.NETWORK_VOLUME:
                    _terminate_included(client, case, now["mounts"])
                    client.delete_network_volume(case.resource.runpod_id)
                else:
                    client.pod_action(case.resource.runpod_id, "terminate")
            except RunpodNotFound:
                _record_deleted(case, already_gone=True)
                return Outcome.ALREADY_GONE
            except RunpodConflict as exc:
                _send_back(case, _refusal_words(case, exc))
                return Outcome.REFUSED
            except RunpodError as exc:
                if exc.transient:
                    raise
                _send_back(case, _refusal_words(case, exc))
                return Outcome.REFUSED
        _record_deleted(case, already_gone=False)
        return Outcome.DELETED
