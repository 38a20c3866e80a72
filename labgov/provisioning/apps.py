from django.apps import AppConfig

# Kinds of notification this app sends (events.py), with the label people see when muting
# them and their severity: "critical" is emailed at once, the others in the daily digest.
NOTIFICATION_KINDS = {
    "provisioning.submit": ("A request was submitted", "warning"),
    "provisioning.auto_approve": ("A request was approved automatically", "info"),
    "provisioning.first_approval": ("A request needs a second approver", "warning"),
    "provisioning.approve": ("A request was approved", "info"),
    "provisioning.deny": ("A request was denied", "info"),
    "provisioning.cancel": ("A request was cancelled", "info"),
    "provisioning.expire": ("A request expired", "info"),
    "provisioning.provision": ("A request is being created on Runpod", "info"),
    "provisioning.provisioned": ("A request is running on Runpod", "info"),
    "provisioning.fail": ("A request could not be created on Runpod", "critical"),
    "provisioning.retry": ("A request is being retried", "info"),
}


class ProvisioningConfig(AppConfig):
    name = "labgov.provisioning"
    label = "provisioning"
    verbose_name = "Provisioning"

    def ready(self):
        from labgov.notifications.kinds import register

        for kind, (label, severity) in NOTIFICATION_KINDS.items():
            register(kind, label, severity)
