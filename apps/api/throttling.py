"""Rates per API key and per signed-in user (settings REST_FRAMEWORK DEFAULT_THROTTLE_RATES,
from the environment). DRF answers 429 with Retry-After."""

from rest_framework.throttling import SimpleRateThrottle

from apps.tenants.models import ApiKey


class ApiKeyThrottle(SimpleRateThrottle):
    scope = "api_key"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiKey):
            return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
        return None


class UserThrottle(SimpleRateThrottle):
    scope = "user"

    def get_cache_key(self, request, view):
        if request.user.is_authenticated and not isinstance(request.auth, ApiKey):
            return self.cache_format % {"scope": self.scope, "ident": request.user.pk}
        return None
