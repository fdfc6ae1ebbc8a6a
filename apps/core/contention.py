"""A request that lost a race for rows answers 503 with Retry-After, not 500; a job that lost
one runs again a little later instead of dying.

PostgreSQL breaks a deadlock by failing one of its transactions, and a lock or serialization
failure fails one the same way (SQLite answers "database is locked"). The failed transaction
was rolled back, so asking again is safe and, once the other finishes, succeeds."""

import logging
import random

import psycopg.errors
from celery import Task
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


# A job that lost a race runs again after about 0.5, 1, 2 … 30 s (with jitter, so two jobs that
# deadlocked on each other do not meet again), up to this many times.
JOB_CONTENTION_RETRIES = 8
JOB_RETRY_FIRST_S = 0.5
JOB_RETRY_MOST_S = 30.0


def job_retry_countdown(retries: int) -> float:
    ceiling = min(JOB_RETRY_MOST_S, JOB_RETRY_FIRST_S * 2**retries)
    return random.uniform(ceiling / 2, ceiling)


class RetryOnContention(Task):
    """The base of every Celery job (portal/celery.py): one that lost a race for rows is run
    again with backoff. Jobs reload their rows and re-check their state, so running one again
    is safe; left to die, it stranded its host until a sweep minutes later."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except OperationalError as exc:
            if not is_contention(exc) or self.request.retries >= JOB_CONTENTION_RETRIES:
                raise
            log.warning("%s%r lost a race for rows, running it again: %s", self.name, args, exc)
            raise self.retry(
                exc=exc,
                countdown=job_retry_countdown(self.request.retries),
                max_retries=JOB_CONTENTION_RETRIES,
            ) from exc
