from django.db.models import F, Q, Sum
from django.db.models.functions import Coalesce

from labgov.accounts import access
from labgov.audit.models import AuditEvent
from labgov.core.money import ZERO
from labgov.funding.models import Allocation
from labgov.provisioning.assessment import default_policy
from labgov.provisioning.models import ProvisioningPolicy, ProvisioningRequest
from labgov.runpod.models import BillingRecord, BillingSource, GpuType, RunpodAccount
from labgov.utilization.selectors import usage_summaries


def policy_for_lab(lab) -> ProvisioningPolicy:
    """The lab's own policy, else its institution's default, else the built-in default."""
    policy = (
        ProvisioningPolicy.objects.filter(
            Q(lab=lab) | Q(lab__isnull=True, institution_id=lab.institution_id)
        )
        .order_by(F("lab").asc(nulls_last=True))
        .first()
    )
    return policy or default_policy(lab.institution_id)


def gpu_for(gpu_type_id: str) -> GpuType | None:
    if not gpu_type_id:
        return None
    return GpuType.objects.filter(gpu_id=gpu_type_id).first()


def gpu_catalog():
    return GpuType.objects.order_by("name")


def allocations_for_requester(user):
    """A person requests against their own allocations only, in labs they still belong to."""
    scope = access.scope_for(user)
    return (
        Allocation.objects.filter(
            user=user, funding_source__lab_id__in=scope.admin_labs | scope.member_labs
        )
        .select_related("user", "funding_source", "funding_source__lab")
        .order_by("end_date", "pk")
    )


def allocation_with_figures(allocation_id: int) -> Allocation:
    return (
        Allocation.objects.with_figures()
        .select_related("funding_source", "funding_source__lab")
        .get(pk=allocation_id)
    )


def requests_for_user(user):
    return (
        ProvisioningRequest.objects.visible_to(user)
        .select_related("lab", "requester", "allocation__funding_source")
        .order_by("-created_at", "-id")
    )


def review_queue_for_user(user):
    scope = access.scope_for(user)
    return (
        ProvisioningRequest.objects.filter(lab_id__in=scope.managed_labs)
        .select_related("lab", "requester", "allocation__funding_source", "first_approved_by")
        .order_by("submitted_at", "id")
    )


def request_for_user(user, pk: int) -> ProvisioningRequest:
    return access.get_or_404(
        ProvisioningRequest.objects.visible_to(user).select_related(
            "lab",
            "requester",
            "allocation__funding_source",
            "allocation__user",
            "first_approved_by",
            "decided_by",
            "runpod_account",
        ),
        pk=pk,
    )


def runpod_account_for_lab(lab) -> RunpodAccount | None:
    """The lab's own connected account if it has one, else an institution-wide one."""
    return (
        RunpodAccount.objects.filter(
            institution_id=lab.institution_id,
            is_active=True,
            billing_source=BillingSource.RUNPOD_API,
        )
        .filter(Q(lab=lab) | Q(lab__isnull=True))
        .order_by(F("lab").asc(nulls_last=True), "pk")
        .first()
    )


def runpod_accounts_for_lab(lab):
    return (
        RunpodAccount.objects.filter(
            institution_id=lab.institution_id,
            is_active=True,
            billing_source=BillingSource.RUNPOD_API,
        )
        .filter(Q(lab=lab) | Q(lab__isnull=True))
        .order_by(F("lab").asc(nulls_last=True), "name")
    )


def actual_usd_by_request(request_ids) -> dict[int, object]:
    """Each request's actual spend: the billing records of its resources, attributed to its
    allocation, from the hour it was approved on. One query for any number of requests."""
    link = "resource__provisioning_requests"
    rows = (
        BillingRecord.objects.filter(
            **{
                f"{link}__in": list(request_ids),
                "allocation_id": F(f"{link}__allocation_id"),
                "bucket_start__gte": F(f"{link}__spend_counted_from"),
            }
        )
        .values(f"{link}__pk")
        .annotate(total=Coalesce(Sum("total_usd"), ZERO))
    )
    return {row[f"{link}__pk"]: row["total"] for row in rows}


def request_history(request: ProvisioningRequest):
    return (
        AuditEvent.objects.filter(
            target_type=ProvisioningRequest._meta.label_lower, target_id=str(request.pk)
        )
        .select_related("actor")
        .order_by("created_at", "id")
    )


PAST_USAGE_LIMIT = 5


def past_utilization(user, gpu_type_id: str | None) -> list[dict]:
    """The person's own earlier pod requests that ran (on this GPU type when one is chosen,
    else any), with what their GPUs did: shown on the request form, so a request for 8 GPUs
    meets the 1 that was busy last time."""
    past = ProvisioningRequest.objects.filter(
        requester=user,
        deployment_model="pod",
        state=ProvisioningRequest.State.PROVISIONED,
    )
    if gpu_type_id:
        past = past.filter(gpu_type_id=gpu_type_id)
    past = list(past.order_by("-decided_at", "-pk").prefetch_related("resources")[:20])
    pods = {r.pk: req for req in past for r in req.resources.all() if r.kind == "pod"}
    usage = usage_summaries(pods)
    rows, seen = [], set()
    for resource_id, req in pods.items():
        summary = usage.get(resource_id)
        if summary is None or req.pk in seen:
            continue
        seen.add(req.pk)
        rows.append({"request": req, "usage": summary})
        if len(rows) == PAST_USAGE_LIMIT:
            break
    return rows
