from django.contrib import admin

from labgov.core.admin import ReadOnlyAdmin
from labgov.notifications.models import (
    EmailChoice,
    LabWebhook,
    MutedKind,
    Notification,
    WebhookDelivery,
)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "recipient",
        "kind",
        "severity",
        "subject",
        "read_at",
        "emailed_at",
        "email_skipped",
    )
    list_filter = ("severity", "kind", "email_skipped")
    search_fields = ("subject", "recipient__username", "dedupe_key", "thread_key")
    raw_id_fields = ("recipient", "lab")


@admin.register(EmailChoice)
class EmailChoiceAdmin(ReadOnlyAdmin):
    list_display = ("user", "delivery", "updated_at")
    list_filter = ("delivery",)
    search_fields = ("user__username",)
    raw_id_fields = ("user",)


@admin.register(MutedKind)
class MutedKindAdmin(ReadOnlyAdmin):
    list_display = ("user", "kind", "created_at")
    search_fields = ("user__username", "kind")
    raw_id_fields = ("user",)


# Read-only: a webhook is governance and changes only through its page (audited there); the
# encrypted URL is never shown.
@admin.register(LabWebhook)
class LabWebhookAdmin(ReadOnlyAdmin):
    list_display = ("lab", "url_display", "is_active", "min_severity", "created_by", "updated_at")
    list_filter = ("is_active", "min_severity")
    exclude = ("url_encrypted",)
    list_select_related = ("lab", "created_by")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "webhook", "dedupe_key", "status", "attempts", "sent_at")
    list_filter = ("status",)
    search_fields = ("dedupe_key", "last_error")
    list_select_related = ("webhook__lab",)
