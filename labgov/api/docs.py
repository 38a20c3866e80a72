"""The schema and its docs page: public (they describe the API; they call nothing)."""

from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny


class SchemaView(SpectacularAPIView):
    """The OpenAPI 3.1 schema (YAML by default, JSON with `?format=json`)."""

    authentication_classes = []
    permission_classes = [AllowAny]


class DocsView(SpectacularSwaggerSplitView):
    """Swagger UI from vendored files (drf-spectacular-sidecar), its setup script served as a
    file of its own (`?script`), so the page runs under the site's strict CSP unchanged. A
    signed-in person can try calls with their session (the script sends the CSRF token)."""

    permission_classes = [AllowAny]
    template_name = "api/docs.html"
