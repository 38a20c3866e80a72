import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.models import Lab
from labgov.core.errors import DomainError
from labgov.core.periods import UTC
from labgov.funding.models import Allocation
from labgov.runpod.attribution import BEGINNING
from labgov.runpod.models import Resource, RunpodAccount
from labgov.runpod.selectors import allocations_assignable_by, resources_for_user
from labgov.transfers.forms import DecisionForm, SplitForm, TransferForm
from labgov.transfers.models import CostTransfer, SpendMove
from labgov.transfers.selectors import (
    assignment_history,
    pending_moves_for,
    spend_moves_visible_to,
    transfers_visible_to,
)
from labgov.transfers.services import (
    Refused,
    cost_transfer_approve,
    cost_transfer_create,
    cost_transfer_reject,
    open_months,
)
from labgov.transfers.splits import resource_split_set, spend_move_approve, spend_move_reject

FIELD_OF = {"resource": "resource_runpod_id", "shares": None, "starts_at": "starts_on"}


def _show(form, exc: DomainError) -> None:
    """Every problem beside its field (or above the form)."""
    problems = exc.problems if isinstance(exc, Refused) else [(exc.field, exc.message)]
    for field, message in problems:
        field = FIELD_OF.get(field, field)
        form.add_error(field if field in form.fields else None, message)


def _may_transfer(user):
    scope = access.scope_for(user)
    access.deny_unless(bool(scope.money_institutions or scope.admin_labs))
    return scope


@login_required
@require_http_methods(["GET"])
def transfer_list(request):
    """Finance decides here and sees the institution's; lab admins follow their labs'."""
    scope = _may_transfer(request.user)
    transfers = transfers_visible_to(request.user)
    labs = Lab.objects.filter(
        Q(institution_id__in=scope.money_institutions) | Q(id__in=scope.admin_labs)
    ).order_by("name")
    lab_id = request.GET.get("lab", "")
    lab = labs.filter(pk=int(lab_id)).first() if lab_id.isdigit() else None
    if lab is not None:
        transfers = transfers.filter(
            Q(from_funding_source__lab=lab) | Q(to_funding_source__lab=lab)
        )
    state = request.GET.get("state", "all")
    if state in CostTransfer.State.values:
        transfers = transfers.filter(state=state)
    page = Paginator(transfers, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "transfers/list.html",
        {
            "page": page,
            "labs": labs,
            "lab": lab,
            "state": state,
            "states": CostTransfer.State.choices,
            "decider_of": scope.money_institutions,
            "moves": pending_moves_for(request.user),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def transfer_new(request):
    scope = _may_transfer(request.user)
    allocations = (
        Allocation.objects.filter(
            Q(funding_source__lab__institution_id__in=scope.money_institutions)
            | Q(funding_source__lab_id__in=scope.admin_labs)
        )
        .select_related("funding_source", "user")
        .order_by("funding_source__name", "pk")
    )
    accounts = RunpodAccount.objects.filter(access.runpod_accounts_q(request.user))
    # The service checks each transfer's own institution again; this only offers the months.
    months = open_months(min(scope.money_institutions | scope.lab_admin_institutions))
    form = TransferForm(
        request.POST or None, allocations=allocations, accounts=accounts, months=months
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        resource = None
        if data["resource_runpod_id"]:
            resource = Resource.objects.filter(
                account=data["account"], runpod_id=data["resource_runpod_id"]
            ).first()
            if resource is None:
                form.add_error("resource_runpod_id", "No resource with this id in that account.")
        if not form.errors:
            try:
                transfer = cost_transfer_create(
                    actor=request.user,
                    account=data["account"],
                    resource=resource,
                    from_allocation=data["from_allocation"],
                    to_allocation=data["to_allocation"],
                    month=data["month"],
                    amount_usd=data["amount_usd"],
                    justification=data["justification"],
                )
            except DomainError as exc:
                _show(form, exc)
            else:
                messages.success(
                    request,
                    f"Transfer #{transfer.pk} applied."
                    if transfer.state == CostTransfer.State.APPLIED
                    else f"Transfer #{transfer.pk} proposed; finance or an institution admin "
                    "will decide.",
                )
                return redirect("transfers:list")
    return render(request, "transfers/form.html", {"form": form})


def _decide(request, pk: int, *, visible, decide, what: str, name: str, done: str):
    """Approve or reject a cost transfer or a back-dated move: the same people decide both."""
    proposal = access.get_or_404(visible(request.user), pk=pk)
    access.deny_unless(access.can_transfer_directly(request.user, proposal.institution_id))
    form = DecisionForm(request.POST)
    note = form.cleaned_data["note"] if form.is_valid() else ""
    try:
        decide(actor=request.user, note=note, **{what: proposal})
    except DomainError as exc:
        messages.error(request, f"{name}{proposal.pk}: {exc.message}")
    else:
        messages.success(request, f"{name}{proposal.pk} {done}.")
    return redirect("transfers:list")


TRANSFER = {"visible": transfers_visible_to, "what": "transfer", "name": "Transfer #"}
MOVE = {"visible": spend_moves_visible_to, "what": "move", "name": "Move #"}


@login_required
@require_POST
def transfer_approve(request, pk: int):
    return _decide(
        request, pk, **TRANSFER, decide=cost_transfer_approve, done="approved and applied"
    )


@login_required
@require_POST
def transfer_reject(request, pk: int):
    return _decide(request, pk, **TRANSFER, decide=cost_transfer_reject, done="rejected")


@login_required
@require_POST
def spend_move_approve_view(request, pk: int):
    return _decide(request, pk, **MOVE, decide=spend_move_approve, done="approved and applied")


@login_required
@require_POST
def spend_move_reject_view(request, pk: int):
    return _decide(request, pk, **MOVE, decide=spend_move_reject, done="rejected")


@login_required
@require_http_methods(["GET", "POST"])
def resource_funding(request, pk: int):
    """A resource's attribution timeline, with its split shares, and the shares editor for
    the people who may assign it."""
    resource = access.get_or_404(resources_for_user(request.user), pk=pk)
    allocations = allocations_assignable_by(request.user)
    can_edit = allocations.exists()
    form = None
    if can_edit:
        form = SplitForm(
            request.POST or None,
            allocations=allocations,
            initial={"starts_on": dt.datetime.now(UTC).date()},
        )
    if request.method == "POST":
        access.deny_unless(can_edit)
        if form.is_valid():
            starts_at = dt.datetime.combine(form.cleaned_data["starts_on"], dt.time(), tzinfo=UTC)
            try:
                done = resource_split_set(
                    actor=request.user,
                    resource=resource,
                    shares=form.cleaned_data["shares"],
                    starts_at=starts_at,
                )
            except DomainError as exc:
                _show(form, exc)
            else:
                messages.success(
                    request,
                    f"Shares proposed (#{done.pk}): they start before today and move spend "
                    "already billed, so finance or an institution admin approves them."
                    if isinstance(done, SpendMove)
                    else "Shares saved; billing from that day on follows them.",
                )
                return redirect("transfers:resource_funding", pk=resource.pk)
    return render(
        request,
        "transfers/resource_funding.html",
        {
            "resource": resource,
            "history": assignment_history(resource),
            "form": form,
            # An assignment from the beginning of time (the first one, made before labgov held
            # any record of the resource) is shown as such, not as 1970-01-01.
            "beginning": BEGINNING,
        },
    )
