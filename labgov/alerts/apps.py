from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "labgov.alerts"
    label = "alerts"
    verbose_name = "Alerts"

    def ready(self):
        # One notification kind per rule, so people can mute each by name. An alert's own
        # severity decides how it is sent (critical: emailed at once); this is the default.
        from labgov.alerts.models import Kind
        from labgov.notifications.kinds import register

        for kind in Kind:
            register(f"alert.{kind.value}", f"Alert: {kind.label}", "warning")
        # A pod's owner is told when someone else stops it. Nobody terminates a pod from an
        # alert: its deletion goes through a retention case, whose transitions tell the owner.
        register("pod.stopped_by_other", "Someone else stopped your pod", "warning")
