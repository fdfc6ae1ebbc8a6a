"""GPU-less start (无卡模式开机) through the partner API: `POST /instances/{id}/start/` with
`{"without_cards": true}`, its refusals as problem+json, the mode on the instance."""

import pytest

from tests.api.conftest import assert_field_errors, assert_problem
from tests.api.views.test_orders import body
from tests.factories import PriceFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


@pytest.fixture
def stopped(api, django_capture_on_commit_callbacks):
    def make():
        with django_capture_on_commit_callbacks(execute=True):
            (order,) = api.post("/api/v1/orders/", body()).json()
        with django_capture_on_commit_callbacks(execute=True):
            assert api.post(f"/api/v1/instances/{order['instance']}/stop/").status_code == 202
        return order["instance"]

    return make


def test_start_without_cards(api, world, stopped, django_capture_on_commit_callbacks):
    PriceFactory(region=world.region, no_card=True, amount_minor=80)
    instance = stopped()

    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/instances/{instance}/start/", {"without_cards": True})

    assert response.status_code == 202, response.content
    assert response.json()["parameters"] == {"without_cards": True, "no_card_hourly_minor": 80}
    shown = api.get(f"/api/v1/instances/{instance}/").json()
    assert shown["state"] == "running" and shown["without_cards"] is True
    assert world.free_accelerators() == 16


def test_a_region_without_a_no_card_price_is_422(api, world, stopped):
    instance = stopped()
    response = api.post(f"/api/v1/instances/{instance}/start/", {"without_cards": True})
    assert (
        "no price for hosts without cards" in assert_problem(response, 422, "not_priced")["detail"]
    )


def test_a_running_host_is_409(api, world, stopped, django_capture_on_commit_callbacks):
    PriceFactory(region=world.region, no_card=True)
    instance = stopped()
    with django_capture_on_commit_callbacks(execute=True):
        api.post(f"/api/v1/instances/{instance}/start/")
    response = api.post(f"/api/v1/instances/{instance}/start/", {"without_cards": True})
    assert_problem(response, 409, "invalid_transition")


def test_without_cards_must_be_a_boolean(api, world, stopped):
    instance = stopped()
    response = api.post(f"/api/v1/instances/{instance}/start/", {"without_cards": "maybe"})
    assert_field_errors(response, "without_cards")


def test_the_schema_documents_it(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    start = schema["paths"]["/api/v1/instances/{id}/start/"]["post"]
    (request,) = start["requestBody"]["content"]["application/json"]["schema"].values()
    assert request == "#/components/schemas/Start"
    assert "without_cards" in schema["components"]["schemas"]["Start"]["properties"]
    assert "without_cards" in schema["components"]["schemas"]["Instance"]["properties"]
