from django.apps import AppConfig


class IdleConfig(AppConfig):
    name = "labgov.idle"
    label = "idle"
    verbose_name = "Idle pods and right-sizing"

    def ready(self):
        from labgov.notifications.kinds import register

        register("idle.stop_warning", "Your idle pod will be stopped", "critical")
        register("idle.stopped", "Your idle pod was stopped", "warning")
        register("idle.kept_again", "An idle pod was kept running a second time", "warning")
        register(
            "idle.stop_refused", "An idle pod was not stopped (container disk only)", "warning"
        )
