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

        def new_release(sender, **kwargs):
            # Every deploy runs migrate before the web starts (deploy/systemd, compose): pages
            # rendered by the code it replaces are not served by the new one.
            dataversion.bump()

        post_migrate.connect(new_release, sender=self, dispatch_uid="labgov-data-version-release")
