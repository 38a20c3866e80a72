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
  whole page, and the parameters the pages read (`page_params`: the range, the lab, the
  table orders, each at most 64 characters; any other parameter is dropped before the page
  sees it, so it neither makes a new entry nor echoes back);
- the UTC date and hour: "today", the default ranges and the forecasts move with them (and an
  institution's own date turns on a UTC hour too);
- the data versions (labgov/core/dataversion.py), stored beside the page rather than in the
  key: the global one (read with the page in one round trip) and those of the viewer's
  institutions (a second): a page stored under other versions is not used.

A write that changes what a page shows (a sync, a governance change, a membership revoked)
moves the versions of the institutions it concerns on when it commits (people, memberships
and writes of unknown reach move the global one): a sync or a change in institution B
retires none of institution A's pages. The time to live is a backstop for text that ages by
itself.

The pages live in the "pages" cache (settings: a Redis instance of their own with an LRU
memory limit in production), under this installation's key prefix; one person stores at most
LABGOV_PAGE_CACHE_PER_PERSON pages an hour, past which their pages are computed and not kept.
Each answer says what the cache did in `X-Labgov-Cache`: hit, miss, or bypass."""

import hashlib
import json
import logging
import re
from collections.abc import Callable

from django.conf import settings
from django.contrib.messages import get_messages
from django.core.cache import caches
from django.http import QueryDict
from django.middleware.csrf import get_token
from django.utils import timezone

from labgov.accounts import access
from labgov.core import dataversion

logger = logging.getLogger(__name__)

# Stands for the CSRF token in a cached page. Only its two slots are filled (the hidden form
# field and the htmx header): the same letters anywhere else (a pod's name) stay as they are.
CSRF_PLACEHOLDER = "labgov-csrf-token-placeholder-5b0f1c9e7a"
_CSRF_SLOTS = re.compile(
    '(name="csrfmiddlewaretoken" value="|"X-CSRFToken": ")' + re.escape(CSRF_PLACEHOLDER) + '"'
)

# What the dashboard pages read from the query string; nothing else reaches them.
PAGE_PARAMS = frozenset({"start", "end", "lab", "format", "table"})
_SORT_PARAM = re.compile(r"[a-z][a-z0-9_]{0,39}_sort")
MAX_PARAM_LENGTH = 64
HEADER = "X-Labgov-Cache"


def page_cache():
    return caches["pages"]


def page_cache_on() -> bool:
    return bool(settings.LABGOV_PAGE_CACHE_SECONDS)


def page_params(request) -> QueryDict:
    """The parameters dashboard pages read (the last value of each, at most 64 characters);
    every other one is dropped, so no parameter of an attacker's makes a cache entry or is
    echoed back in the page's links."""
    clean = QueryDict(mutable=True)
    for name, values in request.GET.lists():
        if not (name in PAGE_PARAMS or _SORT_PARAM.fullmatch(name)):
            continue
        if values and len(values[-1]) <= MAX_PARAM_LENGTH:
            clean[name] = values[-1]
    clean._mutable = False
    return clean


def messages_waiting(request) -> bool:
    # Counting loads them without marking them shown: they stay for the page rendered now.
    return len(get_messages(request)) > 0


def with_csrf_token(request, html: str) -> str:
    """A cached page with this request's CSRF token (and its cookie, as rendering sets it) in
    its token slots."""
    if CSRF_PLACEHOLDER not in html:
        return html
    token = get_token(request)
    return _CSRF_SLOTS.sub(lambda m: f'{m.group(1)}{token}"', html)


def key_for(request, page: str) -> str:
    now = timezone.now()
    parts = [
        str(request.user.pk),
        page,
        "fragment" if request.htmx else "page",
        now.strftime("%Y-%m-%dT%H"),
        sorted(page_params(request).lists()),
    ]
    # JSON keeps the parts apart whatever a parameter holds.
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return f"labgov:page:{request.user.pk}:{digest}"


def _may_store(cache, request) -> bool:
    """Whether this person may store one more page this hour."""
    key = f"labgov:page-stores:{request.user.pk}:{timezone.now():%Y%m%d%H}"
    if cache.add(key, 1, 3600):
        return True
    try:
        return cache.incr(key) <= settings.LABGOV_PAGE_CACHE_PER_PERSON
    except ValueError:  # expired in between
        return cache.add(key, 1, 3600)


def cached_body(request, page: str, render: Callable[[], str]) -> str:
    """The body `render` would return, from the cache when its data has not changed since.
    Says what the cache did on the request (`cache_state`)."""
    request.labgov_cache = "bypass"
    seconds = settings.LABGOV_PAGE_CACHE_SECONDS
    if not seconds:
        return render()
    cache = page_cache()
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
        if _current(entry, version):
            request.labgov_cache = "hit"
            return entry[2]
        # Read before the page is computed: a write committing meanwhile leaves it stored
        # under versions already dead.
        institutions = dataversion.versions(access.institutions_of(request.user))
    except Exception:
        # Without the cache the page is slower, not wrong: compute it.
        logger.exception("The page cache could not be read")
        return render()
    body = render()
    try:
        if _may_store(cache, request):
            cache.set(key, (version, institutions, body), seconds)
            request.labgov_cache = "miss"
    except Exception:
        logger.exception("The page cache could not be written")
    return body


def _current(entry, version: int) -> bool:
    """Whether a stored page was computed at the current global version and at the current
    versions of its viewer's institutions (a second round trip, for a page that has one). The
    set of those institutions is the stored one: it changes only with memberships, whose
    writes move the global version."""
    if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == version):
        return False
    stored = entry[1]
    if not stored:
        return True
    found = page_cache().get_many(list(stored))
    return all(found.get(key) == value for key, value in stored.items())


def cache_state(request) -> str:
    return getattr(request, "labgov_cache", "bypass")
