from django.apps import AppConfig


class UtilizationConfig(AppConfig):
    name = "labgov.utilization"
    label = "utilization"
    verbose_name = "GPU utilization"
