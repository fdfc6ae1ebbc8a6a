"""`Idempotency-Key` on every POST: the same key and body replay the first response; the same
key with another body is a 409; a retry while the first is still running is a 409 too.

Keys belong to the organization the call acts for, whichever of its API keys or members sends
them (operator routes: to the operator), so two keys of one organization cannot order twice
with one Idempotency-Key. Keys are kept for 24 hours (older ones are treated as new and
replaced). A request that crashes releases its key, and so does one whose answer cannot be
stored; a claim left unfinished for CLAIM_EXPIRES (the process died) is free again."""

import hashlib
import json
import logging
from datetime import timedelta

from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from apps.api.input import NUL
from apps.api.models import IdempotencyRecord
from apps.api.permissions import current_organization

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
KEPT_FOR = timedelta(hours=24)
# Longer than any request runs: an unfinished claim this old is a crashed process's.
CLAIM_EXPIRES = timedelta(minutes=10)
MAX_KEY_CHARS = 255
PATH_CHARS = IdempotencyRecord._meta.get_field("path").max_length

ORGANIZATION, USER = "organization", "user"


class Replay(Exception):
    def __init__(self, response):
        self.response = response


class Conflict(Exception):
    def __init__(self, detail: str):
        self.detail = detail


def caller_of(request, scope: str = ORGANIZATION) -> str:
    """Whose key space a request's key lives in: "org:<id>", or "user:<id>" with no
    organization (or for operator routes)."""
    if scope == ORGANIZATION:
        organization = current_organization(request)
        if organization is not None:
            return f"org:{organization.pk}"
    return f"user:{request.user.pk}"


def requested(request) -> bool:
    return request.method == "POST" and bool(request.headers.get(HEADER, "").strip())


def begin(request, *, scope: str = ORGANIZATION) -> IdempotencyRecord | None:
    """Claim the key for this request, or raise Replay/Conflict. None when no key was sent."""
    if not requested(request):
        return None
    key = request.headers.get(HEADER, "").strip()
    if len(key) > MAX_KEY_CHARS:
        raise Conflict(f"The Idempotency-Key header is longer than {MAX_KEY_CHARS} characters.")
    if NUL in key:
        raise ValidationError({HEADER: [_("Null characters are not allowed.")]})
    caller, body_hash = caller_of(request, scope), hashlib.sha256(request.body).hexdigest()
    path = request.path[:PATH_CHARS].replace(NUL, "\\0")
    now = timezone.now()
    IdempotencyRecord.objects.filter(caller=caller, key=key, created_at__lt=now - KEPT_FOR).delete()
    IdempotencyRecord.objects.filter(
        caller=caller, key=key, status_code__isnull=True, created_at__lt=now - CLAIM_EXPIRES
    ).delete()
    try:
        with transaction.atomic():
            return IdempotencyRecord.objects.create(
                caller=caller,
                key=key,
                method=request.method,
                path=path,
                body_hash=body_hash,
            )
    except IntegrityError:
        earlier = IdempotencyRecord.objects.filter(caller=caller, key=key).first()
    if earlier is None:  # released between our insert and this read: the retry may claim it
        raise Conflict("A request with this Idempotency-Key was just released; retry.")
    if earlier.body_hash != body_hash or earlier.path != path:
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
    if record is not None and record.pk is not None:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()
        record.pk = None


def _without_nul(value):
    if isinstance(value, str):
        return value.replace(NUL, "\\0")
    if isinstance(value, dict):
        return {_without_nul(name): _without_nul(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value


def storable(data):
    """`data` as the client received it (JSON), with any NUL written as \\0: PostgreSQL's jsonb
    holds no U+0000, in a string or in a key."""
    if data is None:
        return None
    return _without_nul(json.loads(JSONRenderer().render(data)))


def finish(record: IdempotencyRecord | None, response) -> None:
    if record is None or record.pk is None:
        return
    if response.status_code >= 500:  # let the client retry a failure of ours
        abandon(record)
        return
    try:
        record.status_code = response.status_code
        record.response_body = storable(getattr(response, "data", None))
        with transaction.atomic():
            record.save(update_fields=["status_code", "response_body"])
    except (DatabaseError, TypeError, ValueError):
        # The answer goes out; the key is released, not left "still being processed".
        log.exception("Idempotency-Key %r: the response could not be stored", record.key)
        abandon(record)
