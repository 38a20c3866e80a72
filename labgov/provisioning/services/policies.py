from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab
from labgov.audit.services import audit_record
from labgov.core.errors import DomainError
from labgov.core.snapshots import snapshot
from labgov.provisioning.models import Cloud, DeploymentModel, ProvisioningPolicy

POLICY_FIELDS = (
    "allowed_models",
    "allowed_gpu_types",
    "allowed_clouds",
    "max_gpus",
    "max_usd_per_hour",
    "max_request_usd",
    "auto_approve_under_usd",
    "second_approval_over_usd",
)


def _money(value, field: str, *, required: bool = False) -> Decimal | None:
    if value is None:
        if required:
            raise DomainError("Give an amount (0 for none).", field=field)
        return None
    if value < 0:
        raise DomainError("Amounts cannot be negative.", field=field)
    if value != value.quantize(Decimal("0.01")):
        raise DomainError("Amounts are in whole cents.", field=field)
    return value


def _validate(values: dict) -> dict:
    models = list(dict.fromkeys(values.get("allowed_models") or []))
    if not models:
        raise DomainError("Allow at least one deployment model.", field="allowed_models")
    if set(models) - set(DeploymentModel.values):
        raise DomainError("Unknown deployment model.", field="allowed_models")
    clouds = list(dict.fromkeys(values.get("allowed_clouds") or []))
    if not clouds:
        raise DomainError("Allow at least one cloud.", field="allowed_clouds")
    if set(clouds) - set(Cloud.values):
        raise DomainError("Unknown cloud.", field="allowed_clouds")
    max_gpus = values.get("max_gpus")
    if max_gpus is not None and max_gpus < 1:
        raise DomainError("The maximum is at least 1 GPU.", field="max_gpus")
    auto = _money(values.get("auto_approve_under_usd"), "auto_approve_under_usd", required=True)
    second = _money(values.get("second_approval_over_usd"), "second_approval_over_usd")
    if second is not None and auto > second:
        raise DomainError(
            "The auto-approval amount cannot be above the second-approval amount.",
            field="auto_approve_under_usd",
        )
    return {
        "allowed_models": models,
        "allowed_gpu_types": sorted(set(values.get("allowed_gpu_types") or [])),
        "allowed_clouds": clouds,
        "max_gpus": max_gpus,
        "max_usd_per_hour": _money(values.get("max_usd_per_hour"), "max_usd_per_hour"),
        "max_request_usd": _money(values.get("max_request_usd"), "max_request_usd"),
        "auto_approve_under_usd": auto,
        "second_approval_over_usd": second,
    }


@transaction.atomic
def policy_save(
    *, actor, institution: Institution, lab: Lab | None, values: dict
) -> ProvisioningPolicy:
    """Set a lab's policy (lab given) or the institution's default (lab None). Audited."""
    unknown = set(values) - set(POLICY_FIELDS)
    if unknown:
        raise TypeError(f"policy_save got unknown fields {sorted(unknown)}")
    if lab is not None and lab.institution_id != institution.pk:
        raise DomainError("The lab belongs to another institution.")
    if actor is not None and not access.can_edit_policy(
        actor, institution_id=institution.pk, lab_id=lab.pk if lab else None
    ):
        raise DomainError("Only the lab's admins and the institution's admins set its policy.")
    clean = _validate(values)
    ceiling = Institution.objects.get(pk=institution.pk).auto_approve_ceiling_usd
    if clean["auto_approve_under_usd"] > ceiling:
        raise DomainError(
            f"The auto-approval amount cannot be above {institution}'s ceiling of "
            f"${ceiling:,.2f} (set by the institution's admins).",
            field="auto_approve_under_usd",
        )
    policy = (
        ProvisioningPolicy.objects.select_for_update()
        .filter(institution=institution, lab=lab)
        .first()
    )
    before = snapshot(policy, list(POLICY_FIELDS)) if policy else None
    if policy is None:
        policy = ProvisioningPolicy(institution=institution, lab=lab)
    elif all(getattr(policy, name) == value for name, value in clean.items()):
        return policy
    for name, value in clean.items():
        setattr(policy, name, value)
    after = snapshot(policy, list(POLICY_FIELDS))
    policy.updated_at = timezone.now()
    policy.updated_by = actor
    policy.save()
    audit_record(
        actor=actor,
        action="provisioning_policy.create" if before is None else "provisioning_policy.update",
        target=policy,
        institution_id=institution.pk,
        before=before,
        after=after,
    )
    return policy
