"""Deliveries against a real HTTP receiver on 127.0.0.1: signatures, retries with backoff, the
final failure, redelivery, and the runs that must change nothing.

Celery is eager here; a failed attempt re-dispatches `deliver` from an on-commit callback,
which `django_capture_on_commit_callbacks(execute=True)` runs in turn, so one block drives the
whole attempt series."""

import json
import socket
import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.core import serializers
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


# --- what a delivery may reach, and what it keeps of the answer --------------------------------

PARTNER = "hooks.partner.example"
PUBLIC_ADDRESS = "93.184.215.14"  # global; tests/conftest.py stops any connection to it
SECRET_PAGE = b"secret-internal-admin-page"


def stored_in(text: str) -> list[str]:
    """The models that hold `text` in any row."""
    return [
        model._meta.label
        for model in django_apps.get_models()
        if text in serializers.serialize("json", model._default_manager.all())
    ]


def test_a_name_that_rebinds_to_loopback_after_the_check_does_not_reach_it(
    start_receiver,
    fake_dns,
    endpoint_for,
    organization,
    settings,
    django_capture_on_commit_callbacks,
):
    """DNS rebinding: the name answers a public address when checked, 127.0.0.1 when connected
    to. The POST goes to the checked address, so the internal page is neither reached nor
    quoted in the delivery log."""
    internal = start_receiver()
    internal.statuses, internal.reply = [403], SECRET_PAGE
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 1
    lookups = fake_dns(PARTNER, [PUBLIC_ADDRESS], ["127.0.0.1"])
    endpoint_for(SimpleNamespace(url=f"http://{PARTNER}:{internal.port}/hooks"))

    (delivery,) = emit(organization, django_capture_on_commit_callbacks)

    assert internal.requests == []
    assert lookups == [[PUBLIC_ADDRESS]]  # resolved once, for the check and the connection
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.last_status_code is None
    assert delivery.last_error.startswith("ConnectionError")
    assert PUBLIC_ADDRESS in delivery.last_error  # where it connected: the checked address
    assert stored_in(SECRET_PAGE.decode()) == []


def test_a_name_with_one_internal_address_among_public_ones_is_refused(
    receiver, fake_dns, endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    fake_dns(PARTNER, [PUBLIC_ADDRESS, "127.0.0.1"])
    endpoint_for(SimpleNamespace(url=f"http://{PARTNER}:{receiver.port}/hooks"))
    with django_capture_on_commit_callbacks():
        (delivery,) = services.emit_event(
            organization=organization, event_type="order.done", data={}
        )

    tasks.deliver(delivery.pk)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.attempts == 0
    assert delivery.last_error == (
        f"{PARTNER} resolves to 127.0.0.1, which is not a public address; webhooks are "
        "delivered to public addresses only."
    )
    assert receiver.requests == []


def test_a_long_error_page_is_kept_only_as_a_short_printable_excerpt(
    receiver, endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 1
    receiver.statuses = [500]
    receiver.reply = b"\x1b[2J\x00Internal\r\n\terror: " + b"x" * 5000 + b" END-OF-PAGE"
    endpoint_for(receiver)

    (delivery,) = emit(organization, django_capture_on_commit_callbacks)

    delivery.refresh_from_db()
    assert delivery.last_status_code == 500
    prefix = "HTTP 500: [2J Internal error: "
    assert delivery.last_error == prefix + "x" * (200 - len(prefix) + len("HTTP 500: "))


def test_a_malformed_answer_is_kept_only_as_a_short_printable_excerpt(
    endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    """An answer without a status line: http.client quotes it in its error."""
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 1
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_garbage():
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"\x1b]0;" + SECRET_PAGE * 200 + b"\r\n\r\n")

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    endpoint_for(SimpleNamespace(url=f"http://127.0.0.1:{listener.getsockname()[1]}/hooks"))

    (delivery,) = emit(organization, django_capture_on_commit_callbacks)
    thread.join(timeout=5)
    listener.close()

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.last_status_code is None
    assert delivery.last_error.startswith("BadStatusLine: ")
    assert len(delivery.last_error) <= 200 and delivery.last_error.isprintable()


def test_a_redirect_is_not_followed(
    start_receiver, endpoint_for, organization, settings, django_capture_on_commit_callbacks
):
    """The signed body goes only to the URL the tenant registered."""
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 1
    elsewhere = start_receiver()
    receiver = start_receiver()
    receiver.statuses, receiver.reply_headers = [307], {"Location": elsewhere.url}
    endpoint_for(receiver)

    (delivery,) = emit(organization, django_capture_on_commit_callbacks)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.last_status_code == 307
    assert len(receiver.requests) == 1 and elsewhere.requests == []


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
    assert event.organization_id == delivery.endpoint.organization_id
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
