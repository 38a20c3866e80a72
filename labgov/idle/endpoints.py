"""Changing a serverless endpoint's always-on workers from labgov: `workers.min` and the idle
timeout, through the connection's write key (PATCH /v2/serverless/{id}), audited.

Who: the endpoint's lab's admins and the institution's admins (whoever handles its alerts).
Fewer always-on workers or a shorter idle timeout spends less and is carried out at once. A
raise of `workers.min` adds its workers' cost every hour: when that added cost per month is
above the amount over which the lab's provisioning policy needs a second approver, the change
waits (an `EndpointWorkersChange`) until a different person approves it. Nothing here ever
deletes an endpoint.
"""

import logging
from collections.abc import Callable
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from labgov.accounts import access
from labgov.accounts.models import Lab
from labgov.alerts.findings import _lab_and_owner, usd
from labgov.alerts.serverless_rule import _pool_prices, catalog_worker_rate, workers_min_of
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.idle.models import EndpointWorkersChange
from labgov.provisioning.assessment import IDLE_TIMEOUT_MAX, IDLE_TIMEOUT_MIN
from labgov.provisioning.selectors import policy_for_lab
from labgov.runpod.errors import RunpodError
from labgov.runpod.models import Resource, ResourceKind

log = logging.getLogger(__name__)


def endpoint_lab_id(resource: Resource) -> int | None:
    return _lab_and_owner(resource)[0]


def may_change_workers(user, resource: Resource) -> bool:
    return resource.kind == ResourceKind.SERVERLESS and access.can_manage_alert(
        user, institution_id=resource.account.institution_id, lab_id=endpoint_lab_id(resource)
    )


def _validate(resource: Resource, workers_min: int, idle_timeout: int | None) -> None:
    if resource.kind != ResourceKind.SERVERLESS:
        raise DomainError("Only a serverless endpoint has workers to change.")
    if resource.gone_at is not None:
        raise DomainError("The endpoint is gone from Runpod; there is nothing to change.")
    workers_max = int((resource.details or {}).get("workers_max") or 0)
    if not isinstance(workers_min, int) or workers_min < 0:
        raise DomainError("The minimum of workers must be a whole number, 0 or more.")
    if workers_min > workers_max:
        raise DomainError(
            f"The minimum of workers ({workers_min}) cannot be above the endpoint's maximum "
            f"({workers_max})."
        )
    if idle_timeout is not None and (resource.details or {}).get("scaling_type") == (
        "REQUEST_COUNT"
    ):
        raise DomainError(
            "The endpoint scales on its request count, which has no idle timeout on Runpod: "
            "leave the idle timeout empty, or change only the minimum of workers."
        )
    if idle_timeout is not None and (
        not isinstance(idle_timeout, int)
        or not IDLE_TIMEOUT_MIN <= idle_timeout <= IDLE_TIMEOUT_MAX
    ):
        raise DomainError(
            f"The idle timeout must be {IDLE_TIMEOUT_MIN} to {IDLE_TIMEOUT_MAX} seconds, "
            f"not {idle_timeout}."
        )


def added_monthly_usd(resource: Resource, workers_min: int) -> Decimal:
    """What the raise adds per month at the catalog's serverless price (0 for a lowering)."""
    added = workers_min - workers_min_of(resource)
    if added <= 0:
        return Decimal(0)
    rate = catalog_worker_rate(resource, _pool_prices())
    return added * rate * settings.LABGOV_HOURS_PER_MONTH


def endpoint_workers_change(
    *,
    actor,
    resource: Resource,
    workers_min: int,
    idle_timeout_seconds: int | None = None,
    client_factory: Callable | None = None,
) -> EndpointWorkersChange:
    """Ask for the change; carried out at once unless it needs a second person (then it is
    left pending, audited, for another admin to approve)."""
    access.deny_unless(may_change_workers(actor, resource))
    _validate(resource, workers_min, idle_timeout_seconds)
    before = workers_min_of(resource)
    added = added_monthly_usd(resource, workers_min)
    raising = workers_min > before
    with transaction.atomic():
        if EndpointWorkersChange.objects.filter(
            resource=resource, state=EndpointWorkersChange.State.PENDING
        ).exists():
            raise DomainError(
                "A change of this endpoint's workers already waits for a second person; "
                "approve or withdraw it first."
            )
        change = EndpointWorkersChange.objects.create(
            resource=resource,
            workers_min_before=before,
            workers_min=workers_min,
            idle_timeout_seconds=idle_timeout_seconds,
            added_monthly_usd=added,
            requested_by=actor,
        )
        if raising and _second_needed(resource, added):
            audit_record(
                actor=actor,
                action="endpoint.workers_change_request",
                target=resource,
                institution_id=resource.account.institution_id,
                before={"workers_min": before},
                after={
                    "workers_min": workers_min,
                    "idle_timeout_seconds": idle_timeout_seconds,
                    "added_monthly_usd": str(added.quantize(Decimal("0.01"))),
                    "change_id": change.pk,
                },
                note=f"Raising always-on workers adds {usd(added)}/month: a second person "
                "approves it.",
            )
            return change
    return _apply(change, actor=actor, approver=None, client_factory=client_factory)


def _second_needed(resource: Resource, added: Decimal) -> bool:
    lab_id = endpoint_lab_id(resource)
    if lab_id is None:
        return True
    limit = policy_for_lab(Lab.objects.get(pk=lab_id)).second_approval_over_usd
    # A raise whose cost the catalog cannot tell (added 0) counts as above any amount named.
    return limit is not None and (added > limit or added == 0)


def endpoint_workers_change_approve(
    *, actor, change: EndpointWorkersChange, client_factory: Callable | None = None
) -> EndpointWorkersChange:
    resource = change.resource
    access.deny_unless(may_change_workers(actor, resource))
    if change.state != EndpointWorkersChange.State.PENDING:
        raise DomainError(f"The change is {change.get_state_display().lower()}, not pending.")
    if change.requested_by_id == actor.pk:
        raise DomainError(
            "You asked for this change yourself: another lab admin or an institution admin "
            "approves it."
        )
    _validate(resource, change.workers_min, change.idle_timeout_seconds)
    return _apply(change, actor=actor, approver=actor, client_factory=client_factory)


@transaction.atomic
def endpoint_workers_change_withdraw(*, actor, change: EndpointWorkersChange):
    access.deny_unless(may_change_workers(actor, change.resource))
    if change.state != EndpointWorkersChange.State.PENDING:
        raise DomainError(f"The change is {change.get_state_display().lower()}, not pending.")
    change.state = EndpointWorkersChange.State.WITHDRAWN
    change.decided_by, change.decided_at = actor, timezone.now()
    change.save(update_fields=["state", "decided_by", "decided_at"])
    audit_record(
        actor=actor,
        action="endpoint.workers_change_withdraw",
        target=change.resource,
        institution_id=change.resource.account.institution_id,
        after={"change_id": change.pk},
    )
    return change


def _apply(change, *, actor, approver, client_factory) -> EndpointWorkersChange:
    """PATCH Runpod outside any transaction (a network call), then record what it answered.
    Runpod's refusal is a DomainError in words; the change then stays as it was (a pending
    one pending; an immediate one is not kept)."""
    from labgov.runpod.services import write_client_for_account

    resource = change.resource
    factory = client_factory or write_client_for_account
    try:
        with factory(resource.account) as client:
            endpoint = client.update_endpoint_workers(
                resource.runpod_id,
                workers_min=change.workers_min,
                idle_timeout_seconds=change.idle_timeout_seconds,
            )
    except RunpodError as exc:
        if approver is None:
            change.delete()
        raise DomainError(f"Runpod did not change the endpoint's workers: {exc}") from exc
    with transaction.atomic():
        locked = Resource.objects.select_for_update().get(pk=resource.pk)
        details = dict(locked.details or {})
        before = {
            "workers_min": details.get("workers_min"),
            "idle_timeout_seconds": details.get("idle_timeout_seconds"),
        }
        details.update(
            workers_min=endpoint.workers_min,
            workers_max=endpoint.workers_max,
            idle_timeout_seconds=endpoint.idle_timeout_seconds,
        )
        locked.details = details
        locked.save(update_fields=["details"])
        change.state = EndpointWorkersChange.State.APPLIED
        change.decided_by = approver or actor
        change.decided_at = timezone.now()
        change.save(update_fields=["state", "decided_by", "decided_at"])
        who = {"requested_by": change.requested_by.username}
        if approver is not None:
            who["approved_by"] = approver.username
        audit_record(
            actor=actor,
            action="endpoint.workers_change",
            target=locked,
            institution_id=locked.account.institution_id,
            before=before,
            after={
                "workers_min": endpoint.workers_min,
                "idle_timeout_seconds": endpoint.idle_timeout_seconds,
                "change_id": change.pk,
                **who,
            },
            note=f"Always-on workers {before['workers_min']} → {endpoint.workers_min}.",
        )
    resource.details = details
    return change
