from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "labgov.dashboard"
    label = "dashboard"
