from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab, Membership
from labgov.core.errors import DomainError
from labgov.retention import selectors, services
from labgov.retention.blockers import deletion_blockers
from labgov.retention.forms import (
    CaseFilterForm,
    HoldForm,
    KeepForm,
    MoveForm,
    NoteForm,
    PolicyForm,
)
from labgov.retention.models import CLOSED_STATES, RetentionCase, State
from labgov.retention.policies import Resolver
from labgov.retention.triggers import lab_of
from labgov.runpod.models import Resource


@login_required
@require_GET
def case_list(request):
    form = CaseFilterForm(request.GET or None)
    state = form.cleaned_data["state"] if form.is_valid() else "active"
    cases = selectors.cases_for(request.user)
    if state == "active":
        cases = cases.exclude(state__in=CLOSED_STATES)
    elif state:
        cases = cases.filter(state=state)
    page = Paginator(cases, 50).get_page(request.GET.get("page"))
    scope = access.scope_for(request.user)
    return render(
        request,
        "retention/list.html",
        {
            "form": form,
            "page": page,
            "policies": bool(scope.managed_labs or scope.admin_institutions),
        },
    )


@login_required
@require_GET
def case_detail(request, pk: int):
    case = selectors.case_for_user(request.user, pk)
    decider = access.can_decide_retention(
        request.user, institution_id=case.institution_id, lab_id=case.lab_id
    )
    allocations = selectors.payer_choices(case) if decider else None
    blockers = deletion_blockers(case) if not case.is_closed else None
    own_request = case.deletion_requested_by_id == request.user.pk
    context = {
        "case": case,
        "decider": decider,
        "allowed": _allowed(request.user, case, blockers, decider=decider),
        "own_request": own_request,
        "blockers": blockers,
        **selectors.case_context(case),
    }
    if decider:
        context.update(
            keep_form=KeepForm(),
            hold_form=HoldForm(allocations=allocations),
            move_form=MoveForm(allocations=allocations),
            note_form=NoteForm(),
        )
    return render(request, "retention/detail.html", context)


def _allowed(user, case: RetentionCase, blockers, *, decider: bool) -> set[str]:
    """The actions offered: those the case's state allows, less the ones the service would
    refuse this person anyway. The person who asked for a deletion never approves it: not
    offered to them, and the page says who must."""
    allowed = {a for a, states in services.ALLOWED.items() if case.state in states}
    if case.deletion_requested_by_id == user.pk:
        allowed.discard("approve")
    if not (blockers and blockers.includable):
        allowed.discard("include")
    if decider and any(not services.may_lift(user, h) for h in selectors.standing_holds(case)):
        allowed.discard("lift")
    return allowed


def _form_or_error(form):
    if not form.is_valid():
        raise DomainError(" ".join(e for errs in form.errors.values() for e in errs))
    return form.cleaned_data


def _act(request, case: RetentionCase, action: str) -> str:
    user = request.user
    notes = NoteForm(request.POST)
    note = notes.cleaned_data["note"] if notes.is_valid() else ""
    if action == "keep":
        data = _form_or_error(KeepForm(request.POST))
        services.case_keep(
            actor=user, case=case, reason=data["reason"], review_date=data["review_date"]
        )
    elif action == "hold":
        data = _form_or_error(HoldForm(request.POST, allocations=selectors.payer_choices(case)))
        services.case_hold(
            actor=user,
            case=case,
            kind=data["kind"],
            reason=data["reason"],
            payer=data["payer"],
            until=data["until"],
        )
    elif action == "move":
        data = _form_or_error(MoveForm(request.POST, allocations=selectors.payer_choices(case)))
        case = services.case_move(
            actor=user,
            case=case,
            allocation=data["allocation"],
            starts_on=data["starts_on"],
            note=note,
        )
        if case.state != State.MOVED:
            return (
                "left as it is until finance or an institution admin approves the move: it "
                "starts before today and moves spend already billed"
            )
    elif action == "lift":
        services.hold_lift(actor=user, case=case, note=note)
    elif action == "reopen":
        services.case_reopen(actor=user, case=case, note=note)
    elif action == "request":
        services.deletion_request(actor=user, case=case, reason=note)
    elif action == "approve":
        services.deletion_approve(actor=user, case=case)
    elif action == "include":
        pods = {str(b.pod.pk): b.pod for b in deletion_blockers(case).includable}
        pod = pods.get(request.POST.get("pod", ""))
        if pod is None:
            raise DomainError("Choose a stopped pod that mounts the volume.")
        services.case_include_pod(actor=user, case=case, pod=pod)
    elif action == "withdraw":
        services.deletion_withdraw(actor=user, case=case, note=note)
    elif action == "cancel":
        services.case_cancel(actor=user, case=case, note=note)
    return services.ACTION_WORDS[action]


@login_required
@require_POST
def case_action(request, pk: int, action: str):
    case = selectors.case_for_user(request.user, pk)
    access.deny_unless(action in services.ALLOWED and action != "return")
    services.require_decider(request.user, case)
    try:
        words = _act(request, case, action)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        _tell_outcome(request, case, action, words)
    return redirect("retention:detail", pk=case.pk)


def _tell_outcome(request, case: RetentionCase, action: str, words: str) -> None:
    """What happened, as it stands after the commit: an approval's deletion may have run
    already (and been refused), so its message is the case's state, never a green "approved"
    over a refusal."""
    case.refresh_from_db()
    if action != "approve" or case.state == State.DELETION_REQUESTED:
        messages.success(request, f"The case was {words}.")
    elif case.state == State.DELETED:
        messages.success(request, "Deleted on Runpod.")
    elif case.state == State.DELETION_APPROVED:
        messages.info(
            request, "Approved: labgov is deleting it on Runpod now; this page shows the outcome."
        )
    else:
        messages.error(request, f"Not deleted. {case.refusal or case.note}")


@login_required
@require_GET
def case_for_resource(request, resource_id: int):
    """A volume's active case (from an alert's list of volumes), at the part of the page
    asked for: hold, move or request. Without one, the page that offers to open it."""
    resource = access.get_or_404(
        Resource.objects.filter(access.resources_q(request.user)), pk=resource_id
    )
    case = selectors.cases_for(request.user).active().filter(resource=resource).first()
    if case is not None:
        part = request.GET.get("to", "")
        anchor = f"#{part}" if part in ("hold", "move", "request", "blockers") else ""
        return redirect(reverse("retention:detail", args=[case.pk]) + anchor)
    decider = access.can_decide_retention(
        request.user,
        institution_id=resource.account.institution_id,
        lab_id=lab_of(resource),
    )
    return render(request, "retention/no_case.html", {"resource": resource, "decider": decider})


@login_required
@require_POST
def open_for_resource(request, resource_id: int):
    resource = access.get_or_404(
        Resource.objects.filter(access.resources_q(request.user)), pk=resource_id
    )
    try:
        case = services.case_open_for_resource(actor=request.user, resource=resource)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("retention:list")
    messages.success(request, "A retention case is open: decide there what happens to the data.")
    return redirect("retention:detail", pk=case.pk)


# -- Policies -----------------------------------------------------------------------------------


@login_required
@require_GET
def policy_list(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.managed_labs or scope.admin_institutions))
    labs = (
        Lab.objects.filter(pk__in=scope.managed_labs)
        .select_related("institution")
        .order_by("institution__name", "name")
    )
    institutions = Institution.objects.filter(pk__in=scope.admin_institutions).order_by("name")
    return render(
        request, "retention/policy_list.html", {"labs": labs, "institutions": institutions}
    )


def _policy_page(request, *, institution, lab):
    resolver = Resolver(institution.pk)
    effective = resolver.for_lab(lab.pk if lab else None)
    form = PolicyForm(request.POST or None, initial=PolicyForm.initial_from(effective))
    if request.method == "POST" and form.is_valid():
        try:
            services.policy_save(
                actor=request.user, institution=institution, lab=lab, values=form.cleaned_data
            )
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(
                request, "Retention policy saved; it applies from the next evaluation."
            )
            return redirect(request.path)
    return render(
        request,
        "retention/policy_form.html",
        {
            "form": form,
            "lab": lab,
            "institution": institution,
            "has_own": resolver.own(lab.pk if lab else None) is not None,
            "effective": effective,
            "preview": selectors.preview(institution.pk, lab.pk if lab else None),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def policy_lab(request, lab_id: int):
    lab = access.get_or_404(
        Lab.objects.filter(access.labs_q(request.user)).select_related("institution"), pk=lab_id
    )
    access.deny_unless(
        access.can_edit_policy(request.user, institution_id=lab.institution_id, lab_id=lab.pk)
    )
    return _policy_page(request, institution=lab.institution, lab=lab)


@login_required
@require_http_methods(["GET", "POST"])
def policy_default(request, institution_id: int):
    member_of = Membership.objects.active().filter(user=request.user).values("institution_id")
    institution = access.get_or_404(Institution.objects.filter(pk__in=member_of), pk=institution_id)
    access.deny_unless(
        access.can_edit_policy(request.user, institution_id=institution.pk, lab_id=None)
    )
    return _policy_page(request, institution=institution, lab=None)
