"""The catalog as its readers get it, kept whole in the shared cache: the API's list of flavors
(per park and filters) and the catalog page as a visitor (nobody signed in) gets it, per
language and address. Building them (the queries, the serializer, the templates) was nearly all
of such a request's time, and they change far less often than they are read.

A kept read holds the versions of what it shows as they were before it was built, free room's
(`free_room_changed`: allocations, nodes, pools) and the catalog rows' (`catalog_changed`:
accelerator models, flavor families, flavors, regions, prices), and the moment the next
scheduled price takes effect (which changes the prices in force without a write). A reader
takes it only while both versions are still the current ones and that moment has not come;
otherwise it builds the read again and keeps that. A read built while a change commits is kept
under the version from before the change, so no reader takes it once the change shows. A kept
read lives as long as free room's count (`FREE_ROOM_CACHED_FOR`): a change made past the
services and the models' signals (a queryset's update) shows as late as it does there.

Every gunicorn worker shares the cache (Redis in production), so a change one worker makes
shows on the next request whichever worker answers it.
"""

import hashlib
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from django.contrib.messages import get_messages
from django.core.cache import cache
from django.http import HttpResponse
from django.middleware.csrf import get_token
from django.utils import timezone
from django.utils.translation import get_language

from apps.catalog.selectors import (
    CATALOG_VERSION_KEY,
    FREE_ROOM_CACHED_FOR,
    FREE_ROOM_VERSION_KEY,
    next_price_start,
    version_in,
)

Read = TypeVar("Read")

# What a page kept for every visitor holds where each visitor's own CSRF token goes (the layout's
# forms and its HTMX headers): as long as a token, of characters a token has, so that escaping
# leaves it as it is; a request's own token replaces it before the page leaves.
CSRF_TOKEN_HOLE = "keptpagecsrftokenhole".ljust(64, "0")


def kept(kind: str, identity: tuple, build: Callable[[], Read]) -> Read:
    """The read of `kind` for `identity` (everything that tells two such reads apart: the park,
    the filters, the language…) as `build()` made it, taken from the cache while nothing it
    shows has changed since; one round trip to the cache when it has not."""
    digest = hashlib.blake2b(repr(identity).encode(), digest_size=16).hexdigest()
    key = f"catalog:kept:{kind}:{digest}"
    found = cache.get_many([FREE_ROOM_VERSION_KEY, CATALOG_VERSION_KEY, key])
    versions = (
        version_in(found, FREE_ROOM_VERSION_KEY),
        version_in(found, CATALOG_VERSION_KEY),
    )
    stored = found.get(key)
    if stored is not None and stored[0] == versions and time.time() < stored[1]:
        return stored[2]
    # The deadline is read before building: a price that starts while the read is built makes
    # it out of date at once, not a time to live later.
    now = timezone.now()
    until = now + timedelta(seconds=FREE_ROOM_CACHED_FOR)
    next_start = next_price_start(now)
    if next_start is not None:
        until = min(until, next_start)
    read = build()
    cache.set(key, (versions, until.timestamp(), read), FREE_ROOM_CACHED_FOR)
    return read


def is_plain_visit(request) -> bool:
    """Whether the page at this address is the same for whoever asks: nobody signed in (no
    organization, no account menu) and no message waiting to be shown once."""
    return (
        request.method == "GET"
        and not request.user.is_authenticated
        and not len(get_messages(request))
    )


def visitor_page(request, render: Callable[[dict], str]) -> HttpResponse:
    """The page for a plain visit (`is_plain_visit`), rendered once per language, address and
    HTMX or not by `render(extra context)` with a hole for the CSRF token, which is the only
    thing in it that is the visitor's own: this request's token fills it."""
    identity = (get_language(), bool(getattr(request, "htmx", False)), request.get_full_path())
    html = kept("visitor-page", identity, lambda: render({"csrf_token": CSRF_TOKEN_HOLE}))
    if CSRF_TOKEN_HOLE in html:  # an HTMX fragment has no form that posts
        html = html.replace(CSRF_TOKEN_HOLE, get_token(request))
    return HttpResponse(html)
