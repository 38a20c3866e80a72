from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "labgov.provisioning"
    label = "provisioning"
    verbose_name = "Provisioning"
