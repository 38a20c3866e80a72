from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The top floor: the demo seeder knows every app, so no app (and not core) knows it."""

    name = "labgov.demo"
    label = "demo"
