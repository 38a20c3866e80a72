from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "labgov.retention"
    label = "retention"
    verbose_name = "Retention"

    def ready(self):
        from labgov.notifications.kinds import register

        register("retention.warning", "Retention: a volume's due date nears", "warning")
        register("retention.transition", "Retention: a case changed", "info")
        register("retention.approval_needed", "Retention: a deletion awaits approval", "warning")
        register("retention.deleted", "Retention: a volume was deleted", "critical")
        register("retention.refused", "Retention: a deletion was refused", "critical")
