from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_GET

from labgov.accounts import access
from labgov.audit.models import AuditEvent
from labgov.core.params import text_param


@login_required
@require_GET
def audit_log(request):
    scope = access.scope_for(request.user)
    access.deny_unless(bool(scope.money_institutions))
    events = AuditEvent.objects.filter(institution_id__in=scope.money_institutions).select_related(
        "actor"
    )
    if action := text_param(request.GET, "action"):
        events = events.filter(action__startswith=action)
    page = Paginator(events, 100).get_page(request.GET.get("page"))
    return render(request, "audit/log.html", {"page": page, "action": action})
