"""The schema and its docs page: public (they describe the API; they call nothing)."""

import functools
import json
from pathlib import Path

import yaml
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

SCHEMA_FILE = Path(__file__).with_name("openapi-v1.yaml")


@functools.cache
def _schema(as_json: bool) -> bytes:
    text = SCHEMA_FILE.read_bytes()
    return json.dumps(yaml.safe_load(text)).encode() if as_json else text


class SchemaView(APIView):
    """The OpenAPI 3.1 schema: the file checked into the repo (a test fails when it drifts
    from the code), YAML by default, JSON with `?format=json`."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request):
        as_json = request.query_params.get("format") == "json"
        return HttpResponse(
            _schema(as_json),
            content_type="application/vnd.oai.openapi+json" if as_json else "application/yaml",
        )


class DocsView(SpectacularSwaggerSplitView):
    """Swagger UI from vendored files (drf-spectacular-sidecar), its setup script served as a
    file of its own (`?script`), so the page needs no inline script or style. A signed-in
    person can try calls with their session (the script sends the CSRF token)."""

    permission_classes = [AllowAny]
    template_name = "api/docs.html"
