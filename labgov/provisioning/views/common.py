from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

from labgov.core.errors import DomainError


def apply_error(form, exc: DomainError) -> None:
    form.add_error(exc.field if exc.field in form.fields else None, exc.message)


def back_to(request, req):
    """Back to the page the action came from (the review queue or the request)."""
    target = request.POST.get("next", "")
    # Only a path of this site: a bare word would be taken for a URL name by redirect().
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect("provisioning:detail", pk=req.pk)
