from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "labgov.core"
    label = "core"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from labgov.core import dataversion
        from labgov.core.append_only import ensure_sqlite_triggers

        dataversion.connect()

        def triggers(sender, using="default", **kwargs):
            ensure_sqlite_triggers(using)

        post_migrate.connect(triggers, dispatch_uid="labgov-append-only-triggers")
