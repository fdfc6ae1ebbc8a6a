"""A request that lost a race for rows answers 503 with Retry-After, not 500.

PostgreSQL breaks a deadlock by failing one of its transactions, and a lock or serialization
failure fails one the same way (SQLite answers "database is locked"). The failed transaction
was rolled back, so asking again is safe and, once the other finishes, succeeds."""

import logging

import psycopg.errors
from django.db import OperationalError

from apps.core.views import busy

log = logging.getLogger(__name__)

RETRYABLE_CAUSES = (
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.LockNotAvailable,
)


def is_contention(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    return isinstance(exc.__cause__, RETRYABLE_CAUSES) or "database is locked" in str(exc)


class ContentionMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not is_contention(exception):
            return None
        log.warning("%s %s lost a race for rows: %s", request.method, request.path, exception)
        return busy(request)
