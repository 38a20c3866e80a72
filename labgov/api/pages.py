"""A person's own API tokens page: make one (its text is shown once), see when each was last
used, revoke one."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from labgov.accounts import access
from labgov.api.forms import TokenForm
from labgov.api.models import ApiToken
from labgov.api.services import token_create, token_revoke
from labgov.core.errors import DomainError


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request):
    form = TokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            token, created = token_create(actor=request.user, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at", "-id")
    return render(request, "api/tokens.html", {"form": form, "tokens": tokens, "created": created})


@login_required
@require_POST
def token_revoke_view(request, pk: int):
    token = access.get_or_404(ApiToken.objects.filter(user=request.user), pk=pk)
    token_revoke(actor=request.user, token=token)
    messages.success(request, f"Revoked {token.name}: calls with it are refused from now on.")
    return redirect("api_tokens")
