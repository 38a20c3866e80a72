"""Rendered dashboard pages, kept in the shared cache so a page whose data has not changed is
not computed, nor even rendered, again.

A whole page is kept with a placeholder where its CSRF token goes, and each answer gets a
token of its own in its place, so a form on a cached page posts as well as on a fresh one (a
token rendered for an earlier session would be refused). A request with messages waiting to
be shown is answered without the cache. The htmx fragments (filters, sorting) are kept as they
are: they hold no token. The view authorizes before it asks (a refusal never comes from here)
and the key holds:

- the person (user id): never shared, since what a page shows depends on the person's roles;
- the page (its name and the object it is about), whether it is the htmx fragment or the
  whole page, and the query string (every parameter, sorted);
- the UTC date and hour: "today", the default ranges and the forecasts move with them (and an
  institution's own date turns on a UTC hour too);
- the data version (labgov/core/dataversion.py), stored beside the page rather than in the
  key, so one round trip reads both: a page stored under another version is not used.

A write that changes what a page shows (a sync, a governance change, a membership revoked)
moves the version on when it commits; the time to live is a backstop for text that ages by
itself."""

import hashlib
import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.contrib.messages import get_messages
from django.core.cache import cache
from django.middleware.csrf import get_token
from django.utils import timezone

from labgov.core import dataversion

logger = logging.getLogger(__name__)

# Stands for the CSRF token in a cached page (letters, digits and dashes: escaping leaves it).
CSRF_PLACEHOLDER = "labgov-csrf-token-placeholder-5b0f1c9e7a"


def messages_waiting(request) -> bool:
    # Counting loads them without marking them shown: they stay for the page rendered now.
    return len(get_messages(request)) > 0


def with_csrf_token(request, html: str) -> str:
    """A cached page with this request's CSRF token (and its cookie, as rendering sets it)."""
    return html.replace(CSRF_PLACEHOLDER, get_token(request))


def key_for(request, page: str) -> str:
    now = timezone.now()
    parts = [
        str(request.user.pk),
        page,
        "fragment" if request.htmx else "page",
        now.strftime("%Y-%m-%dT%H"),
        sorted(request.GET.lists()),
    ]
    # JSON keeps the parts apart whatever a parameter holds.
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return f"labgov:page:{request.user.pk}:{digest}"


def cached_body(request, page: str, render: Callable[[], str]) -> str:
    """The body `render` would return, from the cache when its data has not changed since."""
    seconds = settings.LABGOV_PAGE_CACHE_SECONDS
    if not seconds:
        return render()
    key = key_for(request, page)
    try:
        if dataversion.has_own_writes():
            version = dataversion.for_read()
            if version is None:
                return render()
            entry = cache.get(key)
        else:
            found = cache.get_many([dataversion.KEY, key])
            version = found.get(dataversion.KEY) or dataversion.current()
            entry = found.get(key)
    except Exception:
        # Without the cache the page is slower, not wrong: compute it.
        logger.exception("The page cache could not be read")
        return render()
    if entry is not None and entry[0] == version:
        return entry[1]
    body = render()
    try:
        cache.set(key, (version, body), seconds)
    except Exception:
        logger.exception("The page cache could not be written")
    return body
