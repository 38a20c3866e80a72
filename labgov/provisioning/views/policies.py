from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import F
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab, Membership
from labgov.core.errors import DomainError
from labgov.provisioning.assessment import default_policy
from labgov.provisioning.forms import PolicyForm
from labgov.provisioning.models import ProvisioningPolicy
from labgov.provisioning.selectors import gpu_catalog
from labgov.provisioning.services import policy_save
from labgov.provisioning.views.common import apply_error


@login_required
@require_GET
def policy_list(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.managed_labs or scope.admin_institutions))
    labs = Lab.objects.filter(pk__in=scope.managed_labs).select_related("institution")
    policies = ProvisioningPolicy.objects.filter(
        lab_id__in=scope.managed_labs
    ) | ProvisioningPolicy.objects.filter(
        lab__isnull=True, institution_id__in=scope.admin_institutions | scope.lab_admin_institutions
    )
    by_lab = {p.lab_id: p for p in policies.order_by(F("lab").asc(nulls_first=True))}
    defaults = {p.institution_id: p for p in by_lab.values() if p.lab_id is None}
    rows = [
        {"lab": lab, "policy": by_lab.get(lab.pk), "default": defaults.get(lab.institution_id)}
        for lab in labs.order_by("institution__name", "name")
    ]
    institutions = Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name")
    return render(
        request,
        "provisioning/policies.html",
        {
            "rows": rows,
            "institutions": [(i, defaults.get(i.pk)) for i in institutions],
        },
    )


def _policy_page(request, *, institution, lab, current, fallback):
    gpus = list(gpu_catalog())
    form = PolicyForm(
        request.POST or None, gpus=gpus, initial=PolicyForm.initial_from(current or fallback)
    )
    if request.method == "POST" and form.is_valid():
        try:
            policy_save(
                actor=request.user, institution=institution, lab=lab, values=form.cleaned_data
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, "Policy saved.")
            return redirect("provisioning:policies")
    return render(
        request,
        "provisioning/policy_form.html",
        {"form": form, "lab": lab, "institution": institution, "has_own": current is not None},
    )


@login_required
@require_http_methods(["GET", "POST"])
def policy_edit_lab(request, lab_id: int):
    lab = access.get_or_404(
        Lab.objects.filter(access.labs_q(request.user)).select_related("institution"), pk=lab_id
    )
    access.deny_unless(
        access.can_edit_policy(request.user, institution_id=lab.institution_id, lab_id=lab.pk)
    )
    policies = ProvisioningPolicy.objects.filter(institution_id=lab.institution_id)
    current = policies.filter(lab=lab).first()
    fallback = policies.filter(lab__isnull=True).first() or default_policy(lab.institution_id)
    return _policy_page(
        request, institution=lab.institution, lab=lab, current=current, fallback=fallback
    )


@login_required
@require_http_methods(["GET", "POST"])
def policy_edit_default(request, institution_id: int):
    member_of = Membership.objects.active().filter(user=request.user).values("institution_id")
    institution = access.get_or_404(Institution.objects.filter(pk__in=member_of), pk=institution_id)
    access.deny_unless(
        access.can_edit_policy(request.user, institution_id=institution.pk, lab_id=None)
    )
    current = ProvisioningPolicy.objects.filter(institution=institution, lab__isnull=True).first()
    return _policy_page(
        request,
        institution=institution,
        lab=None,
        current=current,
        fallback=default_policy(institution.pk),
    )
