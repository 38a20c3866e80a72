import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labgov.accounts import access
from labgov.alerts.models import Alert, Kind
from labgov.core.errors import DomainError
from labgov.dashboard.selectors.lab import lab_for_spend
from labgov.dashboard.tables import csv_response
from labgov.idle import endpoints, rightsizing, services
from labgov.idle.forms import (
    AllowStopForm,
    EndpointWorkersForm,
    KeepForm,
    NeverStopForm,
    PolicyForm,
)
from labgov.idle.models import AutoStopMark, EndpointWorkersChange, StopNotice
from labgov.idle.policy import container_disk_only
from labgov.runpod.models import Resource, ResourceKind
from labgov.utilization.selectors import recent_samples


def _notice_for(user, pk: int) -> StopNotice:
    """Owners see their pod's notices; the lab's admins and the institution's admins all of
    the lab's; anyone else gets a 404."""
    scope = access.scope_for(user)
    visible = Q(owner_id=scope.user_id) | Q(lab_id__in=scope.managed_labs)
    return access.get_or_404(
        StopNotice.objects.filter(visible).select_related("resource", "lab", "owner"), pk=pk
    )


@login_required
@require_GET
def notice_detail(request, pk: int):
    notice = _notice_for(request.user, pk)
    pod = notice.resource
    context = {
        "notice": notice,
        "pod": pod,
        "policy": services.policy_for(notice.lab),
        "samples": recent_samples(pod.pk, since=notice.idle_since, limit=12),
        "container_only": container_disk_only(pod),
        "is_owner": notice.owner_id == request.user.pk,
        "may_keep": services.may_keep_running(request.user, notice)
        and notice.state in (StopNotice.State.WARNED, StopNotice.State.KEPT),
        "owner_allowed": AutoStopMark.objects.filter(
            resource=pod, kind=AutoStopMark.Kind.OWNER_ALLOWS_STOP, ended_at__isnull=True
        ).exists(),
    }
    return render(request, "idle/notice.html", context)


@login_required
@require_POST
def notice_keep(request, pk: int):
    notice = _notice_for(request.user, pk)
    form = KeepForm(request.POST)
    hours = form.cleaned_data.get("hours") if form.is_valid() else None
    try:
        notice = services.stop_notice_keep(actor=request.user, notice=notice, hours=hours)
        messages.success(request, f"Kept running until {notice.kept_until:%Y-%m-%d %H:%M} UTC.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("idle:notice", pk=notice.pk)


@login_required
@require_POST
def notice_allow_stop(request, pk: int):
    notice = _notice_for(request.user, pk)
    form = AllowStopForm(request.POST)
    allowed = form.is_valid() and form.cleaned_data["allowed"]
    services.owner_allows_stop(actor=request.user, resource=notice.resource, allowed=allowed)
    return redirect("idle:notice", pk=notice.pk)


def _idle_alerts(lab):
    return list(
        Alert.objects.filter(lab=lab, kind=Kind.RUNNING_IDLE)
        .unresolved()
        .select_related("resource", "owner")
        .order_by("-monthly_cost_usd")[:20]
    )


@login_required
@require_GET
def lab_idle(request, lab_id: int):
    """The lab's pods running idle, its stop policy and open notices; also the idle panel of
    the lab's spend page (htmx)."""
    lab = lab_for_spend(request.user, lab_id)
    context = {
        "lab": lab,
        "alerts": _idle_alerts(lab),
        "policy": services.policy_for(lab),
        "may_manage": access.can_manage_lab(request.user, lab.pk),
    }
    if request.headers.get("HX-Request"):
        return render(request, "idle/lab.html#panel", context)
    context["notices"] = list(
        StopNotice.objects.filter(lab=lab).select_related("resource", "owner")[:50]
    )
    context["marks"] = list(
        AutoStopMark.objects.filter(
            resource__current_allocation__funding_source__lab=lab,
            kind=AutoStopMark.Kind.NEVER_STOP,
            ended_at__isnull=True,
        ).select_related("resource", "created_by")
    )
    context["never_stop_form"] = NeverStopForm(pods=rightsizing.lab_pods(lab).present())
    return render(request, "idle/lab.html", context)


def _managed_lab(user, lab_id: int):
    lab = lab_for_spend(user, lab_id)
    access.deny_unless(access.can_manage_lab(user, lab.pk))
    return lab


@login_required
@require_http_methods(["GET", "POST"])
def policy_edit(request, lab_id: int):
    lab = _managed_lab(request.user, lab_id)
    policy = services.policy_for(lab)
    initial = {
        f: getattr(policy, f) for f in ("enabled", "idle_hours", "warn_minutes", "keep_hours")
    }
    form = PolicyForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            services.autostop_policy_save(actor=request.user, lab=lab, values=form.cleaned_data)
            messages.success(request, "Auto-stop policy saved.")
            return redirect("idle:lab", lab_id=lab.pk)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
    return render(request, "idle/policy.html", {"lab": lab, "form": form})


@login_required
@require_POST
def never_stop(request, lab_id: int):
    lab = _managed_lab(request.user, lab_id)
    pods = rightsizing.lab_pods(lab).present()
    form = NeverStopForm(request.POST, pods=pods)
    if form.is_valid():
        until = dt.datetime.combine(form.cleaned_data["until"], dt.time(), tzinfo=dt.UTC)
        try:
            services.never_stop_mark(
                actor=request.user,
                resource=pods.get(pk=form.cleaned_data["pod"]),
                reason=form.cleaned_data["reason"],
                until=until,
            )
            messages.success(request, "The pod will not be stopped automatically.")
        except DomainError as exc:
            messages.error(request, exc.message)
    else:
        messages.error(request, "; ".join(e for errs in form.errors.values() for e in errs))
    return redirect("idle:lab", lab_id=lab.pk)


@login_required
@require_GET
def right_sizing(request, lab_id: int):
    lab = lab_for_spend(request.user, lab_id)
    table = rightsizing.suggestions_table(rightsizing.suggestions(lab, now=timezone.now()))
    if request.GET.get("format") == "csv":
        return csv_response(table.apply_sort(request.GET), f"labgov-right-sizing-lab-{lab.pk}.csv")
    return render(request, "idle/right_sizing.html", {"lab": lab, "table": table.bind(request.GET)})


def _endpoint_for(user, resource_id: int) -> Resource:
    """An endpoint its lab's admins (and the institution's) may change. Whoever sees it but
    may not change it (finance, the member who pays for it) gets a 403; anyone who cannot
    see it a 404, so its existence does not leak."""
    endpoint = access.get_or_404(
        Resource.objects.filter(access.resources_q(user), kind=ResourceKind.SERVERLESS)
        .select_related("account", "current_allocation__funding_source")
        .distinct(),
        pk=resource_id,
    )
    access.deny_unless(endpoints.may_change_workers(user, endpoint))
    return endpoint


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_workers(request, resource_id: int):
    endpoint = _endpoint_for(request.user, resource_id)
    details = endpoint.details or {}
    initial = {"workers_min": 0, "idle_timeout_seconds": details.get("idle_timeout_seconds")}
    form = EndpointWorkersForm(
        request.POST or None, initial=initial, workers_max=int(details.get("workers_max") or 0)
    )
    if request.method == "POST" and form.is_valid():
        try:
            change = endpoints.endpoint_workers_change(
                actor=request.user,
                resource=endpoint,
                workers_min=form.cleaned_data["workers_min"],
                idle_timeout_seconds=form.cleaned_data["idle_timeout_seconds"],
            )
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            if change.state == EndpointWorkersChange.State.PENDING:
                messages.success(request, "Asked: a second person approves the raise.")
            else:
                messages.success(request, f"Always-on workers set to {change.workers_min}.")
            return redirect("idle:endpoint_workers", resource_id=endpoint.pk)
    pending = EndpointWorkersChange.objects.filter(
        resource=endpoint, state=EndpointWorkersChange.State.PENDING
    ).select_related("requested_by")
    context = {"endpoint": endpoint, "details": details, "form": form, "pending": pending.first()}
    return render(request, "idle/endpoint_workers.html", context)


@login_required
@require_POST
def endpoint_change_decide(request, pk: int, decision: str):
    change = access.get_or_404(
        EndpointWorkersChange.objects.select_related("resource__account", "requested_by"), pk=pk
    )
    endpoint = _endpoint_for(request.user, change.resource_id)
    change.resource = endpoint
    decide = {
        "approve": endpoints.endpoint_workers_change_approve,
        "withdraw": endpoints.endpoint_workers_change_withdraw,
    }.get(decision)
    if decide is None:
        raise Http404
    try:
        decide(actor=request.user, change=change)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        done = "withdrawn" if decision == "withdraw" else "approved and applied on Runpod"
        messages.success(request, f"The change was {done}.")
    return redirect("idle:endpoint_workers", resource_id=endpoint.pk)
