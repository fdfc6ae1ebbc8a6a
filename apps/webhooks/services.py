"""Outbound webhooks: endpoints, events, deliveries and their signatures.

A state change calls `emit_event(...)` inside its own transaction; one delivery row per
subscribed active endpoint is written there, and `apps.webhooks.tasks.deliver` POSTs each one
after commit. Each POST is signed:

    Loam-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}." + body)>

The retry loop lives in `record_attempt`: a failed attempt schedules the next one on commit with
`deliver.apply_async(countdown=...)`, until LOAM_WEBHOOK_MAX_ATTEMPTS. (Not Celery's `retry()`:
under eager mode with `task_eager_propagates` it raises instead of running again, and a self
re-dispatch behaves the same in a worker and in tests. Eager mode ignores the countdown, so
tests also set LOAM_WEBHOOK_BACKOFF_BASE_S=0 to keep `next_attempt_at` honest.)
"""

import hashlib
import hmac
import secrets
import time
import uuid
from collections import defaultdict
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.transactions import in_transaction, on_commit_task, written_on_leaving
from apps.core.transitions import transition
from apps.tenants.access import authorize
from apps.tenants.models import Organization
from apps.tenants.roles import Action
from apps.webhooks import conf
from apps.webhooks.models import (
    DELIVERY_TRANSITIONS,
    EVENT_TYPES,
    DeliveryState,
    WebhookDelivery,
    WebhookEndpoint,
)
from apps.webhooks.selectors import active_endpoints
from apps.webhooks.validators import validate_event_types, validate_url

SECRET_PREFIX = "whsec_"
SIGNATURE_HEADER = "Loam-Signature"
EVENT_HEADER = "Loam-Event"
DELIVERY_HEADER = "Loam-Delivery"
SIGNATURE_VERSION = "v1"


# --- Signatures ------------------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of `f"{timestamp}.".encode() + body` under `secret`."""
    message = f"{int(timestamp)}.".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={int(timestamp)},{SIGNATURE_VERSION}={sign(secret, timestamp, body)}"


def verify_signature(
    secret: str, header: str, body: bytes, tolerance_s: int = 300, *, now: float | None = None
) -> bool:
    """True when `header` (a Loam-Signature value) signs exactly `body` with `secret` and its
    timestamp is within `tolerance_s` of now. Any `v1=` entry may match (several are allowed so
    that a receiver can accept while a secret is being replaced). Malformed headers are False."""
    timestamp, candidates = None, []
    for item in (header or "").split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            return False
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                return False
        elif key == SIGNATURE_VERSION:
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body)
    return any(hmac.compare_digest(expected, candidate) for candidate in candidates)


# --- Endpoints -------------------------------------------------------------------------------


def _checked(validator, value, field: str):
    try:
        return validator(value)
    except ValidationError as exc:
        raise DomainError(exc.messages[0], code=field) from None


def _secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


@transaction.atomic(durable=True)
def create_endpoint(
    *,
    organization: Organization,
    actor,
    url: str,
    event_types: list[str],
    is_active: bool = True,
) -> tuple[WebhookEndpoint, str]:
    """Returns (endpoint, secret). Show the secret to the tenant now: no API serves it again."""
    authorize(actor, organization, Action.MANAGE_API_KEYS)
    secret = _secret()
    endpoint = WebhookEndpoint.objects.create(
        organization=organization,
        url=_checked(validate_url, url, "url"),
        secret=secret,
        event_types=_checked(validate_event_types, event_types, "event_types"),
        is_active=is_active,
    )
    record_event(
        action="webhook.created",
        actor=actor,
        target=endpoint,
        data={"url": endpoint.url, "event_types": endpoint.event_types},
    )
    return endpoint, secret


@transaction.atomic(durable=True)
def update_endpoint(
    *,
    endpoint: WebhookEndpoint,
    actor,
    url: str | None = None,
    event_types: list[str] | None = None,
    is_active: bool | None = None,
) -> WebhookEndpoint:
    """Change what is given; None leaves a field as it is. Deliveries already written keep
    going to the endpoint's current URL; turning it off fails those still pending."""
    authorize(actor, endpoint.organization, Action.MANAGE_API_KEYS)
    endpoint = WebhookEndpoint.objects.select_for_update(no_key=True).get(pk=endpoint.pk)
    changes = {}
    if url is not None:
        changes["url"] = _checked(validate_url, url, "url")
    if event_types is not None:
        changes["event_types"] = _checked(validate_event_types, event_types, "event_types")
    if is_active is not None:
        changes["is_active"] = bool(is_active)
    changed = {k: v for k, v in changes.items() if getattr(endpoint, k) != v}
    if changed:
        for field, value in changed.items():
            setattr(endpoint, field, value)
        endpoint.save(update_fields=list(changed))
        record_event(action="webhook.updated", actor=actor, target=endpoint, data=changed)
    return endpoint


@transaction.atomic(durable=True)
def delete_endpoint(*, endpoint: WebhookEndpoint, actor) -> None:
    """Deletes the endpoint and its delivery log."""
    authorize(actor, endpoint.organization, Action.MANAGE_API_KEYS)
    record_event(
        action="webhook.deleted",
        actor=actor,
        target=endpoint,
        data={"url": endpoint.url, "event_types": endpoint.event_types},
    )
    WebhookEndpoint.objects.filter(pk=endpoint.pk).delete()


# --- Events and deliveries -------------------------------------------------------------------


def _iso_utc(moment) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class _Event:
    organization_id: int
    event_type: str
    data: dict
    at: datetime


# The events emitted inside `emitted_together`, not yet written; None outside it.
_pending: ContextVar[list[_Event] | None] = ContextVar("webhook_events_pending", default=None)


def emitted_together():
    """The webhook events emitted inside are written on leaving, in the order they were
    emitted: the endpoints of their organizations read once and every delivery in one INSERT,
    for a use case that emits several (an order emits one at each step). Use it inside the
    transaction that does the work, as `core.audit.recorded_together`; leaving by an exception
    writes nothing."""
    return written_on_leaving(_pending, _write_deliveries)


@in_transaction
def emit_event(*, organization: Organization, event_type: str, data: dict) -> list[WebhookDelivery]:
    """Call from the service that made the change, inside its transaction: one delivery per
    active endpoint of `organization` subscribed to `event_type`, each POSTed after commit (so
    a rolled-back change sends nothing). `data` must be JSON-serialisable (datetimes, decimals
    and UUIDs are turned into strings). Inside `emitted_together` the deliveries are written on
    leaving it, and none is returned here."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}; add it to EVENT_TYPES")
    event = _Event(organization.pk, event_type, data, timezone.now())
    pending = _pending.get()
    if pending is not None:
        pending.append(event)
        return []
    return _write_deliveries([event])


def _write_deliveries(events: list[_Event]) -> list[WebhookDelivery]:
    """One delivery per event and active subscribed endpoint of its organization, in one
    INSERT, each sent after commit."""
    from apps.webhooks.tasks import deliver

    if not events:
        return []
    endpoints = defaultdict(list)  # organization id: [(endpoint id, its event types)]
    for endpoint_id, organization_id, event_types in active_endpoints(
        {event.organization_id for event in events}
    ):
        endpoints[organization_id].append((endpoint_id, event_types))
    deliveries = []
    for event in events:
        # JSON containment is not portable to SQLite; an organization has few endpoints.
        subscribed = [
            endpoint_id
            for endpoint_id, event_types in endpoints[event.organization_id]
            if event.event_type in event_types
        ]
        if not subscribed:
            continue
        event_id = uuid.uuid4()
        payload = {
            "id": str(event_id),
            "type": event.event_type,
            "created_at": _iso_utc(event.at),
            "data": event.data,
        }
        deliveries += [
            WebhookDelivery(
                endpoint_id=endpoint_id,
                event_id=event_id,
                event_type=event.event_type,
                payload=payload,
                next_attempt_at=event.at,
            )
            for endpoint_id in subscribed
        ]
    if not deliveries:
        return []
    deliveries = WebhookDelivery.objects.bulk_create(deliveries)
    if any(d.pk is None for d in deliveries):  # backends that return no ids from bulk_create
        deliveries = list(
            WebhookDelivery.objects.filter(event_id__in={d.event_id for d in deliveries}).order_by(
                "pk"
            )
        )
    for delivery in deliveries:
        on_commit_task(deliver, delivery.pk)
    return deliveries


@transaction.atomic(durable=True)
def redeliver(*, delivery: WebhookDelivery, actor) -> WebhookDelivery:
    """Start a new attempt series (attempts from 0) for a delivered or failed delivery, with the
    same event id and payload, so the receiver can tell it is the same event."""
    endpoint = delivery.endpoint
    authorize(actor, endpoint.organization, Action.MANAGE_API_KEYS)
    delivery = WebhookDelivery.objects.select_for_update(no_key=True).get(pk=delivery.pk)
    if delivery.state == DeliveryState.PENDING:
        raise DomainError(_("This delivery is still being attempted."), code="delivery_pending")
    endpoint.refresh_from_db(fields=["is_active"])
    if not endpoint.is_active:
        raise DomainError(
            _("Turn the endpoint on before redelivering to it."), code="endpoint_inactive"
        )
    previous = {"state": delivery.state, "attempts": delivery.attempts}
    delivery = transition(
        delivery,
        DeliveryState.PENDING,
        table=DELIVERY_TRANSITIONS,
        actor=actor,
        changes={
            "attempts": 0,
            "last_status_code": None,
            "last_error": "",
            "delivered_at": None,
            "next_attempt_at": timezone.now(),
        },
    )
    record_event(
        action="webhook.redelivered",
        actor=actor,
        target=endpoint,
        data={"delivery": delivery.pk, "event_id": str(delivery.event_id), **previous},
    )
    from apps.webhooks.tasks import deliver

    on_commit_task(deliver, delivery.pk)
    return delivery


def backoff_s(attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failed attempt: base, 2·base, 4·base, …"""
    return conf.backoff_base_s() * 2 ** (attempts - 1)


@transaction.atomic(durable=True)
def record_attempt(
    *, delivery_id: int, attempt: int, status_code: int | None, error: str
) -> WebhookDelivery | None:
    """Write the outcome of the POST that `deliver` made as attempt number `attempt` + 1, and
    schedule the next one after a failure. A run that lost a race (the delivery was recorded,
    redelivered or finished meanwhile) changes nothing and returns None."""
    from apps.webhooks.tasks import deliver

    delivery = (
        WebhookDelivery.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk=delivery_id, state=DeliveryState.PENDING, attempts=attempt)
        .first()
    )
    if delivery is None:
        return None
    now = timezone.now()
    outcome = {"attempts": attempt + 1, "last_status_code": status_code, "last_error": error}
    if status_code is not None and 200 <= status_code < 300 and not error:
        return transition(
            delivery,
            DeliveryState.DELIVERED,
            table=DELIVERY_TRANSITIONS,
            changes={**outcome, "delivered_at": now, "next_attempt_at": None},
        )
    if outcome["attempts"] >= conf.max_attempts():
        return transition(
            delivery,
            DeliveryState.FAILED,
            table=DELIVERY_TRANSITIONS,
            changes={**outcome, "next_attempt_at": None},
        )
    countdown = backoff_s(outcome["attempts"])
    for name, value in {**outcome, "next_attempt_at": now + timedelta(seconds=countdown)}.items():
        setattr(delivery, name, value)
    delivery.save(update_fields=[*outcome, "next_attempt_at"])
    pk = delivery.pk
    transaction.on_commit(lambda: deliver.apply_async((pk,), countdown=countdown))
    return delivery


@transaction.atomic(durable=True)
def fail_delivery(*, delivery_id: int, error: str) -> None:
    """A pending delivery that can no longer be attempted (its endpoint was turned off)."""
    delivery = (
        WebhookDelivery.objects.select_for_update(no_key=True)
        .filter(pk=delivery_id, state=DeliveryState.PENDING)
        .first()
    )
    if delivery is not None:
        transition(
            delivery,
            DeliveryState.FAILED,
            table=DELIVERY_TRANSITIONS,
            changes={"last_error": error, "next_attempt_at": None},
        )
