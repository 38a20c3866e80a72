import datetime as dt

from django.db.models import Q
from django.utils import timezone

from labgov.accounts import access
from labgov.audit.models import AuditEvent
from labgov.funding.models import Allocation, FundingSource
from labgov.retention.models import Approval, Hold, RetentionCase
from labgov.retention.policies import Resolver
from labgov.retention.triggers import candidates


def cases_for(user):
    return (
        RetentionCase.objects.filter(access.retention_cases_q(user))
        .select_related(
            "resource__current_allocation__funding_source",
            "resource__current_allocation__user",
            "lab",
            "owner",
            "payer__funding_source",
            "payer__user",
            "funding_source",
        )
        .order_by("due_date", "id")
    )


def case_for_user(user, pk: int) -> RetentionCase:
    return access.get_or_404(
        cases_for(user).select_related("resource__account", "deletion_requested_by", "moved_to"),
        pk=pk,
    )


def payer_choices(case: RetentionCase):
    """Allocations that may pay for the case's storage: active today, of the case's lab (or
    of the institution for a case of no lab), their funding source not closed or ended."""
    today = timezone.now().date()
    allocations = Allocation.objects.filter(
        funding_source__institution_id=case.institution_id,
        start_date__lte=today,
        end_date__gte=today,
        funding_source__end_date__gte=today,
    ).exclude(funding_source__status=FundingSource.Status.CLOSED)
    if case.lab_id is not None:
        allocations = allocations.filter(funding_source__lab_id=case.lab_id)
    return allocations.select_related("funding_source", "user").order_by(
        "funding_source__name", "id"
    )


def standing_holds(case: RetentionCase) -> list[Hold]:
    return list(Hold.objects.filter(case=case, lifted_at__isnull=True).select_related("case"))


def case_history(case: RetentionCase):
    return (
        AuditEvent.objects.filter(Q(target_type="retention.retentioncase", target_id=str(case.pk)))
        .select_related("actor")
        .order_by("-created_at", "-id")
    )


def case_context(case: RetentionCase) -> dict:
    return {
        "holds": list(
            Hold.objects.filter(case=case).select_related(
                "payer__funding_source", "payer__user", "placed_by", "lifted_by"
            )
        ),
        "approvals": list(
            Approval.objects.filter(
                case=case, requested_at=case.deletion_requested_at
            ).select_related("approver")
        )
        if case.deletion_requested_at
        else [],
        "history": list(case_history(case)[:50]),
        "needed": Resolver(case.institution_id).for_lab(case.lab_id).approvers_required,
    }


def preview(institution_id: int, lab_id: int | None, today: dt.date | None = None) -> list[dict]:
    """What the lab's policy (or, for lab None, the default for the labs that follow it)
    would do today, volume by volume, whether or not it is turned on."""
    today = today or timezone.now().date()
    resolver = Resolver(institution_id)
    found = candidates(institution_id, resolver=resolver)
    if lab_id is None:
        found = [c for c in found if resolver.own(c.lab_id) is None or c.lab_id is None]
    else:
        found = [c for c in found if c.lab_id == lab_id]
    open_cases = dict(
        RetentionCase.objects.active()
        .filter(resource_id__in=[c.resource.pk for c in found])
        .values_list("resource_id", "state")
    )
    rows = []
    for c in sorted(found, key=lambda c: c.due_date):
        policy = resolver.for_lab(c.lab_id)
        days = (c.due_date - today).days
        rows.append(
            {
                "candidate": c,
                "days_left": days,
                "would_open": c.opens_on(policy) <= today,
                "case_state": open_cases.get(c.resource.pk, ""),
            }
        )
    return rows
