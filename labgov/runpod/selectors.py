from django.db.models import Exists, OuterRef, Subquery

from labgov.accounts import access
from labgov.funding.models import Allocation
from labgov.runpod.models import Resource, ResourceKind, RunpodAccount, SyncRun


def accounts_for_user(user):
    runs = SyncRun.objects.filter(account=OuterRef("pk")).exclude(status=SyncRun.Status.SKIPPED)
    last_success = runs.filter(status=SyncRun.Status.SUCCEEDED).order_by("-started_at")
    last_run = runs.order_by("-started_at", "-id")
    return (
        RunpodAccount.objects.filter(access.runpod_accounts_q(user))
        .select_related("institution", "lab")
        .annotate(
            last_success_at=Subquery(last_success.values("finished_at")[:1]),
            last_status=Subquery(last_run.values("status")[:1]),
            last_error=Subquery(last_run.values("error")[:1]),
            running=Exists(runs.filter(status=SyncRun.Status.RUNNING)),
        )
        .order_by("name")
    )


def account_for_user(user, pk: int, *, manage: bool = False) -> RunpodAccount:
    account = access.get_or_404(
        RunpodAccount.objects.filter(access.runpod_accounts_q(user)).select_related(
            "institution", "lab", "cluster_limit_confirmed_by"
        ),
        pk=pk,
    )
    if manage:
        access.deny_unless(access.can_manage_runpod_account(user, account.institution_id))
    return account


def resources_for_user(user):
    return (
        Resource.objects.filter(access.resources_q(user))
        .select_related("account", "current_allocation__user", "current_allocation__funding_source")
        .distinct()
    )


def allocations_assignable_by(user):
    """Allocations a person may point spend at: those of the labs they manage."""
    scope = access.scope_for(user)
    return (
        Allocation.objects.filter(funding_source__lab_id__in=scope.managed_labs)
        .select_related("funding_source", "user")
        .order_by("funding_source__name", "pk")
    )


def unattributed_queue_for_user(user):
    """Resources with spend nobody owns, biggest first."""
    return (
        resources_for_user(user)
        .exclude(kind=ResourceKind.ENDPOINT)
        .filter(unattributed_usd__gt=0)
        .order_by("-unattributed_usd", "name")
    )
