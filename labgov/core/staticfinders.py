"""The installed apps' static files labgov serves. Some apps ship files no labgov page loads:
Django REST framework's browsable API (labgov's API answers JSON only, DEFAULT_RENDERER_CLASSES),
django-htmx's copies of htmx (labgov vendors its own under static/), and the sidecar's ReDoc
(the API docs page is Swagger UI). collectstatic hashed and compressed them with every deploy
and production kept them; `manage.py findstatic` and DEBUG's static view still find them."""

from django.contrib.staticfiles.finders import AppDirectoriesFinder

UNSERVED = ("rest_framework/*", "django_htmx/*", "drf_spectacular_sidecar/redoc/*")


class ServedAppDirectoriesFinder(AppDirectoriesFinder):
    def list(self, ignore_patterns):
        return super().list([*(ignore_patterns or ()), *UNSERVED])
