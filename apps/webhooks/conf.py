"""The webhook settings, with their defaults. Read at call time, so tests may change them."""

from django.conf import settings


def allow_http() -> bool:
    """Plain-HTTP endpoint URLs are accepted only when this is true: by default with DEBUG on
    (a receiver on a laptop); production leaves it off, so payloads and signatures travel
    over TLS only."""
    return bool(getattr(settings, "LOAM_WEBHOOKS_ALLOW_HTTP", settings.DEBUG))


def allow_private() -> bool:
    """Deliveries to loopback, private or link-local addresses (the park's own network) are
    refused unless this is true: by default with DEBUG on; tests that run a receiver on
    127.0.0.1 turn it on."""
    return bool(getattr(settings, "LOAM_WEBHOOKS_ALLOW_PRIVATE", settings.DEBUG))


def backoff_base_s() -> float:
    return float(getattr(settings, "LOAM_WEBHOOK_BACKOFF_BASE_S", 30))


def max_attempts() -> int:
    return int(getattr(settings, "LOAM_WEBHOOK_MAX_ATTEMPTS", 6))


TIMEOUT_S = 10  # one POST: connect plus read
