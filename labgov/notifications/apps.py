from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "labgov.notifications"
    label = "notifications"
    verbose_name = "Notifications"
