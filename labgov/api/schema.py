"""The OpenAPI schema: every operation also documents the problem+json answers it can give."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

PROBLEM_MEDIA = "application/problem+json"


class FieldErrorSerializer(serializers.Serializer):
    field = serializers.CharField(help_text="The input the error is about (empty: the whole).")
    detail = serializers.CharField()


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details."""

    type = serializers.CharField(help_text="Always about:blank: the status says the kind.")
    title = serializers.CharField(help_text="The HTTP status's phrase.")
    status = serializers.IntegerField()
    detail = serializers.CharField(help_text="What went wrong, in words.")
    code = serializers.CharField(required=False, help_text="A stable code for programs.")
    errors = FieldErrorSerializer(many=True, required=False)


ERRORS = {
    "400": "Invalid input or query parameters (see `errors`).",
    "401": "No token or session, or the token is unknown, expired or revoked.",
    "403": "The object is visible to you but the action is not yours to take "
    "(or the token may only read).",
    "404": "No such object, or it is outside what you may see.",
    "429": "Too many calls with this token; `Retry-After` says how many seconds to wait.",
}
WRITE_ERRORS = {"409": "The action is refused by a rule of labgov (the detail says which)."}


class ApiSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        errors = dict(ERRORS)
        if self.method not in ("GET", "HEAD"):
            errors.update(WRITE_ERRORS)
        for code, description in errors.items():
            if code in responses:
                continue
            body = self._get_response_for_code(ProblemSerializer, code, [PROBLEM_MEDIA])
            body["description"] = description
            responses[code] = body
        return responses


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "labgov.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal token, `lgv_…`, made on your API tokens page.",
        }
