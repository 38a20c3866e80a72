from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from labgov.accounts import access
from labgov.notifications.models import Notification
from labgov.notifications.services import notification_mark_read, notifications_mark_all_read


@login_required
@require_GET
def notification_list(request):
    notifications = Notification.objects.visible_to(request.user)
    page = Paginator(notifications, 50).get_page(request.GET.get("page"))
    return render(request, "notifications/list.html", {"page": page})


@login_required
@require_GET
def unread_badge(request):
    unread = Notification.objects.visible_to(request.user).unread().count()
    return render(request, "notifications/list.html#badge", {"unread": unread})


@login_required
@require_POST
def notification_open(request, pk: int):
    notification = access.get_or_404(Notification.objects.visible_to(request.user), pk=pk)
    notification_mark_read(user=request.user, notification=notification)
    target = notification.url
    if not target or not url_has_allowed_host_and_scheme(target, allowed_hosts=None):
        target = "notifications:list"
    return redirect(target)


@login_required
@require_POST
def mark_all_read(request):
    notifications_mark_all_read(user=request.user)
    return redirect("notifications:list")
