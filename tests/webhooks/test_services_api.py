"""`/api/v1/webhooks/`: each route, key scopes and roles, isolation, per-field input errors, the
secret shown once, and the schema."""

import pytest

from apps.tenants import services as tenant_services
from apps.tenants.models import ApiKeyScope
from apps.webhooks.models import EVENT_TYPES, DeliveryState, WebhookDelivery, WebhookEndpoint
from tests.factories import WebhookDeliveryFactory, WebhookEndpointFactory

pytestmark = pytest.mark.django_db

BASE = "/api/v1/webhooks/"
URL = "https://partner.example.com/loam"


@pytest.fixture
def key_headers(organization, owner):
    def make(scope):
        _key, secret = tenant_services.create_api_key(
            organization=organization, actor=owner, name=f"{scope} key", scope=scope
        )
        return {"HTTP_AUTHORIZATION": f"Bearer {secret}", "HTTP_ACCEPT_LANGUAGE": "en"}

    return make


@pytest.fixture
def write(key_headers):
    return key_headers(ApiKeyScope.WRITE)


@pytest.fixture
def read(key_headers):
    return key_headers(ApiKeyScope.READ)


def rows(response) -> list:
    """The rows of a list answer, paginated or not."""
    body = response.json()
    return body["results"] if isinstance(body, dict) else body


def field_errors(response) -> dict:
    """Field -> messages of a 400, as problem+json `errors` or as DRF's plain body."""
    body = response.json()
    return body.get("errors", body)


def post(client, path, data, headers):
    return client.post(path, data, content_type="application/json", **headers)


def patch(client, path, data, headers):
    return client.patch(path, data, content_type="application/json", **headers)


# --- Routes ----------------------------------------------------------------------------------


def test_create_returns_the_secret_once(client, write, organization):
    response = post(client, BASE, {"url": URL, "event_types": ["order.done"]}, write)

    assert response.status_code == 201, response.content
    body = response.json()
    endpoint = WebhookEndpoint.objects.get()
    assert body["id"] == endpoint.pk and endpoint.organization == organization
    assert body["secret"] == endpoint.secret and body["secret"].startswith("whsec_")
    assert body["url"] == URL and body["event_types"] == ["order.done"] and body["is_active"]

    again = client.get(f"{BASE}{endpoint.pk}/", **write)
    assert again.status_code == 200 and "secret" not in again.json()
    assert all("secret" not in row for row in rows(client.get(BASE, **write)))


def test_list_and_retrieve_with_a_read_key(client, read, organization, other_organization):
    mine = WebhookEndpointFactory(organization=organization)
    WebhookEndpointFactory(organization=other_organization)

    listed = client.get(BASE, **read)
    assert listed.status_code == 200
    assert [row["id"] for row in rows(listed)] == [mine.pk]
    one = client.get(f"{BASE}{mine.pk}/", **read)
    assert one.status_code == 200
    assert one.json() == {
        "id": mine.pk,
        "url": mine.url,
        "event_types": mine.event_types,
        "is_active": True,
        "created_at": one.json()["created_at"],
    }


def test_a_read_key_cannot_write(client, read, organization):
    endpoint = WebhookEndpointFactory(organization=organization)
    delivery = WebhookDeliveryFactory(endpoint=endpoint, state=DeliveryState.FAILED)

    assert post(client, BASE, {"url": URL, "event_types": ["order.done"]}, read).status_code == 403
    path = f"{BASE}{endpoint.pk}/"
    assert patch(client, path, {"is_active": False}, read).status_code == 403
    assert client.delete(path, **read).status_code == 403
    redeliver = f"{path}deliveries/{delivery.pk}/redeliver/"
    assert client.post(redeliver, **read).status_code == 403
    assert (
        WebhookEndpoint.objects.get().is_active
        and not WebhookEndpoint.objects.filter(organization=organization, url=URL).exists()
    )


@pytest.mark.parametrize(
    ("role", "reads", "writes"),
    [
        ("owner", 200, 201),
        ("admin", 200, 201),
        ("member", 200, 403),
        ("billing", 200, 403),
        ("viewer", 200, 403),
    ],
)
def test_roles_in_a_browser_session(client, organization, member_of, role, reads, writes):
    client.force_login(member_of(organization, role))
    assert client.get(BASE).status_code == reads
    created = post(client, BASE, {"url": URL, "event_types": ["order.done"]}, {})
    assert created.status_code == writes


def test_partial_update(client, write, organization):
    endpoint = WebhookEndpointFactory(organization=organization)

    response = patch(
        client,
        f"{BASE}{endpoint.pk}/",
        {"event_types": ["order.failed"], "is_active": False},
        write,
    )

    assert response.status_code == 200, response.content
    assert response.json()["event_types"] == ["order.failed"]
    assert response.json()["is_active"] is False
    endpoint.refresh_from_db()
    assert endpoint.event_types == ["order.failed"] and not endpoint.is_active
    assert endpoint.url.startswith("http://127.0.0.1:9/")  # left as it was


def test_put_is_not_offered(client, write, organization):
    endpoint = WebhookEndpointFactory(organization=organization)
    response = client.put(
        f"{BASE}{endpoint.pk}/", {"url": URL}, content_type="application/json", **write
    )
    assert response.status_code == 405


def test_destroy(client, write, organization):
    endpoint = WebhookEndpointFactory(organization=organization)
    WebhookDeliveryFactory(endpoint=endpoint)

    response = client.delete(f"{BASE}{endpoint.pk}/", **write)

    assert response.status_code == 204
    assert not WebhookEndpoint.objects.exists() and not WebhookDelivery.objects.exists()


def test_deliveries_newest_first(client, read, organization):
    endpoint = WebhookEndpointFactory(organization=organization)
    older = WebhookDeliveryFactory(endpoint=endpoint)
    newer = WebhookDeliveryFactory(endpoint=endpoint, event_type="instance.running")
    WebhookDeliveryFactory()  # another endpoint's

    response = client.get(f"{BASE}{endpoint.pk}/deliveries/", **read)

    assert response.status_code == 200
    listed = rows(response)
    assert [row["id"] for row in listed] == [newer.pk, older.pk]
    assert listed[0]["event_type"] == "instance.running"
    assert listed[0]["state"] == "pending" and listed[0]["attempts"] == 0
    assert listed[0]["payload"]["id"] == str(newer.event_id)


def test_redeliver_route_sends_again(
    client, write, organization, receiver, django_capture_on_commit_callbacks
):
    endpoint = WebhookEndpointFactory(organization=organization, url=receiver.url)
    receiver.secret = endpoint.secret
    delivery = WebhookDeliveryFactory(
        endpoint=endpoint, state=DeliveryState.FAILED, attempts=6, last_status_code=500
    )

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"{BASE}{endpoint.pk}/deliveries/{delivery.pk}/redeliver/", **write)

    assert response.status_code == 200, response.content
    assert response.json()["state"] == "pending" and response.json()["attempts"] == 0
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 1
    assert len(receiver.requests) == 1 and receiver.requests[0].verified


def test_redeliver_a_pending_delivery_is_refused(client, write, organization):
    endpoint = WebhookEndpointFactory(organization=organization)
    delivery = WebhookDeliveryFactory(endpoint=endpoint)

    response = client.post(f"{BASE}{endpoint.pk}/deliveries/{delivery.pk}/redeliver/", **write)

    assert response.status_code == 400
    assert "still being attempted" in response.json()["detail"]


def test_another_tenants_endpoint_is_404_on_every_route(client, write, other_organization):
    endpoint = WebhookEndpointFactory(organization=other_organization)
    delivery = WebhookDeliveryFactory(endpoint=endpoint, state=DeliveryState.FAILED)
    path = f"{BASE}{endpoint.pk}/"

    assert client.get(path, **write).status_code == 404
    assert patch(client, path, {"is_active": False}, write).status_code == 404
    assert client.get(f"{path}deliveries/", **write).status_code == 404
    assert client.post(f"{path}deliveries/{delivery.pk}/redeliver/", **write).status_code == 404
    assert client.delete(path, **write).status_code == 404
    endpoint.refresh_from_db()
    assert endpoint.is_active


def test_a_delivery_of_another_endpoint_is_404(client, write, organization):
    mine = WebhookEndpointFactory(organization=organization)
    sibling = WebhookEndpointFactory(organization=organization)
    delivery = WebhookDeliveryFactory(endpoint=sibling, state=DeliveryState.FAILED)

    response = client.post(f"{BASE}{mine.pk}/deliveries/{delivery.pk}/redeliver/", **write)

    assert response.status_code == 404
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED


def test_anonymous_is_refused(client):
    assert client.get(BASE).status_code in (401, 403)


# --- Input, field by field -------------------------------------------------------------------

GOOD = {"url": URL, "event_types": ["order.done"]}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"url": None}, "url", "required"),
        ({"url": ""}, "url", "may not be blank"),
        ({"url": "partner.example.com"}, "url", "absolute http:// or https:// URL"),
        ({"url": "ftp://partner.example.com/x"}, "url", "absolute http:// or https:// URL"),
        ({"url": "https://partner.example.com:99999/x"}, "url", "absolute http:// or https://"),
        ({"url": "https://partner.example.com:0/x"}, "url", "absolute http:// or https:// URL"),
        ({"url": "http://partner.example.com/x"}, "url", "must use https://"),
        ({"url": "https://u:p@partner.example.com/x"}, "url", "user name or password"),
        ({"event_types": None}, "event_types", "required"),
        ({"event_types": []}, "event_types", "at least one event type"),
        ({"event_types": "order.done"}, "event_types", "Expected a list"),
        (
            {"event_types": ["order.done", "order.shipped"]},
            "event_types",
            "Unknown event type: order.shipped. Allowed: " + ", ".join(EVENT_TYPES) + ".",
        ),
        ({"is_active": "maybe"}, "is_active", "valid boolean"),
    ],
)
def test_bad_input_names_the_field(client, write, settings, change, field, message):
    settings.LOAM_WEBHOOKS_ALLOW_HTTP = False
    data = {**GOOD, **change}
    data = {k: v for k, v in data.items() if v is not None}

    response = post(client, BASE, data, write)

    assert response.status_code == 400, response.content
    errors = field_errors(response)
    assert list(errors) == [field], errors
    assert any(message in m for m in errors[field]), errors
    assert not WebhookEndpoint.objects.exists()


def test_bad_input_on_update_names_the_field(client, write, organization):
    endpoint = WebhookEndpointFactory(organization=organization)
    response = patch(client, f"{BASE}{endpoint.pk}/", {"event_types": ["nope"]}, write)
    assert response.status_code == 400
    assert "Unknown event type: nope" in field_errors(response)["event_types"][0]
    endpoint.refresh_from_db()
    assert endpoint.event_types == ["order.done", "instance.running"]


# --- Schema ----------------------------------------------------------------------------------


def test_schema_documents_the_bodies(client, owner):
    client.force_login(owner)
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    create = paths["/api/v1/webhooks/"]["post"]
    assert "WebhookEndpointInput" in str(create["requestBody"])
    assert "WebhookEndpointCreated" in str(create["responses"]["201"])
    created = schema["components"]["schemas"]["WebhookEndpointCreated"]
    assert "secret" in created["properties"]
    assert "PatchedWebhookEndpointUpdate" in str(
        paths["/api/v1/webhooks/{id}/"]["patch"]["requestBody"]
    )
    assert "WebhookDelivery" in str(paths["/api/v1/webhooks/{id}/deliveries/"]["get"]["responses"])
    redeliver = paths["/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver/"]["post"]
    assert "WebhookDelivery" in str(redeliver["responses"]["200"])
