from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The operators' view of the installation (Prometheus metrics): it reads the apps it
    counts, so it sits above them and core stays free of them."""

    name = "labgov.ops"
    label = "ops"
