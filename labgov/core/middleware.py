"""Request handling shared by every page."""

import logging

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404
from django.utils.cache import patch_vary_headers
from django.views import defaults

logger = logging.getLogger("django.request")


class HtmxHistoryMiddleware:
    """htmx asks for a whole page when it restores one from history (the back button after
    a date range or a sort pushed its URL, with no snapshot left): it sends `HX-Request`
    with `HX-History-Restore-Request`, and a view that answers htmx with its fragment would
    put the fragment where the page was. Such a request is served as a plain page. Placed
    before django-htmx's middleware. Responses vary on HX-Request, so a browser's cache never
    serves a fragment for a page or the other way round."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.META.get("HTTP_HX_HISTORY_RESTORE_REQUEST") == "true":
            request.META.pop("HTTP_HX_REQUEST", None)
            request.__dict__.pop("headers", None)  # read again from META when next asked
        response = self.get_response(request)
        patch_vary_headers(response, ["HX-Request"])
        return response


class RealErrorPagesMiddleware:
    """With DEBUG on (`make run`), Django answers a 404 and an exception with its technical
    pages; the demo shows labgov's own 404 and 500 pages instead, as production does (the
    exception is still logged with its traceback). A 403 is labgov's own page either way."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        # A path no URL matches never reaches a view (and process_exception).
        if (
            settings.DEBUG
            and response.status_code == 404
            and getattr(request, "resolver_match", None) is None
        ):
            return defaults.page_not_found(request, Http404())
        return response

    def process_exception(self, request, exception):
        if not settings.DEBUG:
            return None
        if isinstance(exception, Http404):
            return defaults.page_not_found(request, exception)
        if isinstance(exception, PermissionDenied | BadRequest | SuspiciousOperation):
            return None  # Django answers these with their own pages already
        logger.error(
            "Internal Server Error: %s",
            request.path,
            exc_info=exception,
            extra={"request": request},
        )
        return defaults.server_error(request)
