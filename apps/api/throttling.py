"""Rates per API key and per signed-in user (settings REST_FRAMEWORK DEFAULT_THROTTLE_RATES,
from the environment). DRF answers 429 with Retry-After."""

import math

from rest_framework.throttling import SimpleRateThrottle

from apps.tenants.models import ApiKey


class WindowCountThrottle(SimpleRateThrottle):
    """At most `rate` requests in any `duration`, counted in the cache per window.

    DRF's SimpleRateThrottle keeps the time of every request of the last `duration` as one
    list in the cache and reads and writes all of it on each request: thousands of entries at
    the rates partners order at (bench/load.py). This keeps one counter per fixed window
    (`cache.incr`, the same size at any rate) and, so that a burst across a window's edge
    still meets the rate, also counts the previous window's requests, taken as spread evenly
    over it, for the part of it still within `duration` of now, rounded up: the sliding
    window, estimated (the window's own count alone would let twice the rate through
    around its edge)."""

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        window, self.elapsed = divmod(self.now, self.duration)
        current_key = f"{self.key}_{int(window)}"
        previous_key = f"{self.key}_{int(window) - 1}"
        counts = self.cache.get_many([previous_key, current_key])
        self.current = counts.get(current_key, 0)
        self.previous = counts.get(previous_key, 0)
        if self._counted() >= self.num_requests:
            return self.throttle_failure()
        self._count(current_key)
        return True

    def _counted(self) -> int:
        still_inside = (self.duration - self.elapsed) / self.duration
        return self.current + math.ceil(self.previous * still_inside)

    def _count(self, key: str) -> None:
        # Kept two windows: the next one still counts this one.
        if not self.current and self.cache.add(key, 1, 2 * self.duration):
            return
        try:
            self.cache.incr(key)
        except ValueError:  # expired since it was read
            self.cache.set(key, 1, 2 * self.duration)

    def wait(self):
        """Seconds until one more request is let through, if none comes meanwhile."""
        left_in_window = self.duration - self.elapsed
        room = self.num_requests - 1 - self.current
        if room < 0 or not self.previous:
            return left_in_window
        # The previous window's requests fall out as the window slides past them.
        slid_enough = self.duration * (self.previous - room) / self.previous
        return min(max(slid_enough - self.elapsed, 0), left_in_window)


class ApiKeyThrottle(WindowCountThrottle):
    scope = "api_key"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiKey):
            return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
        return None


class UserThrottle(WindowCountThrottle):
    scope = "user"

    def get_cache_key(self, request, view):
        if request.user.is_authenticated and not isinstance(request.auth, ApiKey):
            return self.cache_format % {"scope": self.scope, "ident": request.user.pk}
        return None
