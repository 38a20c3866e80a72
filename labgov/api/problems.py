"""Every refused call answers in problem+json (RFC 9457): `type`, `title` (the status's
phrase), `status`, `detail` (what went wrong, in words) and, for invalid input, `errors`
(one per field). The same shape Runpod's API answers with, which labgov already reads."""

import logging
from http import HTTPStatus

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from labgov.core.errors import DomainError

logger = logging.getLogger("django.request")

PROBLEM_TYPE = "application/problem+json"

NOT_FOUND = "No such object, or it is not yours to see."
FORBIDDEN = "You may see this, but not do that."


def problem(status_code: int, detail: str, *, code: str = "", errors=None, headers=None):
    body = {
        "type": "about:blank",
        "title": HTTPStatus(status_code).phrase,
        "status": status_code,
        "detail": detail,
    }
    if code:
        body["code"] = code
    if errors:
        body["errors"] = errors
    return Response(body, status=status_code, headers=headers, content_type=PROBLEM_TYPE)


def field_errors(detail, prefix: str = "") -> list[dict]:
    """DRF's or a form's nested error detail as a flat list of {field, detail}."""
    out: list[dict] = []
    if isinstance(detail, dict):
        for name, value in detail.items():
            field = f"{prefix}.{name}" if prefix else str(name)
            if name in ("non_field_errors", "__all__"):
                field = prefix
            out.extend(field_errors(value, field))
    elif isinstance(detail, list):
        for value in detail:
            out.extend(field_errors(value, prefix))
    else:
        out.append({"field": prefix, "detail": str(detail)})
    return out


def _headers(response) -> dict:
    return {k: v for k, v in response.items() if k.lower() != "content-type"}


def handle(exc, context):
    if isinstance(exc, DomainError):
        reasons = getattr(exc, "reasons", None) or [exc.message]
        errors = [{"field": exc.field or "", "detail": r} for r in reasons]
        return problem(status.HTTP_409_CONFLICT, exc.message, code="refused", errors=errors)
    if isinstance(exc, Http404 | exceptions.NotFound):
        return problem(status.HTTP_404_NOT_FOUND, NOT_FOUND, code="not_found")
    if isinstance(exc, PermissionDenied):
        return problem(status.HTTP_403_FORBIDDEN, FORBIDDEN, code="permission_denied")
    response = exception_handler(exc, context)
    if response is None:
        # Not a refusal: labgov failed. Logged with its traceback as Django logs a 500, and
        # answered in the API's own shape, never an HTML page.
        logger.error("API call failed", exc_info=exc, extra={"request": context.get("request")})
        return problem(
            status.HTTP_500_INTERNAL_SERVER_ERROR,
            "labgov failed to answer this call; the failure is logged. Try again later.",
            code="server_error",
        )
    if isinstance(exc, exceptions.ValidationError):
        return problem(
            response.status_code,
            "The request's values are not valid; see errors.",
            code="invalid",
            errors=field_errors(exc.detail),
            headers=_headers(response),
        )
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    if isinstance(exc, exceptions.PermissionDenied) and str(detail) == str(
        exceptions.PermissionDenied.default_detail
    ):
        detail = FORBIDDEN
    code = getattr(detail, "code", "") or ""
    return problem(response.status_code, str(detail), code=str(code), headers=_headers(response))
