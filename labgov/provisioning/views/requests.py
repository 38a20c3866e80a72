from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.models import today_utc
from labgov.alerts.balance import runways
from labgov.core.errors import DomainError
from labgov.core.params import int_param
from labgov.provisioning.accuracy import NOTHING, accuracy_of, actual_by_request, past_accuracy
from labgov.provisioning.assessment import estimate_request, findings
from labgov.provisioning.forms import DenyForm, MarkProvisionedForm, RequestForm
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.selectors import (
    allocation_with_figures,
    allocations_for_requester,
    gpu_catalog,
    past_utilization,
    policy_for_lab,
    request_for_user,
    request_history,
    requests_for_user,
    runpod_account_for_lab,
    runpod_accounts_for_lab,
)
from labgov.provisioning.services import (
    assess,
    provisioning_retry,
    request_cancel,
    request_mark_provisioned,
    request_save,
    request_submit,
)
from labgov.provisioning.views.common import apply_error, back_to

S = ProvisioningRequest.State


@login_required
@require_GET
def request_list(request):
    requests = requests_for_user(request.user)
    state = request.GET.get("state", "")
    if state in S.values:
        requests = requests.filter(state=state)
    mine = request.GET.get("mine") == "1"
    if mine:
        requests = requests.filter(requester=request.user)
    lab = int_param(request.GET, "lab")
    if lab is not None:
        requests = requests.filter(lab_id=lab)
    page = Paginator(requests, 50).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    actual = actual_by_request(r.pk for r in page.object_list)
    for r in page.object_list:
        r.actual = actual.get(r.pk, NOTHING)
    context = {
        "page": page,
        "accuracy": accuracy_of(page.object_list, actual),
        "lab": "" if lab is None else str(lab),
        "state": state,
        "mine": mine,
        "states": S.choices,
        "can_request": allocations_for_requester(request.user).exists(),
    }
    template = "provisioning/list.html#table" if request.htmx else "provisioning/list.html"
    return render(request, template, context)


def _form(request, *, initial=None):
    return RequestForm(
        request.POST or None,
        allocations=allocations_for_requester(request.user),
        gpus=list(gpu_catalog()),
        initial=initial,
    )


def _save_and_maybe_submit(request, form, req=None):
    """Save the draft; submit it when asked. Returns the request, or None with errors on the
    form."""
    try:
        req = request_save(
            actor=request.user,
            allocation=form.cleaned_data["allocation"],
            values=form.values(),
            req=req,
        )
    except DomainError as exc:
        apply_error(form, exc)
        return None
    if "submit" not in request.POST:
        messages.success(request, "Draft saved.")
        return req
    try:
        req = request_submit(actor=request.user, req=req)
    except DomainError as exc:
        reasons = getattr(exc, "reasons", [exc.message])
        for reason in reasons:
            messages.error(request, reason)
        messages.warning(request, "The draft is saved; fix the above, then submit it.")
        return req
    if req.state == S.SUBMITTED:
        messages.success(request, "Submitted: your lab admins have been notified.")
    else:
        messages.success(request, "Approved automatically under the lab's policy.")
    return req


@login_required
@require_http_methods(["GET", "POST"])
def request_new(request):
    access.deny_unless(allocations_for_requester(request.user).exists())
    form = _form(request)
    if request.method == "POST" and form.is_valid():
        req = _save_and_maybe_submit(request, form)
        if req is not None:
            return redirect("provisioning:detail", pk=req.pk)
    return render(
        request,
        "provisioning/form.html",
        {"form": form, "title": "Request capacity", **_estimate_context(request, form)},
    )


@login_required
@require_http_methods(["GET", "POST"])
def request_edit(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(req.requester_id == request.user.pk)
    if req.state != S.DRAFT:
        messages.error(request, "Only drafts can be changed.")
        return redirect("provisioning:detail", pk=req.pk)
    form = _form(request, initial=RequestForm.initial_from(req))
    if request.method == "POST" and form.is_valid():
        saved = _save_and_maybe_submit(request, form, req=req)
        if saved is not None:
            return redirect("provisioning:detail", pk=saved.pk)
    return render(
        request,
        "provisioning/form.html",
        {"form": form, "title": f"Edit request #{req.pk}", "req": req}
        | _estimate_context(request, form),
    )


def _estimate_context(request, form) -> dict:
    """The live estimate of whatever the form holds now (valid fields only)."""
    if not form.is_bound:
        return {"estimate": None, "past_usage": past_utilization(request.user, None)}
    form.is_valid()
    # A value the form refuses is shown beside its field, with its bound; the estimate waits
    # for it rather than counting its default (-3 GPUs is not 1 GPU). A field left empty is
    # not an error until the form is sent.
    invalid = {
        name: [e for e in errors if e.code != "required"]
        for name, errors in form.errors.as_data().items()
        if name != "__all__"
    }
    invalid = {name: errors for name, errors in invalid.items() if errors}
    if invalid:
        return {
            "estimate": None,
            "invalid_fields": [(form[name], errors) for name, errors in invalid.items()],
            "shown_errors": {
                name: [m for e in errs for m in e.messages] for name, errs in invalid.items()
            },
        }
    values = form.values()
    req = ProvisioningRequest(requester=request.user, **values)
    allocation = form.cleaned_data.get("allocation")
    past_usage = past_utilization(request.user, form.cleaned_data.get("gpu_type_id"))
    if allocation is None:
        return {"estimate": None, "past_usage": past_usage}
    if not hasattr(allocation, "remaining_usd"):  # the live estimate's choices carry it
        allocation = allocation_with_figures(allocation.pk)
    req.allocation = allocation
    req.lab = allocation.funding_source.lab
    policy = policy_for_lab(req.lab)
    gpu = form.gpus_by_id.get(req.gpu_type_id)  # the catalog the form has read already
    estimate = estimate_request(req, gpu)
    found = findings(
        req,
        policy=policy,
        gpu=gpu,
        estimate=estimate,
        allocation=allocation,
        today=timezone.now().date(),
    )
    return {
        "estimate": estimate,
        "shown_errors": {},
        "gpu_count": req.gpu_count,
        "findings": found,
        "policy": policy,
        "gpu": gpu,
        "allocation": allocation,
        "past_usage": past_usage,
    }


@login_required
@require_GET
def estimate(request):
    """The estimate fragment for the request form, recomputed as its fields change. It
    answers every few keystrokes, so it reads each thing once: the allocation chosen with its
    figures (the choice itself), the GPU from the catalog the form reads."""
    form = RequestForm(
        request.GET,
        allocations=allocations_for_requester(request.user).with_figures(),
        gpus=list(gpu_catalog()),
    )
    context = _estimate_context(request, form)
    # The fields' errors travel with the estimate and replace those beside the fields.
    shown = context.get("shown_errors", {})
    context["error_slots"] = [(form[name].auto_id, shown.get(name, [])) for name in form.fields]
    return render(request, "provisioning/form.html#estimate", context)


@login_required
@require_GET
def request_detail(request, pk: int):
    req = request_for_user(request.user, pk)
    can_review = access.can_review_requests(request.user, req.lab_id)
    is_requester = req.requester_id == request.user.pk
    context = {
        "req": req,
        "actual": actual_by_request([req.pk]).get(req.pk, NOTHING),
        "history": request_history(req),
        "can_review": can_review,
        "is_requester": is_requester,
        "deny_form": DenyForm(),
        "can_act": is_requester or can_review,
        "resources": req.resources.select_related("current_allocation"),
    }
    if req.state in (S.DRAFT, S.SUBMITTED):
        policy, _gpu, estimate_, found = assess(
            req,
            allocation=allocation_with_figures(req.allocation_id),
            price=None if req.state == S.DRAFT else req.gpu_price_per_hr_usd,
        )
        context.update(estimate=estimate_, findings=found, policy=policy)
    if can_review and req.state == S.SUBMITTED:
        context.update(_balance_runway(req.lab))
        context["accuracy"] = past_accuracy(req)
    if can_review and req.state in (S.APPROVED, S.FAILED) and req.deployment_model != "pod":
        context["mark_form"] = MarkProvisionedForm(accounts=runpod_accounts_for_lab(req.lab))
    return render(request, "provisioning/detail.html", context)


def _balance_runway(lab) -> dict:
    """How long the Runpod balance lasts, for an approver about to approve new spend."""
    account = runpod_account_for_lab(lab)
    if account is None:
        return {}
    return {"runway_account": account, "runway": runways([account], today_utc()).get(account.pk)}


@login_required
@require_POST
def request_submit_view(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(req.requester_id == request.user.pk)
    try:
        request_submit(actor=request.user, req=req)
    except DomainError as exc:
        for reason in getattr(exc, "reasons", [exc.message]):
            messages.error(request, reason)
    else:
        messages.success(request, "Submitted.")
    return redirect("provisioning:detail", pk=req.pk)


@login_required
@require_POST
def request_cancel_view(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(
        req.requester_id == request.user.pk or access.can_review_requests(request.user, req.lab_id)
    )
    try:
        request_cancel(actor=request.user, req=req, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Cancelled; any money it held is released.")
    return back_to(request, req)


@login_required
@require_POST
def request_retry_view(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(
        req.requester_id == request.user.pk or access.can_review_requests(request.user, req.lab_id)
    )
    try:
        provisioning_retry(actor=request.user, req=req)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            "Retrying: labgov looks for what the last attempt may have made first, then "
            "creates it.",
        )
    return redirect("provisioning:detail", pk=req.pk)


@login_required
@require_http_methods(["GET", "POST"])
def request_mark_provisioned_view(request, pk: int):
    req = request_for_user(request.user, pk)
    access.deny_unless(access.can_review_requests(request.user, req.lab_id))
    form = MarkProvisionedForm(request.POST or None, accounts=runpod_accounts_for_lab(req.lab))
    if request.method == "POST" and form.is_valid():
        try:
            request_mark_provisioned(actor=request.user, req=req, **form.cleaned_data)
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, "Marked provisioned; its spend is attributed from now on.")
            return redirect("provisioning:detail", pk=req.pk)
    return render(request, "provisioning/mark_provisioned.html", {"req": req, "form": form})
