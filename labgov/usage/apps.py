from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "labgov.usage"
    label = "usage"
