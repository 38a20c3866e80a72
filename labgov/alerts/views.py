import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab, Membership
from labgov.alerts import selectors, services
from labgov.alerts.config import Resolver
from labgov.alerts.forms import AlertFilterForm, AlertSettingsForm, ResolveForm, SnoozeForm
from labgov.alerts.models import AlertSettings, Kind
from labgov.audit.models import AuditEvent
from labgov.core.errors import DomainError
from labgov.core.periods import UTC
from labgov.dashboard.tables import DATE, MONEY, Column, Row, Table, csv_response
from labgov.runpod.selectors import resources_for_user


def _apply_error(form, exc: DomainError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


@login_required
@require_GET
def alert_list(request):
    form = AlertFilterForm(request.GET or None, labs=selectors.labs_for_filter(request.user))
    filters = form.cleaned_data if form.is_valid() else {}
    alerts = selectors.alert_list(
        request.user,
        state=filters.get("state") or "active",
        kind=filters.get("kind") or "",
        severity=filters.get("severity") or "",
        lab=filters.get("lab"),
    )
    if request.GET.get("format") == "csv":
        return csv_response(alerts_table(alerts), "labgov-alerts.csv")
    page = Paginator(alerts, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("format", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    if request.headers.get("HX-Request"):
        return render(request, "alerts/list.html#results", context)
    return render(request, "alerts/list.html", context)


def alerts_table(alerts) -> Table:
    """The alert list as a table, for its CSV download (with the page's filters)."""
    columns = [
        Column("severity", "Severity"),
        Column("kind", "Kind"),
        Column("title", "Alert"),
        Column("subject", "About"),
        Column("lab", "Lab"),
        Column("owner", "Owner"),
        Column("monthly", "Cost per month (USD)", MONEY),
        Column("state", "State"),
        Column("first_seen", "First seen (UTC)", DATE),
        Column("last_seen", "Last seen (UTC)", DATE),
    ]
    rows = [
        Row(
            [
                a.get_severity_display(),
                a.get_kind_display(),
                a.title,
                a.subject_label,
                a.lab.name if a.lab else "",
                str(a.owner) if a.owner else "",
                a.monthly_cost_usd,
                a.state_words(),
                a.first_seen_at,
                a.last_seen_at,
            ]
        )
        for a in alerts.iterator(chunk_size=500)
    ]
    return Table("alerts", "Alerts", columns, rows)


@login_required
@require_GET
def lab_panel(request, lab_id: int):
    """The lab's alerts needing attention, worst first: a panel of the lab's spend page,
    for those who may see that page."""
    from labgov.dashboard.selectors.lab import lab_for_spend

    lab = lab_for_spend(request.user, lab_id)
    alerts = selectors.top_alerts(request.user, lab_id=lab.pk, limit=LAB_PANEL_ALERTS)
    return render(request, "alerts/lab_panel.html", {"lab": lab, "alerts": alerts})


LAB_PANEL_ALERTS = 10


@login_required
@require_GET
def alert_badge(request):
    count = selectors.open_alert_count(request.user)
    return render(request, "alerts/list.html#badge", {"count": count})


@login_required
@require_GET
def alert_detail(request, pk: int):
    alert = selectors.alert_for_user(request.user, pk)
    manager = access.can_manage_alert(
        request.user, institution_id=alert.institution_id, lab_id=alert.lab_id
    )
    history = list(
        AuditEvent.objects.filter(
            Q(target_type="alerts.alert", target_id=str(alert.pk))
            | Q(target_type="runpod.resource", after__alert_id=alert.pk)
        )
        .select_related("actor")
        .order_by("-created_at", "-id")[:20]
    )
    return render(
        request,
        "alerts/detail.html",
        {
            "alert": alert,
            "manager": manager,
            "pod_actions": services.pod_actions_for(request.user, alert),
            "retention_offer": manager
            and not alert.is_resolved
            and alert.kind in (Kind.STOPPED_POD_DISK, Kind.IDLE_NETWORK_VOLUME)
            and alert.resource_id is not None,
            "snooze_form": SnoozeForm(
                initial={"until": (dt.datetime.now(UTC) + dt.timedelta(days=7)).date()}
            ),
            "resolve_form": ResolveForm(),
            "history": history,
            "subject_url": _subject_url(request.user, alert),
        },
    )


def _subject_url(user, alert) -> str:
    """Where the alert's subject is shown, among the pages this person may open."""
    from labgov.funding.models import FundingSource
    from labgov.runpod.models import RunpodAccount

    if alert.resource_id:
        return reverse("runpod:resources") + f"?kind={alert.resource.kind}"
    if alert.kind == Kind.UNATTRIBUTED_SPEND:
        return reverse("runpod:unattributed")
    if alert.account_id:
        if RunpodAccount.objects.filter(
            access.runpod_accounts_q(user), pk=alert.account_id
        ).exists():
            return reverse("runpod:account_detail", args=[alert.account_id])
        return ""
    if alert.funding_source_id:
        if FundingSource.objects.visible_to(user).filter(pk=alert.funding_source_id).exists():
            return reverse("dashboard:funding", args=[alert.funding_source_id])
        return reverse("dashboard:me")
    return ""


@login_required
@require_POST
def alert_transition(request, pk: int, action: str):
    alert = selectors.alert_for_user(request.user, pk)
    try:
        if action == "acknowledge":
            services.alert_acknowledge(actor=request.user, alert=alert)
            messages.success(
                request, "Acknowledged: you will not be told again unless it gets worse."
            )
        elif action == "reopen":
            services.alert_reopen(actor=request.user, alert=alert)
            messages.success(request, "Reopened.")
        elif action == "snooze":
            form = SnoozeForm(request.POST)
            if not form.is_valid():
                raise DomainError(" ".join(e for errs in form.errors.values() for e in errs))
            until = dt.datetime.combine(form.cleaned_data["until"], dt.time(), tzinfo=UTC)
            services.alert_snooze(actor=request.user, alert=alert, until=until)
            messages.success(request, f"Snoozed until {until:%Y-%m-%d}.")
        elif action == "resolve":
            form = ResolveForm(request.POST)
            note = form.cleaned_data["note"] if form.is_valid() else ""
            services.alert_resolve(actor=request.user, alert=alert, note=note)
            messages.success(request, "Resolved. If the condition still holds, it opens again.")
        else:
            raise DomainError("Unknown action.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("alerts:detail", pk=alert.pk)


@login_required
@require_http_methods(["GET", "POST"])
def alert_pod_action(request, pk: int, action: str):
    """GET asks for confirmation, saying what the action does; POST does it."""
    alert = selectors.alert_for_user(request.user, pk)
    if action == "terminate":
        # Deleting data needs two people: never from an alert, always a retention case.
        try:
            services.refuse_terminate(request.user, alert)
        except DomainError as exc:
            messages.error(request, exc.message)
        return redirect("alerts:detail", pk=alert.pk)
    access.deny_unless(services.may_act_on_pod(request.user, alert, action))
    allowed = dict(services.pod_actions_for(request.user, alert))
    if request.method == "POST":
        try:
            services.alert_pod_action(actor=request.user, alert=alert, action=action)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Pod {services.PAST[action]} on Runpod.")
        return redirect("alerts:detail", pk=alert.pk)
    if action not in allowed:
        messages.error(request, f"The pod cannot be {services.PAST.get(action, action)} now.")
        return redirect("alerts:detail", pk=alert.pk)
    return render(
        request,
        "alerts/confirm_pod_action.html",
        {
            "alert": alert,
            "action": action,
            "label": allowed[action],
            "resource": alert.resource,
            "cancel_url": reverse("alerts:detail", args=[alert.pk]),
            "stopped_monthly_usd": services.stopped_monthly_usd(alert.resource),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def own_pod_action(request, resource_id: int, action: str):
    """A pod's owner stops or starts it from their own page (My spend): GET asks, saying what
    it costs; POST does it, as from its alert."""
    resource = access.get_or_404(resources_for_user(request.user), pk=resource_id)
    access.deny_unless(
        action in services.OWNER_ACTIONS and services.owns_pod(request.user, resource)
    )
    if request.method == "POST":
        try:
            services.own_pod_action(actor=request.user, resource=resource, action=action)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Pod {services.PAST[action]} on Runpod.")
        return redirect("dashboard:me")
    allowed = dict(services.own_pod_actions_for(request.user, resource))
    if action not in allowed:
        messages.error(request, f"The pod cannot be {services.PAST[action]} now.")
        return redirect("dashboard:me")
    return render(
        request,
        "alerts/confirm_pod_action.html",
        {
            "action": action,
            "label": allowed[action],
            "resource": resource,
            "cancel_url": reverse("dashboard:me"),
            "stopped_monthly_usd": services.stopped_monthly_usd(resource),
        },
    )


# -- Settings ---------------------------------------------------------------------------------


@login_required
@require_GET
def settings_list(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.managed_labs or scope.admin_institutions))
    labs = (
        Lab.objects.filter(pk__in=scope.managed_labs)
        .select_related("institution")
        .order_by("institution__name", "name")
    )
    own = set(
        AlertSettings.objects.filter(lab_id__in=scope.managed_labs).values_list("lab_id", flat=True)
    )
    institutions = Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name")
    return render(
        request,
        "alerts/settings_list.html",
        {"labs": [(lab, lab.pk in own) for lab in labs], "institutions": institutions},
    )


def _settings_page(request, *, institution, lab):
    resolver = Resolver(institution.pk)
    effective = resolver.for_lab(lab.pk if lab else None)
    form = AlertSettingsForm(
        request.POST or None, initial=AlertSettingsForm.initial_from(effective)
    )
    if request.method == "POST" and form.is_valid():
        try:
            services.alert_settings_save(
                actor=request.user, institution=institution, lab=lab, values=form.cleaned_data
            )
        except DomainError as exc:
            _apply_error(form, exc)
        else:
            messages.success(request, "Alert settings saved; they apply from the next evaluation.")
            return redirect("alerts:settings")
    has_own = (resolver.lab_rows.get(lab.pk) if lab else resolver.default_row) is not None
    return render(
        request,
        "alerts/settings_form.html",
        {"form": form, "lab": lab, "institution": institution, "has_own": has_own},
    )


@login_required
@require_http_methods(["GET", "POST"])
def settings_edit_lab(request, lab_id: int):
    lab = access.get_or_404(
        Lab.objects.filter(access.labs_q(request.user)).select_related("institution"), pk=lab_id
    )
    access.deny_unless(
        access.can_edit_alert_settings(
            request.user, institution_id=lab.institution_id, lab_id=lab.pk
        )
    )
    return _settings_page(request, institution=lab.institution, lab=lab)


@login_required
@require_http_methods(["GET", "POST"])
def settings_edit_default(request, institution_id: int):
    member_of = Membership.objects.active().filter(user=request.user).values("institution_id")
    institution = access.get_or_404(Institution.objects.filter(pk__in=member_of), pk=institution_id)
    access.deny_unless(
        access.can_edit_alert_settings(request.user, institution_id=institution.pk, lab_id=None)
    )
    return _settings_page(request, institution=institution, lab=None)
