from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "labgov.core"
    label = "core"
