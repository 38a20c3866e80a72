"""The institutions a request's writes concern, for the page cache's data versions."""

from labgov.accounts import access
from labgov.core import dataversion


class WriteScopeMiddleware:
    """Every write made while answering a request counts against the institutions of the
    person signed in (`access.write_institutions`, read when the write commits: the person
    may be a token's, set by the API's authentication later), so a change in institution B
    retires none of institution A's cached pages. Writes of staff and anonymous visitors
    concern every institution. After AuthenticationMiddleware."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with dataversion.scope(lambda: access.write_institutions(getattr(request, "user", None))):
            return self.get_response(request)
