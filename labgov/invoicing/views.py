import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from labgov.accounts import access
from labgov.core.errors import DomainError
from labgov.invoicing import selectors, services
from labgov.invoicing.forms import CloseForm, LineForm, ReasonForm
from labgov.invoicing.reconciliation import invoice_reconciliation
from labgov.usage.periods import is_closed


def _month(year: int, month: int) -> dt.date:
    if not (2000 <= year <= 2999 and 1 <= month <= 12):
        raise Http404("No such period.")
    return dt.date(year, month, 1)


def _form_errors(request, form) -> None:
    for errors in form.errors.values():
        for error in errors:
            messages.error(request, error)


def _act(request, action, done: str, **kwargs) -> bool:
    try:
        action(actor=request.user, **kwargs)
    except DomainError as exc:
        messages.error(request, exc.message)
        return False
    messages.success(request, done)
    return True


@login_required
@require_GET
def periods(request):
    rows = selectors.period_list(request.user, today=timezone.now().date())
    return render(request, "invoicing/periods.html", {"rows": rows})


@login_required
@require_GET
def period(request, institution_id: int, year: int, month: int):
    summary = selectors.period_summary(request.user, institution_id, _month(year, month))
    return render(request, "invoicing/period.html", {"summary": summary, "close_form": CloseForm()})


def _managed_institution(request, institution_id: int):
    institution = selectors.get_institution_for_invoices(request.user, institution_id)
    access.deny_unless(access.can_manage_invoices(request.user, institution.pk))
    return institution


@login_required
@require_POST
def period_generate(request, institution_id: int, year: int, month: int):
    institution = _managed_institution(request, institution_id)
    _act(
        request,
        services.invoices_generate,
        "Drafts generated.",
        institution=institution,
        month=_month(year, month),
    )
    return redirect("invoicing:period", institution.pk, year, month)


@login_required
@require_POST
def period_close(request, institution_id: int, year: int, month: int):
    institution = _managed_institution(request, institution_id)
    form = CloseForm(request.POST)
    if form.is_valid():
        _act(
            request,
            services.period_close_checked,
            "Period closed: its invoices are issued and frozen.",
            institution=institution,
            month=_month(year, month),
            acceptance_reason=form.cleaned_data["acceptance_reason"],
        )
    else:
        _form_errors(request, form)
    return redirect("invoicing:period", institution.pk, year, month)


@login_required
@require_GET
def invoice_detail(request, pk: int):
    invoice = selectors.get_invoice_for_user(request.user, pk)
    lines = list(selectors.invoice_lines(invoice))
    return render(
        request,
        "invoicing/invoice.html",
        {
            "invoice": invoice,
            "lines": lines,
            "status": invoice_reconciliation(invoice, lines),
            "stale": selectors.invoice_staleness(invoice),
            "can_manage": access.can_manage_invoices(request.user, invoice.institution_id),
            # After close nothing of the month changes (services._refuse_closed): no action
            # that would be refused is offered.
            "month_closed": is_closed(invoice.institution_id, invoice.month),
            "line_form": LineForm(),
            "void_form": ReasonForm(),
        },
    )


def _managed_invoice(request, pk: int):
    invoice = selectors.get_invoice_for_user(request.user, pk)
    access.deny_unless(access.can_manage_invoices(request.user, invoice.institution_id))
    return invoice


@login_required
@require_POST
def invoice_issue_view(request, pk: int):
    invoice = _managed_invoice(request, pk)
    _act(request, services.invoice_issue, "Invoice issued.", invoice=invoice)
    return redirect("invoicing:invoice", invoice.pk)


@login_required
@require_POST
def invoice_void_view(request, pk: int):
    invoice = _managed_invoice(request, pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("invoicing:invoice", invoice.pk)
    try:
        replacement = services.invoice_void(
            actor=request.user, invoice=invoice, reason=form.cleaned_data["reason"]
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("invoicing:invoice", invoice.pk)
    messages.success(request, f"{invoice.number} voided; its replacement is this draft.")
    return redirect("invoicing:invoice", replacement.pk)


@login_required
@require_POST
def invoice_line_add_view(request, pk: int):
    invoice = _managed_invoice(request, pk)
    form = LineForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        _act(request, services.invoice_line_add, "Line added.", invoice=invoice, **data)
    else:
        _form_errors(request, form)
    return redirect("invoicing:invoice", invoice.pk)


@login_required
@require_POST
def invoice_line_remove_view(request, pk: int, line_pk: int):
    invoice = _managed_invoice(request, pk)
    line = access.get_or_404(invoice.lines.all(), pk=line_pk)
    _act(request, services.invoice_line_remove, "Line removed.", line=line)
    return redirect("invoicing:invoice", invoice.pk)


@login_required
@require_GET
def mine(request):
    return render(request, "invoicing/mine.html", {"lines": selectors.my_lines(request.user)})
