"""`Idempotency-Key` on every POST: the same key and body replay the first response; the same
key with another body is a 409; a retry while the first is still running is a 409 too.
Keys are kept for 24 hours (older ones are treated as new and replaced)."""

import hashlib
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.response import Response

from apps.api.models import IdempotencyRecord
from apps.tenants.models import ApiKey

HEADER = "Idempotency-Key"
KEPT_FOR = timedelta(hours=24)


class Replay(Exception):
    def __init__(self, response):
        self.response = response


class Conflict(Exception):
    def __init__(self, detail: str):
        self.detail = detail


def caller_of(request) -> str:
    if isinstance(request.auth, ApiKey):
        return f"key:{request.auth.pk}"
    return f"user:{request.user.pk}"


def begin(request) -> IdempotencyRecord | None:
    """Claim the key for this request, or raise Replay/Conflict. None when no key was sent."""
    key = request.headers.get(HEADER, "").strip()
    if request.method != "POST" or not key:
        return None
    if len(key) > 255:
        raise Conflict("The Idempotency-Key header is longer than 255 characters.")
    caller, body_hash = caller_of(request), hashlib.sha256(request.body).hexdigest()
    IdempotencyRecord.objects.filter(
        caller=caller, key=key, created_at__lt=timezone.now() - KEPT_FOR
    ).delete()
    try:
        with transaction.atomic():
            return IdempotencyRecord.objects.create(
                caller=caller,
                key=key,
                method=request.method,
                path=request.path,
                body_hash=body_hash,
            )
    except IntegrityError:
        earlier = IdempotencyRecord.objects.get(caller=caller, key=key)
    if earlier.body_hash != body_hash or earlier.path != request.path:
        raise Conflict("This Idempotency-Key was used with another request.") from None
    if earlier.status_code is None:
        raise Conflict("A request with this Idempotency-Key is still being processed.") from None
    response = Response(earlier.response_body, status=earlier.status_code)
    if earlier.status_code >= 400:
        response.content_type = "application/problem+json"
    response["Idempotent-Replayed"] = "true"
    raise Replay(response) from None


def abandon(record: IdempotencyRecord | None) -> None:
    """The view crashed: free the key so that a retry runs again."""
    if record is not None:
        record.delete()


def finish(record: IdempotencyRecord | None, response) -> None:
    if record is None:
        return
    if response.status_code >= 500:  # let the client retry a failure of ours
        record.delete()
        return
    record.status_code = response.status_code
    record.response_body = getattr(response, "data", None)
    record.save(update_fields=["status_code", "response_body"])
