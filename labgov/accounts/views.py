from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.forms import (
    INSTITUTION_ROLE_CHOICES,
    LAB_ROLES_FOR_INSTITUTION_ADMIN,
    LAB_ROLES_FOR_LAB_ADMIN,
    AutoApproveCeilingForm,
    LabForm,
    MembershipForm,
    TimeZoneForm,
)
from labgov.accounts.models import Institution, Lab, Membership, Role
from labgov.accounts.services import (
    institution_auto_approve_ceiling_set,
    institution_time_zone_set,
    lab_create,
    membership_end,
    membership_grant,
)
from labgov.core.errors import DomainError


def _lab_for_user(user, pk: int, *, manage: bool = False) -> Lab:
    lab = access.get_or_404(
        Lab.objects.filter(access.labs_q(user)).select_related("institution"), pk=pk
    )
    scope = access.scope_for(user)
    if manage:
        access.deny_unless(access.can_manage_lab(user, lab.pk))
    elif not (
        access.can_manage_lab(user, lab.pk) or lab.institution_id in scope.money_institutions
    ):
        raise PermissionDenied(_LAB_PAGES_ARE_FOR)
    return lab


_LAB_PAGES_ARE_FOR = (
    "A lab's page is for its lab admins, finance and institution admins: your allocations "
    "are under Funding, your spend under My spend."
)


def _roles_user_may_grant(user, lab: Lab):
    if lab.institution_id in access.scope_for(user).admin_institutions:
        return LAB_ROLES_FOR_INSTITUTION_ADMIN
    return LAB_ROLES_FOR_LAB_ADMIN


@login_required
@require_http_methods(["GET"])
def lab_list(request):
    scope = access.scope_for(request.user)
    if scope.member_labs and not (scope.managed_labs or scope.money_institutions):
        raise PermissionDenied(_LAB_PAGES_ARE_FOR)
    labs = Lab.objects.filter(access.labs_q(request.user)).select_related("institution")
    return render(
        request,
        "accounts/lab_list.html",
        {"labs": labs, "can_create": bool(scope.admin_institutions), "scope": scope},
    )


@login_required
@require_http_methods(["GET", "POST"])
def lab_new(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.admin_institutions))
    institution = (
        Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name").first()
    )
    form = LabForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            lab = lab_create(actor=request.user, institution=institution, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Created {lab}.")
            return redirect("accounts:lab_detail", pk=lab.pk)
    return render(request, "accounts/lab_form.html", {"form": form, "institution": institution})


def _members(lab: Lab):
    return (
        Membership.objects.active()
        .filter(lab=lab)
        .select_related("user")
        .order_by("role", "user__last_name", "user__username")
    )


@login_required
@require_http_methods(["GET", "POST"])
def lab_detail(request, pk: int):
    lab = _lab_for_user(request.user, pk)
    can_manage = access.can_manage_lab(request.user, lab.pk)
    form = (
        MembershipForm(
            request.POST or None,
            roles=_roles_user_may_grant(request.user, lab),
            institution=lab.institution,
        )
        if can_manage
        else None
    )
    if request.method == "POST":
        access.deny_unless(can_manage)
        if form.is_valid():
            try:
                membership_grant(
                    actor=request.user,
                    user=form.cleaned_data["username"],
                    lab=lab,
                    role=form.cleaned_data["role"],
                    end_date=form.cleaned_data["end_date"],
                )
            except DomainError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, "Membership added.")
                return redirect("accounts:lab_detail", pk=lab.pk)
    return render(
        request,
        "accounts/lab_detail.html",
        {"lab": lab, "members": _members(lab), "can_manage": can_manage, "form": form},
    )


@login_required
@require_POST
def membership_end_view(request, pk: int):
    scope = access.scope_for(request.user)
    membership = access.get_or_404(
        Membership.objects.filter(
            Q(institution_id__in=scope.admin_institutions) | Q(lab_id__in=scope.admin_labs)
        ).select_related("lab", "user"),
        pk=pk,
    )
    # Lab admins end memberships of members; appointing and removing lab admins and
    # institution roles is the institution admin's call.
    access.deny_unless(
        membership.institution_id in scope.admin_institutions or membership.role == Role.MEMBER
    )
    try:
        membership_end(actor=request.user, membership=membership)
    except DomainError as exc:
        messages.error(request, exc.message)
    if membership.lab_id is None:
        return redirect("accounts:institution")
    if request.htmx:
        lab = membership.lab
        return render(
            request,
            "accounts/lab_detail.html#members",
            {"lab": lab, "members": _members(lab), "can_manage": True},
        )
    return redirect("accounts:lab_detail", pk=membership.lab_id)


@login_required
@require_http_methods(["GET", "POST"])
def institution_people(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.admin_institutions))
    institution = (
        Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name").first()
    )
    form = MembershipForm(
        request.POST or None, roles=INSTITUTION_ROLE_CHOICES, institution=institution
    )
    if request.method == "POST" and form.is_valid():
        try:
            membership_grant(
                actor=request.user,
                user=form.cleaned_data["username"],
                institution=institution,
                role=form.cleaned_data["role"],
                end_date=form.cleaned_data["end_date"],
            )
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, "Role granted.")
            return redirect("accounts:institution")
    people = (
        Membership.objects.active()
        .filter(institution=institution, lab__isnull=True)
        .select_related("user")
        .order_by("role", "user__username")
    )
    return render(
        request,
        "accounts/institution.html",
        {
            "institution": institution,
            "people": people,
            "form": form,
            "ceiling_form": AutoApproveCeilingForm(
                initial={"amount_usd": institution.auto_approve_ceiling_usd}
            ),
            "time_zone_form": TimeZoneForm(initial={"time_zone": institution.time_zone}),
        },
    )


def _institution_setting(request, form_class, save, saved: str):
    """One setting of the institution the person administers: the form's errors (all of
    them) or the service's refusal as messages, back on the institution page either way."""
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.admin_institutions))
    institution = (
        Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name").first()
    )
    form = form_class(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect("accounts:institution")
    try:
        save(institution, form.cleaned_data)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, saved)
    return redirect("accounts:institution")


@login_required
@require_POST
def institution_ceiling(request):
    return _institution_setting(
        request,
        AutoApproveCeilingForm,
        lambda institution, data: institution_auto_approve_ceiling_set(
            actor=request.user, institution=institution, amount_usd=data["amount_usd"]
        ),
        "Auto-approval ceiling saved.",
    )


class LoginView(auth_views.LoginView):
    """The local login, with institutional sign-in offered above it when it is set up."""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["sso_enabled"] = settings.LABGOV_OIDC_ENABLED
        context["sso_name"] = settings.LABGOV_OIDC_NAME
        context["sso_failed"] = self.request.GET.get("sso") == "failed"
        return context


@login_required
@require_POST
def institution_time_zone(request):
    return _institution_setting(
        request,
        TimeZoneForm,
        lambda institution, data: institution_time_zone_set(
            actor=request.user, institution=institution, time_zone=data["time_zone"]
        ),
        "Time zone saved.",
    )
