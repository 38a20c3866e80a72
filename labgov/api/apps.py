from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "labgov.api"
    label = "api"
    verbose_name = "REST API"

    def ready(self):
        from labgov.api import schema  # noqa: F401 - registers the token's OpenAPI scheme
