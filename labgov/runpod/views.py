import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab
from labgov.core.errors import DomainError
from labgov.core.params import text_param
from labgov.runpod.forms import AccountForm, AssignForm, RuleForm
from labgov.runpod.history import with_billed_range
from labgov.runpod.models import AttributionRule, ResourceKind, RunpodAccount, SyncRun
from labgov.runpod.pricing import resource_storage_monthly_usd
from labgov.runpod.removal import (
    account_removal_request,
    account_removal_summary,
    account_removal_withdraw,
    account_remove,
)
from labgov.runpod.selectors import (
    account_for_user,
    accounts_for_user,
    allocations_assignable_by,
    resources_for_user,
    unattributed_queue_for_user,
)
from labgov.runpod.services import (
    account_confirm_cluster_limit,
    account_connect,
    account_set_active,
    account_set_manual_balance,
    account_test_connection,
    account_update,
    resource_assign,
    rule_accounts_q,
    rule_create,
    rule_deactivate,
    sync_request,
)
from labgov.runpod.tag_claims import claims_for as tag_claims_for
from labgov.runpod.tag_claims import tag_claim_confirm, tag_claim_reject


def _field_error(form, exc: DomainError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


@login_required
@require_http_methods(["GET"])
def account_list(request):
    scope = access.scope_for(request.user)
    accounts = list(accounts_for_user(request.user))
    hidden = 0
    if not accounts:
        # Connected, but not this person's to see (a member): say so, not "none".
        institutions = Lab.objects.filter(pk__in=scope.admin_labs | scope.member_labs).values(
            "institution_id"
        )
        hidden = RunpodAccount.objects.filter(institution_id__in=institutions).count()
    return render(
        request,
        "runpod/account_list.html",
        {
            "accounts": accounts,
            "hidden_accounts": hidden,
            "can_connect": bool(scope.admin_institutions),
        },
    )


@sensitive_post_parameters("api_key", "write_key")
@login_required
@require_http_methods(["GET", "POST"])
def account_new(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.admin_institutions))
    institution = (
        Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name").first()
    )
    form = AccountForm(
        request.POST or None, labs=Lab.objects.filter(institution=institution), key_required=True
    )
    if request.method == "POST" and form.is_valid():
        try:
            account = account_connect(
                actor=request.user, institution=institution, **form.cleaned_data
            )
        except DomainError as exc:
            _field_error(form, exc)
        else:
            messages.success(request, f"Connected {account}. Test the connection, then sync.")
            return redirect("runpod:account_detail", pk=account.pk)
    return render(
        request, "runpod/account_form.html", {"form": form, "title": "Connect a Runpod account"}
    )


@sensitive_post_parameters("api_key", "write_key")
@login_required
@require_http_methods(["GET", "POST"])
def account_edit(request, pk: int):
    account = account_for_user(request.user, pk, manage=True)
    form = AccountForm(
        request.POST or None,
        labs=Lab.objects.filter(institution_id=account.institution_id),
        key_required=False,
        has_write_key=bool(account.write_key_encrypted),
        initial={"name": account.name, "lab": account.lab_id, "base_url": account.base_url},
    )
    if request.method == "POST" and form.is_valid():
        try:
            account_update(actor=request.user, account=account, **form.cleaned_data)
        except DomainError as exc:
            _field_error(form, exc)
        else:
            messages.success(request, "Saved.")
            return redirect("runpod:account_detail", pk=account.pk)
    return render(
        request,
        "runpod/account_form.html",
        {"form": form, "title": f"Edit {account.name}", "account": account},
    )


@login_required
@require_POST
def account_active(request, pk: int):
    account = account_for_user(request.user, pk, manage=True)
    active = request.POST.get("active") == "1"
    account_set_active(actor=request.user, account=account, active=active)
    messages.success(
        request,
        f"{account.name} is on again: it is synced and may provision."
        if active
        else f"{account.name} is deactivated: it is no longer synced or used to provision;"
        " its history stays.",
    )
    return redirect("runpod:account_detail", pk=account.pk)


@login_required
@require_POST
def account_cluster_limit(request, pk: int):
    account = account_for_user(request.user, pk, manage=True)
    confirmed = request.POST.get("confirmed") == "1"
    try:
        account_confirm_cluster_limit(
            actor=request.user,
            account=account,
            confirmed=confirmed,
            note=request.POST.get("note", ""),
        )
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"Confirmed: Runpod raised {account.name}'s spending limit; clusters over 2 pods / "
            "16 GPUs on it may be approved."
            if confirmed
            else f"Withdrawn: clusters over 2 pods / 16 GPUs on {account.name} wait again.",
        )
    return redirect("runpod:account_detail", pk=account.pk)


@login_required
@require_http_methods(["GET", "POST"])
def account_remove_view(request, pk: int):
    account = account_for_user(request.user, pk, manage=True)
    if request.method == "POST":
        action = request.POST.get("action", "remove")
        step, done = REMOVAL_STEPS.get(action, REMOVAL_STEPS["remove"])
        try:
            step(actor=request.user, account=account)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, done.format(name=account.name))
            if action == "remove":
                return redirect("runpod:account_list")
        return redirect("runpod:account_remove", pk=account.pk)
    summary = account_removal_summary(account)
    return render(request, "runpod/account_remove.html", {"account": account, "summary": summary})


REMOVAL_STEPS = {
    "request": (
        account_removal_request,
        "Removal of {name} requested: another institution admin must carry it out.",
    ),
    "withdraw": (account_removal_withdraw, "The removal request for {name} is withdrawn."),
    "remove": (account_remove, "Removed {name} and everything it synced."),
}


def _status_context(account: RunpodAccount) -> dict:
    runs = list(account.sync_runs.order_by("-started_at", "-id")[:15])
    running = next((r for r in runs if r.status == SyncRun.Status.RUNNING), None)
    last_success = (
        account.sync_runs.filter(status=SyncRun.Status.SUCCEEDED).order_by("-started_at").first()
    )
    failures = [r for r in runs if r.status == SyncRun.Status.FAILED][:5]
    return {
        "account": account,
        "runs": runs,
        "running": running,
        "last_success": last_success,
        "failures": failures,
    }


def _requested_at(value: str) -> dt.datetime | None:
    if not value.isdigit() or len(value) > 12:
        return None
    try:
        return dt.datetime.fromtimestamp(int(value), tz=dt.UTC)
    except (ValueError, OverflowError, OSError):  # past the year 9999: not a request time
        return None


@login_required
@require_http_methods(["GET"])
def account_detail(request, pk: int):
    account = account_for_user(request.user, pk)
    if account.is_focus:
        return redirect("runpod:focus_source", pk=account.pk)
    context = _status_context(account)
    context["can_manage"] = access.can_manage_runpod_account(request.user, account.institution_id)
    requested = _requested_at(request.GET.get("requested", ""))
    if requested and context["running"] is None:
        # Asked for a moment ago and not running yet: wait for it, for half a minute at most
        # (a sync that finished meanwhile shows in the runs).
        started = any(r.started_at >= requested for r in context["runs"])
        if not started and timezone.now() - requested < dt.timedelta(seconds=30):
            context["starting"] = int(requested.timestamp())
    if request.htmx:
        return render(request, "runpod/account_detail.html#status", context)
    from labgov.runpod.reconcile import account_reconciliation

    context["reconciliation"] = account_reconciliation(account=account)
    return render(request, "runpod/account_detail.html", context)


@login_required
@require_POST
def account_balance(request, pk: int):
    from labgov.alerts.forms import BalanceForm

    account = account_for_user(request.user, pk, manage=True)
    form = BalanceForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect("runpod:account_detail", pk=account.pk)
    try:
        account_set_manual_balance(
            actor=request.user, account=account, balance_usd=form.cleaned_data["balance_usd"]
        )
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Balance saved; balance alerts use it from the next evaluation.")
    return redirect("runpod:account_detail", pk=account.pk)


@login_required
@require_POST
def account_test(request, pk: int):
    account = account_for_user(request.user, pk, manage=True)
    for result in account_test_connection(account=account):
        (messages.success if result.ok else messages.error)(request, result.message)
    return redirect("runpod:account_detail", pk=account.pk)


@login_required
@require_POST
def account_sync_now(request, pk: int):
    account = account_for_user(request.user, pk, manage=True)
    try:
        sync_request(actor=request.user, account=account)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Sync queued; its progress shows below.")
        # The page follows the sync from before it starts (a worker, or the embedded mode's
        # thread, picks it up a moment later).
        url = reverse("runpod:account_detail", args=[account.pk])
        return redirect(f"{url}?requested={int(timezone.now().timestamp())}")
    return redirect("runpod:account_detail", pk=account.pk)


INVENTORY_KINDS = [k for k in ResourceKind if k != ResourceKind.ENDPOINT]


@login_required
@require_http_methods(["GET"])
def resource_list(request):
    resources = resources_for_user(request.user)
    kind = request.GET.get("kind", "")
    if kind in ResourceKind.values:
        resources = resources.filter(kind=kind)
    else:
        resources = resources.exclude(kind=ResourceKind.ENDPOINT)
    show_gone = request.GET.get("gone") == "1"
    if not show_gone:
        resources = resources.filter(gone_at__isnull=True)
    if status := text_param(request.GET, "status").upper():
        resources = resources.filter(status=status)
    page = Paginator(with_billed_range(resources).order_by("kind", "name", "pk"), 100).get_page(
        request.GET.get("page")
    )
    for resource in page.object_list:
        resource.storage_monthly_usd = resource_storage_monthly_usd(resource)
    context = {
        "page": page,
        "kind": kind,
        "status": status,
        "show_gone": show_gone,
        "kinds": [(k.value, k.label) for k in INVENTORY_KINDS],
    }
    template = "runpod/resource_list.html#table" if request.htmx else "runpod/resource_list.html"
    return render(request, template, context)


@login_required
@require_http_methods(["GET"])
def unattributed_queue(request):
    scope = access.scope_for(request.user)
    if not (scope.managed_labs or scope.money_institutions):
        raise PermissionDenied(
            "The unattributed queue is for lab admins, finance and institution admins: "
            "your own resources are under Resources."
        )
    queue = unattributed_queue_for_user(request.user)
    page = Paginator(with_billed_range(queue), 50).get_page(request.GET.get("page"))
    # The choices are read once and reused in every row's form.
    choices = [(a.pk, str(a)) for a in allocations_assignable_by(request.user)]
    return render(
        request,
        "runpod/unattributed.html",
        {"page": page, "choices": choices, "can_assign": bool(choices)},
    )


@login_required
@require_POST
def resource_assign_view(request, pk: int):
    resource = access.get_or_404(resources_for_user(request.user), pk=pk)
    allocations = allocations_assignable_by(request.user)
    access.deny_unless(allocations.exists())
    form = AssignForm(request.POST, allocations=allocations)
    if form.is_valid():
        try:
            resource_assign(
                actor=request.user, resource=resource, allocation=form.cleaned_data["allocation"]
            )
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(
                request, f"{resource} is now paid by {form.cleaned_data['allocation']}."
            )
    else:
        messages.error(request, "Choose one of your labs' allocations.")
    if request.htmx:
        response = render(
            request, "runpod/assigned_row.html", {"resource": resource, "ok": form.is_valid()}
        )
        return response
    return redirect("runpod:unattributed")


@login_required
@require_http_methods(["GET", "POST"])
def rule_list(request):
    scope = access.scope_for(request.user)
    rules = AttributionRule.objects.filter(
        Q(account__institution_id__in=scope.money_institutions) | Q(lab_id__in=scope.managed_labs)
    ).select_related("account", "allocation__funding_source", "allocation__user", "lab")
    allocations = allocations_assignable_by(request.user)
    accounts = RunpodAccount.objects.filter(rule_accounts_q(request.user))
    form = None
    if allocations.exists() and accounts.exists():
        form = RuleForm(
            request.POST or None,
            accounts=accounts,
            allocations=allocations,
            may_backdate=bool(scope.admin_institutions),
        )
    if request.method == "POST":
        access.deny_unless(form is not None)
        if form.is_valid():
            try:
                rule_create(actor=request.user, **form.cleaned_data)
            except DomainError as exc:
                _field_error(form, exc)
            else:
                messages.success(request, "Rule added and applied.")
                return redirect("runpod:rules")
    return render(
        request,
        "runpod/rules.html",
        {
            "rules": rules.order_by("-is_active", "kind", "pattern"),
            "form": form,
            "managed_labs": scope.managed_labs,
        },
    )


@login_required
@require_POST
def rule_deactivate_view(request, pk: int):
    scope = access.scope_for(request.user)
    rule = access.get_or_404(
        AttributionRule.objects.filter(
            Q(account__institution_id__in=scope.money_institutions)
            | Q(lab_id__in=scope.managed_labs)
        ),
        pk=pk,
    )
    access.deny_unless(access.can_manage_lab(request.user, rule.lab_id))
    rule_deactivate(actor=request.user, rule=rule)
    messages.success(request, "Rule switched off; what it assigned stays assigned.")
    return redirect("runpod:rules")


@login_required
@require_http_methods(["GET"])
def tag_claims(request):
    claims = list(tag_claims_for(request.user))
    return render(request, "runpod/tag_claims.html", {"claims": claims})


@login_required
@require_POST
def tag_claim_decide(request, pk: int, decision: str):
    claim = access.get_or_404(tag_claims_for(request.user), pk=pk)
    act = {"confirm": tag_claim_confirm, "reject": tag_claim_reject}.get(decision)
    if act is None:
        raise Http404("No such decision.")
    try:
        act(actor=request.user, claim=claim)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        done = "now paid by" if decision == "confirm" else "stays unattributed, not paid by"
        messages.success(request, f"{claim.resource} {done} {claim.allocation}.")
    return redirect("runpod:tag_claims")
