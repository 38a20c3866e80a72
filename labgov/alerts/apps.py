from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "labgov.alerts"
    label = "alerts"
    verbose_name = "Alerts"
