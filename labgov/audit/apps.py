from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "labgov.audit"
    label = "audit"
