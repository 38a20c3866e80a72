from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from labgov.accounts import access
from labgov.accounts.models import Institution
from labgov.core.errors import DomainError
from labgov.core.params import text_param
from labgov.funding.forms import AllocationForm, FundingSourceForm, GrantImportForm
from labgov.funding.imports import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, grants_import_csv
from labgov.funding.models import Allocation, FundingSource
from labgov.funding.selectors import (
    funding_source_for_user,
    funding_source_list_for_user,
)
from labgov.funding.services import (
    allocation_create,
    allocation_update,
    funding_source_create,
    funding_source_update,
)

SORTS = {
    "end": ("end_date", "name"),
    "-end": ("-end_date", "name"),
    "name": ("name",),
    "amount": ("amount_usd",),
    "-amount": ("-amount_usd",),
    "remaining": ("remaining_usd",),
}


def _apply_domain_error(form, exc: DomainError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


@login_required
@require_http_methods(["GET"])
def funding_list(request):
    sources = funding_source_list_for_user(request.user)
    query = text_param(request.GET, "q")
    if query:
        sources = sources.filter(
            Q(name__icontains=query)
            | Q(award_number__icontains=query)
            | Q(sponsor__icontains=query)
            | Q(cost_center__icontains=query)
        )
    if (status := request.GET.get("status")) in FundingSource.Status.values:
        sources = sources.filter(status=status)
    sort = request.GET.get("sort", "end")
    sources = sources.order_by(*SORTS.get(sort, SORTS["end"]))
    page = Paginator(sources, 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "query": query,
        "status": status or "",
        "sort": sort,
        "statuses": FundingSource.Status.choices,
        "can_create": access.writable_labs_for_funding(request.user).exists(),
        "can_import": bool(access.scope_for(request.user).money_institutions),
    }
    template = "funding/list.html#table" if request.htmx else "funding/list.html"
    return render(request, template, context)


@login_required
@require_http_methods(["GET"])
def funding_detail(request, pk: int):
    funding_source = funding_source_for_user(request.user, pk)
    allocations = (
        Allocation.objects.filter(funding_source=funding_source)
        .select_related("user")
        .with_figures()
    )
    can_write = access.can_write_funding_source(
        request.user, lab_id=funding_source.lab_id, institution_id=funding_source.institution_id
    )
    return render(
        request,
        "funding/detail.html",
        {
            "fs": funding_source,
            "allocations": allocations,
            "can_write": can_write,
            "can_allocate": access.can_manage_lab(request.user, funding_source.lab_id),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def funding_create(request):
    labs = access.writable_labs_for_funding(request.user)
    access.deny_unless(labs.exists())
    form = FundingSourceForm(request.POST or None, labs=labs)
    if request.method == "POST" and form.is_valid():
        try:
            funding_source = funding_source_create(actor=request.user, **form.cleaned_data)
        except DomainError as exc:
            _apply_domain_error(form, exc)
        else:
            messages.success(request, f"Created {funding_source}.")
            return redirect("funding:detail", pk=funding_source.pk)
    return render(request, "funding/form.html", {"form": form, "title": "New funding source"})


@login_required
@require_http_methods(["GET", "POST"])
def funding_edit(request, pk: int):
    funding_source = funding_source_for_user(request.user, pk, write=True)
    labs = access.writable_labs_for_funding(request.user).filter(
        institution_id=funding_source.institution_id
    )
    initial = {name: getattr(funding_source, name) for name in FundingSourceForm.base_fields}
    form = FundingSourceForm(request.POST or None, labs=labs, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            funding_source_update(
                actor=request.user, funding_source=funding_source, **form.cleaned_data
            )
        except DomainError as exc:
            _apply_domain_error(form, exc)
        else:
            messages.success(request, f"Saved {funding_source.name}.")
            return redirect("funding:detail", pk=funding_source.pk)
    return render(
        request,
        "funding/form.html",
        {"form": form, "title": f"Edit {funding_source.name}", "fs": funding_source},
    )


@login_required
@require_http_methods(["GET", "POST"])
def allocation_new(request, pk: int):
    funding_source = funding_source_for_user(request.user, pk)
    access.deny_unless(access.can_manage_lab(request.user, funding_source.lab_id))
    form = AllocationForm(
        request.POST or None,
        funding_source=funding_source,
        initial={"start_date": funding_source.start_date, "end_date": funding_source.end_date},
    )
    if request.method == "POST" and form.is_valid():
        try:
            allocation_create(
                actor=request.user, funding_source=funding_source, **form.cleaned_data
            )
        except DomainError as exc:
            _apply_domain_error(form, exc)
        else:
            messages.success(request, "Allocation created.")
            return redirect("funding:detail", pk=funding_source.pk)
    return render(
        request,
        "funding/allocation_form.html",
        {"form": form, "fs": funding_source, "title": "New allocation"},
    )


@login_required
@require_http_methods(["GET", "POST"])
def allocation_edit(request, pk: int):
    allocation = access.get_or_404(
        Allocation.objects.visible_to(request.user).select_related("funding_source", "user"), pk=pk
    )
    funding_source = allocation.funding_source
    access.deny_unless(access.can_manage_lab(request.user, funding_source.lab_id))
    initial = {name: getattr(allocation, name) for name in AllocationForm.base_fields}
    form = AllocationForm(request.POST or None, funding_source=funding_source, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            allocation_update(actor=request.user, allocation=allocation, **form.cleaned_data)
        except DomainError as exc:
            _apply_domain_error(form, exc)
        else:
            messages.success(request, "Allocation saved.")
            return redirect("funding:detail", pk=funding_source.pk)
    return render(
        request,
        "funding/allocation_form.html",
        {"form": form, "fs": funding_source, "title": "Edit allocation"},
    )


@login_required
@require_http_methods(["GET", "POST"])
def grant_import(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.money_institutions))
    institutions = Institution.objects.filter(pk__in=scope.money_institutions).order_by("name")
    form = GrantImportForm(request.POST or None, request.FILES or None, institutions=institutions)
    result = None
    if request.method == "POST" and form.is_valid():
        institution = form.cleaned_data["institution"]
        result = grants_import_csv(
            actor=request.user, institution=institution, data=form.cleaned_data["file"].read()
        )
        if result.ok:
            messages.success(
                request,
                f"Imported into {institution}: {result.created} created, {result.updated} "
                f"updated, {result.unchanged} unchanged.",
            )
            return redirect("funding:list")
    return render(
        request,
        "funding/import.html",
        {
            "form": form,
            "result": result,
            "required_columns": REQUIRED_COLUMNS,
            "optional_columns": OPTIONAL_COLUMNS,
        },
    )
