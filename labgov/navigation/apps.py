from django.apps import AppConfig


class NavigationConfig(AppConfig):
    """The menu names every app's pages, so it lives above them rather than in core."""

    name = "labgov.navigation"
    label = "navigation"
