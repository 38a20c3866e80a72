from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from labgov.accounts import access
from labgov.accounts.models import Lab, today_utc
from labgov.alerts.balance import runways
from labgov.core.errors import DomainError
from labgov.core.params import int_param, text_param
from labgov.provisioning.forms import DenyForm
from labgov.provisioning.models import DeploymentModel, ProvisioningRequest
from labgov.provisioning.selectors import request_for_user, review_queue_for_user
from labgov.provisioning.services import request_approve, request_deny
from labgov.provisioning.views.common import back_to
from labgov.runpod.models import RunpodAccount

S = ProvisioningRequest.State


@login_required
@require_GET
def review_queue(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.managed_labs))
    queue = review_queue_for_user(request.user)
    state = request.GET.get("state", S.SUBMITTED)
    if state in S.values:
        queue = queue.filter(state=state)
    lab = int_param(request.GET, "lab")
    if lab is not None:
        queue = queue.filter(lab_id=lab)
    model = request.GET.get("model", "")
    if model in DeploymentModel.values:
        queue = queue.filter(deployment_model=model)
    if who := text_param(request.GET, "who"):
        queue = queue.filter(requester__username__icontains=who)
    page = Paginator(queue, 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "state": state,
        "lab": "" if lab is None else str(lab),
        "model": model,
        "who": who,
        "states": S.choices,
        "models": DeploymentModel.choices,
        "labs": Lab.objects.filter(pk__in=scope.managed_labs).order_by("name"),
        "deny_form": DenyForm(),
    }
    if request.htmx:
        return render(request, "provisioning/review.html#table", context)
    context["runways"] = _balance_runways(scope.managed_labs)
    return render(request, "provisioning/review.html", context)


def _balance_runways(lab_ids) -> list:
    """How long each Runpod account the approver's labs spend on lasts, shown before they
    approve new spend: their labs' own accounts and their institutions' shared ones."""
    institutions = Lab.objects.filter(pk__in=lab_ids).values("institution_id")
    accounts = list(
        RunpodAccount.objects.filter(
            institution_id__in=institutions, is_active=True, billing_source="runpod_api"
        )
        .filter(Q(lab_id__in=lab_ids) | Q(lab__isnull=True))
        .defer("api_key_encrypted")
        .order_by("name")
    )
    known = runways(accounts, today_utc())
    return [(account, known[account.pk]) for account in accounts if account.pk in known]


def _decided(request, req):
    """The re-rendered queue row for htmx, else back where the form was."""
    if request.htmx:
        req = request_for_user(request.user, req.pk)
        return render(request, "provisioning/review.html#row", {"r": req, "deny_form": DenyForm()})
    return back_to(request, req)


@login_required
@require_POST
def request_approve_view(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(access.can_review_requests(request.user, req.lab_id))
    try:
        req = request_approve(actor=request.user, req=req)
    except DomainError as exc:
        for reason in getattr(exc, "reasons", [exc.message]):
            messages.error(request, reason)
    else:
        if req.state == S.SUBMITTED:
            messages.success(request, f"#{req.pk}: first approval recorded; a second is needed.")
        else:
            messages.success(request, f"#{req.pk} approved; its estimate is committed.")
    return _decided(request, req)


@login_required
@require_POST
def request_deny_view(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(access.can_review_requests(request.user, req.lab_id))
    form = DenyForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"#{req.pk}: say why the request is denied.")
        return _decided(request, req)
    try:
        request_deny(actor=request.user, req=req, reason=form.cleaned_data["reason"])
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"#{req.pk} denied.")
    return _decided(request, req)
