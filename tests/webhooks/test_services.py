"""Webhook use cases: endpoints (who may, what is accepted), which endpoints an event reaches,
and the signature a receiver checks."""

import json
import time
import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core.errors import DomainError, PermissionDenied
from apps.core.models import AuditEvent
from apps.tenants.models import ApiKeyScope
from apps.webhooks import services
from apps.webhooks.models import EVENT_TYPES, DeliveryState, WebhookDelivery, WebhookEndpoint
from tests.factories import (
    ApiKeyFactory,
    WebhookDeliveryFactory,
    WebhookEndpointFactory,
    refused,
)

pytestmark = pytest.mark.django_db

URL = "https://partner.example.com/loam"


def create(organization, actor, **kwargs):
    kwargs.setdefault("url", URL)
    kwargs.setdefault("event_types", ["order.done"])
    return services.create_endpoint(organization=organization, actor=actor, **kwargs)


# --- Endpoints -------------------------------------------------------------------------------


def test_create_endpoint_returns_the_secret_once_and_audits(organization, owner):
    endpoint, secret = create(organization, owner, event_types=["order.done", "order.done"])

    assert secret.startswith("whsec_") and len(secret) > 40
    endpoint.refresh_from_db()
    assert endpoint.secret == secret  # kept as is: deliveries are signed with it
    assert endpoint.event_types == ["order.done"]  # duplicates dropped
    assert endpoint.is_active
    event = AuditEvent.objects.get(action="webhook.created")
    assert event.organization_id == organization.pk and event.actor == owner
    assert secret not in json.dumps(event.data)
    assert create(organization, owner)[1] != secret


@pytest.mark.parametrize(
    ("role", "allowed"),
    [("owner", True), ("admin", True), ("member", False), ("billing", False), ("viewer", False)],
)
def test_who_may_manage_endpoints(organization, member_of, role, allowed):
    user = member_of(organization, role)
    if allowed:
        endpoint, _secret = create(organization, user)
        services.update_endpoint(endpoint=endpoint, actor=user, is_active=False)
        services.delete_endpoint(endpoint=endpoint, actor=user)
        assert not WebhookEndpoint.objects.exists()
    else:
        with pytest.raises(PermissionDenied):
            create(organization, user)
        endpoint = WebhookEndpointFactory(organization=organization)
        with pytest.raises(PermissionDenied):
            services.update_endpoint(endpoint=endpoint, actor=user, is_active=False)
        with pytest.raises(PermissionDenied):
            services.delete_endpoint(endpoint=endpoint, actor=user)


def test_api_keys_by_scope(organization, other_organization):
    write = ApiKeyFactory(organization=organization, scope=ApiKeyScope.WRITE)
    read = ApiKeyFactory(organization=organization, scope=ApiKeyScope.READ)

    assert create(organization, write)[0].organization == organization
    with pytest.raises(PermissionDenied):
        create(organization, read)
    with pytest.raises(PermissionDenied):  # a key acts for its own organization only
        create(other_organization, write)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "Give the URL"),
        ("partner.example.com/hooks", "absolute http:// or https:// URL"),
        ("ftp://partner.example.com/hooks", "absolute http:// or https:// URL"),
        ("https://user:pw@partner.example.com/hooks", "user name or password"),
        ("https://partner.example.com/" + "x" * 500, "longer than 500"),
        ("http://partner.example.com/hooks", "must use https://"),
    ],
)
def test_bad_urls_are_refused(organization, owner, settings, url, message):
    settings.LOAM_WEBHOOKS_ALLOW_HTTP = False
    with pytest.raises(DomainError, match=message) as excinfo:
        create(organization, owner, url=url)
    assert excinfo.value.code == "url"
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hooks",
        "https://10.0.0.5:8443/hooks",
        "https://[::1]/hooks",
        "https://[::ffff:127.0.0.1]/hooks",
        "https://[::127.0.0.1]/hooks",
        "https://[64:ff9b::a9fe:a9fe]/hooks",
        "https://[2002:a9fe:a9fe::1]/hooks",
    ],
)
def test_private_address_literals_are_refused_at_registration(organization, owner, settings, url):
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    with pytest.raises(DomainError, match="public addresses only") as excinfo:
        create(organization, owner, url=url)
    assert excinfo.value.code == "url"
    assert not WebhookEndpoint.objects.exists()
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = True  # a laptop's receiver
    assert create(organization, owner, url=url)[0].pk


def test_public_address_literals_and_names_are_accepted(organization, owner, settings):
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    for url in ("https://8.8.8.8/hooks", "https://[64:ff9b::808:808]/h", "https://example.com/"):
        assert create(organization, owner, url=url)[0].pk


def test_http_is_accepted_only_where_allowed(organization, owner, settings):
    settings.LOAM_WEBHOOKS_ALLOW_HTTP = True
    assert create(organization, owner, url="http://10.0.0.5:8080/hooks")[0].url.startswith("http:")
    del settings.LOAM_WEBHOOKS_ALLOW_HTTP
    settings.DEBUG = False  # the default follows DEBUG
    with pytest.raises(DomainError, match="https"):
        create(organization, owner, url="http://10.0.0.5:8080/hooks")
    settings.DEBUG = True
    assert create(organization, owner, url="http://10.0.0.5:8080/hooks")[0].pk


@pytest.mark.parametrize(
    ("event_types", "message"),
    [
        ([], "at least one event type"),
        ("order.done", "a list of names"),
        (["order.done", 3], "a list of names"),
        (["order.shipped"], "Unknown event type: order.shipped. Allowed: order.submitted, "),
    ],
)
def test_bad_event_types_are_refused(organization, owner, event_types, message):
    with pytest.raises(DomainError, match=message) as excinfo:
        create(organization, owner, event_types=event_types)
    assert excinfo.value.code == "event_types"


def test_update_changes_only_what_is_given(organization, owner, settings):
    settings.LOAM_WEBHOOKS_ALLOW_HTTP = False
    endpoint, _secret = create(organization, owner)

    updated = services.update_endpoint(
        endpoint=endpoint, actor=owner, event_types=["order.failed", "instance.error"]
    )

    assert updated.url == URL and updated.is_active
    endpoint.refresh_from_db()
    assert endpoint.event_types == ["order.failed", "instance.error"]
    event = AuditEvent.objects.get(action="webhook.updated")
    assert event.data == {"event_types": ["order.failed", "instance.error"]}
    with pytest.raises(DomainError, match="must use https://"):
        services.update_endpoint(endpoint=endpoint, actor=owner, url="http://x.example.com/")


def test_delete_removes_the_delivery_log(organization, owner):
    endpoint, _secret = create(organization, owner)
    WebhookDeliveryFactory(endpoint=endpoint)

    services.delete_endpoint(endpoint=endpoint, actor=owner)

    assert not WebhookEndpoint.objects.exists() and not WebhookDelivery.objects.exists()
    assert AuditEvent.objects.filter(
        action="webhook.deleted", organization_id=organization.pk
    ).exists()


# --- Events ----------------------------------------------------------------------------------


def test_emit_reaches_only_active_subscribed_endpoints_of_the_organization(
    organization, other_organization, django_capture_on_commit_callbacks
):
    subscribed = WebhookEndpointFactory(organization=organization, event_types=["order.done"])
    also = WebhookEndpointFactory(organization=organization, event_types=list(EVENT_TYPES))
    WebhookEndpointFactory(organization=organization, event_types=["order.failed"])
    WebhookEndpointFactory(organization=organization, event_types=["order.done"], is_active=False)
    WebhookEndpointFactory(organization=other_organization, event_types=["order.done"])

    with django_capture_on_commit_callbacks() as callbacks:
        deliveries = services.emit_event(
            organization=organization, event_type="order.done", data={"order": 7}
        )

    assert {d.endpoint for d in deliveries} == {subscribed, also}
    assert len(callbacks) == 2  # one POST each, after commit
    rows = WebhookDelivery.objects.order_by("pk")
    assert [r.pk for r in rows] == sorted(d.pk for d in deliveries)
    first, second = rows
    assert first.event_id == second.event_id  # one event, however many endpoints
    assert first.state == DeliveryState.PENDING and first.attempts == 0
    payload = first.payload
    assert payload["id"] == str(first.event_id)
    assert payload["type"] == "order.done" and payload["data"] == {"order": 7}
    assert payload["created_at"].endswith("Z")
    assert first.payload == second.payload


def test_emit_with_no_subscriber_writes_nothing(organization, django_capture_on_commit_callbacks):
    WebhookEndpointFactory(organization=organization, event_types=["order.failed"])
    with django_capture_on_commit_callbacks() as callbacks:
        assert (
            services.emit_event(organization=organization, event_type="order.done", data={}) == []
        )
    assert callbacks == [] and not WebhookDelivery.objects.exists()


def test_emit_of_an_unknown_type_is_a_programming_error(organization):
    with pytest.raises(ValueError, match="order.shipped"):
        services.emit_event(organization=organization, event_type="order.shipped", data={})


def test_a_rolled_back_change_emits_nothing(organization, django_capture_on_commit_callbacks):
    WebhookEndpointFactory(organization=organization, event_types=["order.done"])
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        services.emit_event(organization=organization, event_type="order.done", data={})
        raise RuntimeError("the order change failed")
    assert callbacks == [] and not WebhookDelivery.objects.exists()


def test_events_emitted_together_are_written_on_leaving_in_one_insert(
    organization, other_organization, django_capture_on_commit_callbacks
):
    """An endpoint read and one INSERT for them all, in the order they were emitted, each
    event with its own id; an event no endpoint takes writes nothing."""
    ours = WebhookEndpointFactory(organization=organization, event_types=list(EVENT_TYPES))
    theirs = WebhookEndpointFactory(organization=other_organization, event_types=["order.done"])
    with (
        django_capture_on_commit_callbacks() as callbacks,
        CaptureQueriesContext(connection) as captured,
        services.emitted_together(),
    ):
        for organization_, event_type, n in (
            (organization, "order.done", 1),
            (other_organization, "order.failed", 2),  # theirs does not take it
            (other_organization, "order.done", 3),
            (organization, "order.failed", 4),
        ):
            emitted = services.emit_event(
                organization=organization_, event_type=event_type, data={"n": n}
            )
            assert emitted == []  # written on leaving
        assert not WebhookDelivery.objects.exists()
    statements = [query["sql"] for query in captured.captured_queries]
    assert sum('FROM "webhooks_webhookendpoint"' in sql for sql in statements) == 1
    assert sum(sql.startswith('INSERT INTO "webhooks_webhookdelivery"') for sql in statements) == 1
    rows = list(WebhookDelivery.objects.order_by("pk"))
    assert [(row.endpoint, row.payload["data"]["n"]) for row in rows] == [
        (ours, 1),
        (theirs, 3),
        (ours, 4),
    ]
    assert len({row.event_id for row in rows}) == 3
    assert len(callbacks) == 3


def test_events_emitted_together_write_nothing_when_it_fails(
    organization, django_capture_on_commit_callbacks
):
    WebhookEndpointFactory(organization=organization, event_types=["order.done"])
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
        services.emitted_together(),
    ):
        services.emit_event(organization=organization, event_type="order.done", data={})
        raise RuntimeError("the use case failed")
    assert callbacks == [] and not WebhookDelivery.objects.exists()


def test_backoff_doubles(settings):
    settings.LOAM_WEBHOOK_BACKOFF_BASE_S = 30
    assert [services.backoff_s(n) for n in range(1, 6)] == [30, 60, 120, 240, 480]


# --- Signatures ------------------------------------------------------------------------------

SECRET = "whsec_test-secret-that-is-long-enough"
BODY = b'{"id":"e1","type":"order.done","data":{"order":7}}'


def test_sign_is_hmac_sha256_over_timestamp_dot_body():
    import hashlib
    import hmac

    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert services.sign(SECRET, 1700000000, BODY) == expected
    assert services.signature_header(SECRET, 1700000000, BODY) == f"t=1700000000,v1={expected}"


def test_a_fresh_signature_verifies():
    header = services.signature_header(SECRET, int(time.time()), BODY)
    assert services.verify_signature(SECRET, header, BODY)


def test_wrong_secret_tampered_body_and_stale_timestamp_fail():
    now = int(time.time())
    header = services.signature_header(SECRET, now, BODY)

    assert not services.verify_signature("whsec_another-secret-entirely-123456", header, BODY)
    assert not services.verify_signature(SECRET, header, BODY.replace(b"7", b"8"))
    stale = services.signature_header(SECRET, now - 301, BODY)
    assert not services.verify_signature(SECRET, stale, BODY)
    assert services.verify_signature(SECRET, stale, BODY, tolerance_s=600)
    future = services.signature_header(SECRET, now + 301, BODY)
    assert not services.verify_signature(SECRET, future, BODY)
    # The timestamp is signed: moving it invalidates the signature.
    moved = header.replace(f"t={now}", f"t={now + 1}")
    assert not services.verify_signature(SECRET, moved, BODY)


@pytest.mark.parametrize(
    "header", ["", None, "garbage", "t=abc,v1=00", "v1=00", "t=1700000000", "t=1700000000,v1"]
)
def test_malformed_headers_fail(header):
    assert not services.verify_signature(SECRET, header, BODY, now=1700000000)


def test_any_v1_entry_may_match():
    good = services.sign(SECRET, 1700000000, BODY)
    header = f"t=1700000000,v1={'0' * 64},v1={good}"
    assert services.verify_signature(SECRET, header, BODY, now=1700000000)


# --- The database's own rules ----------------------------------------------------------------


def test_the_database_refuses_bad_rows():
    endpoint = WebhookEndpointFactory()
    with refused("webhook_endpoint_url_http"):
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(url="ftp://x.example.com/")
    with refused("webhook_endpoint_secret_long"):
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(secret="short")
    delivery = WebhookDeliveryFactory(endpoint=endpoint)
    with refused("webhook_delivery_state_known"):
        WebhookDelivery.objects.filter(pk=delivery.pk).update(state="lost")
    with refused("webhook_delivery_event_type_known"):
        WebhookDelivery.objects.filter(pk=delivery.pk).update(event_type="order.shipped")
    with refused("webhook_delivery_delivered_has_time"):
        WebhookDelivery.objects.filter(pk=delivery.pk).update(state=DeliveryState.DELIVERED)
    with refused("webhook_delivery_event_once"):
        WebhookDeliveryFactory(endpoint=endpoint, event_id=delivery.event_id)
    assert isinstance(delivery.event_id, uuid.UUID)
