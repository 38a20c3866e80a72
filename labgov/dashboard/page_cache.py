"""Rendered dashboard bodies, kept in the shared cache so a page whose data has not changed is
not computed again.

What is cached is the part of a page below the menu, which carries no CSRF token, no
messages and nothing of the session; the page around it is rendered on every request. The
view authorizes before it asks (a refusal never comes from here) and the key holds:

- the person (user id): never shared, since what a page shows depends on the person's roles;
- the page (its name and the object it is about), whether it is the htmx fragment or the
  whole body, and the query string (every parameter, sorted);
- the UTC date and hour: "today", the default ranges and the forecasts move with them;
- the data version (labgov/core/dataversion.py), stored beside the body rather than in the
  key, so one round trip reads both: a body stored under another version is not used.

A write that changes what a page shows (a sync, a governance change, a membership revoked)
moves the version on when it commits; the time to live is a backstop for text that ages by
itself."""

import hashlib
import logging
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from labgov.core import dataversion

logger = logging.getLogger(__name__)


def key_for(request, page: str) -> str:
    now = timezone.now()
    parts = [
        str(request.user.pk),
        page,
        "fragment" if request.htmx else "body",
        now.strftime("%Y-%m-%dT%H"),
        *(f"{k}={v}" for k, values in sorted(request.GET.lists()) for v in values),
    ]
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
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
