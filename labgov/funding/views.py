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
from labgov.funding.forms import (
    AllocationForm,
    FundingProposalForm,
    FundingSourceForm,
    GrantImportForm,
    ProposalDecisionForm,
)
from labgov.funding.imports import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, grants_import_csv
from labgov.funding.models import Allocation, FundingProposal, FundingSource
from labgov.funding.proposals import (
    funding_proposal_approve,
    funding_proposal_create,
    funding_proposal_reject,
    proposal_values_from,
)
from labgov.funding.selectors import (
    funding_source_for_user,
    funding_source_list_for_user,
    my_allocations,
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
    scope = access.scope_for(request.user)
    context = {
        "page": page,
        # A member sees no funding source: only the allocations they hold.
        "sees_sources": bool(scope.money_institutions or scope.admin_labs),
        "my_allocations": [] if request.htmx else my_allocations(request.user),
        "query": query,
        "status": status or "",
        "sort": sort,
        "statuses": FundingSource.Status.choices,
        "can_create": access.writable_labs_for_funding(request.user).exists(),
        "can_propose": bool(access.scope_for(request.user).admin_labs),
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
            "can_propose": access.can_propose_funding(request.user, funding_source.lab_id),
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
        actor=request.user,
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
    form = AllocationForm(
        request.POST or None, funding_source=funding_source, actor=request.user, initial=initial
    )
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


@login_required
@require_http_methods(["GET", "POST"])
def proposal_new(request):
    """A lab admin proposes a new funding source for one of their labs."""
    labs = access.proposable_labs_for_funding(request.user)
    access.deny_unless(labs.exists())
    form = FundingProposalForm(request.POST or None, labs=labs)
    if request.method == "POST" and form.is_valid():
        try:
            funding_proposal_create(
                actor=request.user,
                lab=form.cleaned_data["lab"],
                values=form.values(),
                reason=form.cleaned_data["reason"],
            )
        except DomainError as exc:
            _apply_domain_error(form, exc)
        else:
            messages.success(request, "Proposed; finance or an institution admin will decide.")
            return redirect("funding:proposals")
    return render(
        request, "funding/proposal_form.html", {"form": form, "title": "Propose a funding source"}
    )


@login_required
@require_http_methods(["GET", "POST"])
def proposal_change(request, pk: int):
    """A lab admin proposes a change (amount, dates, status, …) to their lab's source."""
    funding_source = funding_source_for_user(request.user, pk)
    access.deny_unless(access.can_propose_funding(request.user, funding_source.lab_id))
    form = FundingProposalForm(request.POST or None, initial=proposal_values_from(funding_source))
    if request.method == "POST" and form.is_valid():
        try:
            funding_proposal_create(
                actor=request.user,
                lab=funding_source.lab,
                funding_source=funding_source,
                values=form.values(),
                reason=form.cleaned_data["reason"],
            )
        except DomainError as exc:
            _apply_domain_error(form, exc)
        else:
            messages.success(request, "Proposed; finance or an institution admin will decide.")
            return redirect("funding:proposals")
    return render(
        request,
        "funding/proposal_form.html",
        {"form": form, "title": f"Propose a change to {funding_source.name}", "fs": funding_source},
    )


@login_required
@require_http_methods(["GET"])
def proposal_list(request):
    """Finance and institution admins decide here; lab admins follow their proposals."""
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.money_institutions or scope.admin_labs))
    proposals = (
        FundingProposal.objects.visible_to(request.user)
        .select_related("lab", "funding_source", "proposed_by", "decided_by")
        .order_by("-proposed_at", "-pk")
    )
    state = request.GET.get("state", FundingProposal.State.PENDING)
    if state in FundingProposal.State.values:
        proposals = proposals.filter(state=state)
    page = Paginator(proposals, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "funding/proposals.html",
        {
            "page": page,
            "state": state,
            "states": FundingProposal.State.choices,
            "decider_of": scope.money_institutions,
        },
    )


def _proposal_for_decision(request, pk: int) -> FundingProposal:
    proposal = access.get_or_404(FundingProposal.objects.visible_to(request.user), pk=pk)
    access.deny_unless(access.can_decide_funding_proposals(request.user, proposal.institution_id))
    return proposal


@login_required
@require_http_methods(["POST"])
def proposal_approve(request, pk: int):
    return _decide(request, pk, funding_proposal_approve, "approved")


@login_required
@require_http_methods(["POST"])
def proposal_reject(request, pk: int):
    return _decide(request, pk, funding_proposal_reject, "rejected")


def _decide(request, pk: int, decide, done: str):
    proposal = _proposal_for_decision(request, pk)
    form = ProposalDecisionForm(request.POST)
    note = form.cleaned_data["note"] if form.is_valid() else ""
    try:
        decide(actor=request.user, proposal=proposal, note=note)
    except DomainError as exc:
        messages.error(request, f"#{proposal.pk}: {exc.message}")
    else:
        messages.success(request, f"Proposal #{proposal.pk} {done}.")
    return redirect("funding:proposals")
