from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labgov.accounts import access
from labgov.accounts.models import Lab
from labgov.core.errors import DomainError
from labgov.notifications.forms import MutedKindsForm, WebhookForm
from labgov.notifications.models import LabWebhook, MutedKind, Notification
from labgov.notifications.services import (
    email_delivery_of,
    email_delivery_save,
    muted_kinds_save,
    notification_mark_read,
    notifications_mark_all_read,
    webhook_save,
    webhook_send_test,
)


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


@login_required
@require_http_methods(["GET", "POST"])
def mute_settings(request):
    muted = list(MutedKind.objects.filter(user=request.user).values_list("kind", flat=True))
    initial = {"muted": muted, "delivery": email_delivery_of(request.user)}
    form = MutedKindsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            email_delivery_save(actor=request.user, delivery=form.cleaned_data["delivery"])
            muted_kinds_save(actor=request.user, kinds=form.cleaned_data["muted"])
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else "muted", exc.message)
        else:
            messages.success(
                request, "Saved: your notifications are emailed as chosen, muted kinds never."
            )
            return redirect("notifications:settings")
    return render(request, "notifications/settings.html", {"form": form})


def _lab_to_manage(user, lab_id: int) -> Lab:
    """The lab, if the person may see it (404 otherwise) and configure it (403 otherwise)."""
    lab = access.get_or_404(
        Lab.objects.filter(access.labs_q(user)).select_related("institution"), pk=lab_id
    )
    access.deny_unless(access.can_manage_lab(user, lab.pk))
    return lab


@login_required
@require_http_methods(["GET", "POST"])
def lab_webhook(request, lab_id: int):
    lab = _lab_to_manage(request.user, lab_id)
    webhook = LabWebhook.objects.filter(lab=lab).first()
    initial = (
        {"is_active": webhook.is_active, "min_severity": webhook.min_severity} if webhook else {}
    )
    form = WebhookForm(request.POST or None, initial=initial, url_required=webhook is None)
    if request.method == "POST" and form.is_valid():
        try:
            webhook_save(actor=request.user, lab=lab, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, "Webhook saved. Send a test message to check it.")
            return redirect("notifications:lab_webhook", lab_id=lab.pk)
    deliveries = webhook.deliveries.all()[:20] if webhook else []
    return render(
        request,
        "notifications/lab_webhook.html",
        {"lab": lab, "webhook": webhook, "form": form, "deliveries": deliveries},
    )


@login_required
@require_POST
def lab_webhook_test(request, lab_id: int):
    lab = _lab_to_manage(request.user, lab_id)
    webhook = access.get_or_404(LabWebhook.objects.select_related("lab"), lab=lab)
    ok, message = webhook_send_test(actor=request.user, webhook=webhook)
    (messages.success if ok else messages.error)(request, message)
    return redirect("notifications:lab_webhook", lab_id=lab.pk)
