"""Deliveries against a real HTTP receiver on 127.0.0.1: signatures, retries with backoff, the
final failure, redelivery, and the runs that must change nothing.

Celery is eager here; a failed attempt re-dispatches `deliver` from an on-commit callback,
which `django_capture_on_commit_callbacks(execute=True)` runs in turn, so one block drives the
whole attempt series."""

import json
import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core.errors import DomainError, PermissionDenied
from apps.core.models import AuditEvent
from apps.webhooks import services, tasks
from apps.webhooks.models import DeliveryState, WebhookDelivery
from tests.factories import WebhookEndpointFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint_for(organization, owner):
    """endpoint_for(receiver, *event_types) -> an endpoint of the organization at the receiver,
    made through the service so that the receiver knows the secret it was given."""

    def make(receiver, *event_types):
        endpoint, secret = services.create_endpoint(
            organization=organization,
            actor=owner,
            url=receiver.url,
            event_types=list(event_types or ["order.done"]),
        )
        receiver.secret = secret
        return endpoint

    return make


def emit(organization, django_capture_on_commit_callbacks, event_type="order.done", **data):
    with django_capture_on_commit_callbacks(execute=True):
        deliveries = services.emit_event(
            organization=organization, event_type=event_type, data=data or {"order": 42}
        )
    return deliveries


def test_fails_twice_then_delivered_on_the_third_attempt(
    receiver, endpoint_for, organization, django_capture_on_commit_callbacks
):
    receiver.statuses = [500, 500, 200]
    endpoint = endpoint_for(receiver)

    (delivery,) = emit(organization, django_capture_on_commit_callbacks)

    assert len(receiver.requests) == 3
    assert all(r.verified for r in receiver.requests)  # verify_signature, in the receiver
    delivery.refresh_from_db()
    assert delivery.attempts == 3
    assert delivery.state == DeliveryState.DELIVERED
    assert delivery.last_status_code == 200
    assert delivery.last_error == ""
    assert delivery.delivered_at is not None and delivery.next_attempt_at is None
    for received in receiver.requests:
        assert received.headers["Content-Type"] == "application/json"
        assert received.headers["Loam-Event"] == "order.done"
        assert received.headers["Loam-Delivery"] == str(delivery.pk)
        assert received.body == receiver.requests[0].body  # the same event each time
    body = json.loads(receiver.requests[0].body)
    assert body == delivery.payload
    assert body["id"] == str(delivery.event_id) and body["data"] == {"order": 42}
    assert endpoint.deliveries.get() == delivery


def test_a_receiver_that_always_fails_ends_failed_after_max_attempts(
    receiver, endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 4
    receiver.statuses = [500]
    endpoint_for(receiver)

    (delivery,) = emit(organization, django_capture_on_commit_callbacks)

    assert len(receiver.requests) == 4
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED
    assert delivery.attempts == 4
    assert delivery.last_status_code == 500
    assert delivery.last_error == "HTTP 500: receiver is down"
    assert delivery.delivered_at is None and delivery.next_attempt_at is None


def test_each_failure_schedules_the_next_attempt_with_exponential_backoff(
    receiver, endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    settings.LOAM_WEBHOOK_BACKOFF_BASE_S = 30
    receiver.statuses = [503]
    endpoint_for(receiver)
    with django_capture_on_commit_callbacks():  # write the delivery, do not send it yet
        (delivery,) = services.emit_event(
            organization=organization, event_type="order.done", data={}
        )

    for attempts, wait in [(1, 30), (2, 60), (3, 120)]:
        with django_capture_on_commit_callbacks() as callbacks:
            before = timezone.now()
            tasks.deliver(delivery.pk)
        delivery.refresh_from_db()
        assert delivery.attempts == attempts and delivery.state == DeliveryState.PENDING
        expected = before + timedelta(seconds=wait)
        assert expected <= delivery.next_attempt_at <= expected + timedelta(seconds=5)
        assert len(callbacks) == 1  # the next attempt, dispatched once this one commits
    assert len(receiver.requests) == 3


def test_an_unreachable_receiver_records_the_connection_error(
    endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 2
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    class Nowhere:
        url = f"http://127.0.0.1:{port}/hooks"

    endpoint_for(Nowhere())
    (delivery,) = emit(organization, django_capture_on_commit_callbacks)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.attempts == 2
    assert delivery.last_status_code is None
    assert delivery.last_error.startswith("ConnectionError")


def test_redeliver_starts_a_new_attempt_series_with_the_same_event(
    receiver, endpoint_for, organization, owner, settings, django_capture_on_commit_callbacks
):
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 2
    receiver.statuses = [500, 500, 200]
    endpoint_for(receiver)
    (delivery,) = emit(organization, django_capture_on_commit_callbacks)
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED

    with django_capture_on_commit_callbacks(execute=True):
        services.redeliver(delivery=delivery, actor=owner)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED
    assert delivery.attempts == 1 and delivery.last_status_code == 200
    assert len(receiver.requests) == 3 and receiver.requests[-1].verified
    assert receiver.requests[-1].body == receiver.requests[0].body
    event = AuditEvent.objects.get(action="webhook.redelivered")
    assert event.data["state"] == "failed" and event.data["attempts"] == 2

    # A delivered one may be sent again too.
    with django_capture_on_commit_callbacks(execute=True):
        services.redeliver(delivery=delivery, actor=owner)
    assert len(receiver.requests) == 4
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 1


def test_redeliver_refuses_pending_deliveries_inactive_endpoints_and_viewers(
    receiver, endpoint_for, organization, owner, viewer, django_capture_on_commit_callbacks
):
    endpoint = endpoint_for(receiver)
    with django_capture_on_commit_callbacks():
        (delivery,) = services.emit_event(
            organization=organization, event_type="order.done", data={}
        )
    with pytest.raises(DomainError, match="still being attempted"):
        services.redeliver(delivery=delivery, actor=owner)

    WebhookDelivery.objects.filter(pk=delivery.pk).update(state=DeliveryState.FAILED)
    delivery.refresh_from_db()
    with pytest.raises(PermissionDenied):
        services.redeliver(delivery=delivery, actor=viewer)
    services.update_endpoint(endpoint=endpoint, actor=owner, is_active=False)
    with pytest.raises(DomainError, match="Turn the endpoint on"):
        services.redeliver(delivery=delivery, actor=owner)
    assert receiver.requests == []


def test_a_delivery_whose_endpoint_was_turned_off_fails_without_a_request(
    receiver, endpoint_for, organization, owner, django_capture_on_commit_callbacks
):
    endpoint = endpoint_for(receiver)
    with django_capture_on_commit_callbacks():
        (delivery,) = services.emit_event(
            organization=organization, event_type="order.done", data={}
        )
    services.update_endpoint(endpoint=endpoint, actor=owner, is_active=False)

    tasks.deliver(delivery.pk)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.attempts == 0
    assert delivery.last_error == "The endpoint was turned off."
    assert receiver.requests == []


def test_a_late_or_repeated_run_changes_nothing(
    receiver, endpoint_for, organization, django_capture_on_commit_callbacks
):
    endpoint_for(receiver)
    (delivery,) = emit(organization, django_capture_on_commit_callbacks)
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED

    with django_capture_on_commit_callbacks(execute=True):
        tasks.deliver(delivery.pk)  # a duplicate message after success
        tasks.deliver(987654321)  # a delivery deleted meanwhile
    assert len(receiver.requests) == 1
    # An outcome recorded for an attempt that is no longer the current one is dropped.
    assert (
        services.record_attempt(delivery_id=delivery.pk, attempt=0, status_code=500, error="x")
        is None
    )
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 1


def test_only_subscribed_endpoints_receive_the_event(
    receiver, endpoint_for, organization, django_capture_on_commit_callbacks
):
    endpoint_for(receiver, "instance.running")
    WebhookEndpointFactory(organization=organization, url=receiver.url, is_active=False)

    assert emit(organization, django_capture_on_commit_callbacks, event_type="order.done") == []
    emit(organization, django_capture_on_commit_callbacks, event_type="instance.running", id=5)

    assert len(receiver.requests) == 1
    assert receiver.requests[0].headers["Loam-Event"] == "instance.running"
    assert json.loads(receiver.requests[0].body)["data"] == {"id": 5}


def test_a_delivery_to_an_internal_address_fails_without_a_request(
    receiver, endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    """Production refuses the park's own network: the worker would otherwise call it."""
    endpoint_for(receiver)  # registered while allowed (or by a name that now resolves there)
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    with django_capture_on_commit_callbacks():
        (delivery,) = services.emit_event(
            organization=organization, event_type="order.done", data={}
        )

    tasks.deliver(delivery.pk)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.attempts == 0
    assert "127.0.0.1" in delivery.last_error and "public" in delivery.last_error
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("url", "blocked"),
    [
        ("http://127.0.0.1:8000/x", True),
        ("http://10.1.2.3/x", True),
        ("http://192.168.0.7/x", True),
        ("http://169.254.169.254/latest/meta-data", True),
        ("http://[::1]/x", True),
        ("http://localhost/x", True),
        ("https://8.8.8.8/x", False),  # a literal public address: no DNS query, no traffic
        # IPv6 forms of private IPv4 addresses (issue 18): mapped, compatible, NAT64, 6to4.
        ("http://[::ffff:127.0.0.1]/x", True),
        ("http://[::127.0.0.1]/x", True),
        ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data", True),
        ("http://[64:ff9b:1::a00:1]/x", True),
        ("http://[2002:a9fe:a9fe::1]/x", True),
        ("http://[2002:c0a8:1::1]/x", True),
        ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x", True),  # Teredo, documentation v4
        ("http://[fe80::1%25eth0]/x", True),
        # ... and of public ones, which stay public.
        ("https://[64:ff9b::808:808]/x", False),
        ("https://[2002:808:808::1]/x", False),
        ("https://[2606:4700:4700::1111]/x", False),
    ],
)
def test_blocked_destinations(settings, url, blocked):
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    assert bool(services.blocked_destination(url)) is blocked


# --- state changes go through the transition table -------------------------------------------


def test_a_delivery_moves_only_as_its_table_allows_and_each_move_is_audited():
    from apps.core.errors import InvalidTransition
    from apps.core.transitions import transition
    from apps.webhooks.models import DELIVERY_TRANSITIONS
    from tests.factories import WebhookDeliveryFactory

    delivery = WebhookDeliveryFactory(state=DeliveryState.PENDING)
    services.record_attempt(delivery_id=delivery.pk, attempt=0, status_code=200, error="")

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED
    event = AuditEvent.objects.get(action="webhookdelivery.delivered")
    assert event.organization == delivery.endpoint.organization
    assert event.data["from"] == DeliveryState.PENDING
    with pytest.raises(InvalidTransition):
        transition(delivery, DeliveryState.FAILED, table=DELIVERY_TRANSITIONS)


def test_the_sweep_sends_again_a_delivery_whose_job_was_lost(settings):
    from apps.webhooks.tasks import reconcile_deliveries
    from tests.factories import WebhookDeliveryFactory

    settings.LOAM_RECONCILE_AFTER_S = 300
    due = WebhookDeliveryFactory(state=DeliveryState.PENDING, next_attempt_at=timezone.now())
    lost = WebhookDeliveryFactory(
        state=DeliveryState.PENDING, next_attempt_at=timezone.now() - timedelta(minutes=10)
    )

    assert reconcile_deliveries() == 1

    lost.refresh_from_db()
    due.refresh_from_db()
    assert lost.attempts == 1  # tried (the test endpoint is a closed port: it failed)
    assert due.attempts == 0
