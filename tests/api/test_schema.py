"""The OpenAPI schema: generated from the code, checked into the repo, public with its docs
page, and every operation documents its permissions and its problem+json refusals."""

from pathlib import Path

import yaml
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer

CHECKED_IN = Path(__file__).resolve().parents[2] / "labgov" / "api" / "openapi-v1.yaml"
REGENERATE = "DEBUG=1 .venv/bin/python manage.py spectacular --file labgov/api/openapi-v1.yaml"


def _generated() -> bytes:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return OpenApiYamlRenderer().render(schema, renderer_context={})


def test_checked_in_schema_matches_the_code():
    assert CHECKED_IN.read_bytes() == _generated(), f"the schema drifted; run: {REGENERATE}"


def test_schema_is_openapi_31_and_every_operation_says_who_and_what_fails():
    schema = yaml.safe_load(CHECKED_IN.read_text())
    assert schema["openapi"].startswith("3.1")
    operations = [
        (path, method, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(operations) >= 25
    for path, method, op in operations:
        assert op.get("description"), f"{method} {path} says nothing of who may call it"
        for code in ("401", "403", "404", "429"):
            content = op["responses"][code]["content"]
            assert "application/problem+json" in content, (method, path, code)
        if method == "post":
            assert "409" in op["responses"], (method, path)


def test_schema_and_docs_are_public_and_the_rest_is_not(client):
    assert client.get("/api/v1/schema/").status_code == 200
    assert client.get("/api/v1/schema/?format=json").json()["openapi"].startswith("3.1")
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "drf_spectacular_sidecar" in html and "http" not in html.replace("http-equiv", "")
    script = client.get("/api/v1/docs/?script=")
    assert script.status_code == 200 and "SwaggerUIBundle" in script.content.decode()
    assert client.get("/api/v1/labs/").status_code == 401
