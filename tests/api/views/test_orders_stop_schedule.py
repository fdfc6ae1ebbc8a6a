"""A host's scheduled stop through the partner API: `POST /api/v1/instances/{id}/schedule-stop/`
sets or clears it, the instance shows `stop_at`, refusals are problem+json."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.orders.models import Instance, OrderKind
from apps.orders.services import submit_create
from tests.api.conftest import ENGLISH, assert_field_errors, assert_problem, bearer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

T0 = datetime(2026, 3, 10, 2, 0, tzinfo=UTC)  # 10:00 in the park's time zone (Shanghai)


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def url(host) -> str:
    return f"/api/v1/instances/{host.pk}/schedule-stop/"


def test_set_at_a_time_after_hours_and_clear(clock, api, world, running_host):
    host = running_host()
    response = api.post(url(host), {"at": "2026-03-10T23:00:00+08:00"})
    assert response.status_code == 200, response.content
    assert response.json()["stop_at"] == "2026-03-10T23:00:00+08:00"
    assert response.json()["id"] == host.pk

    response = api.post(url(host), {"after_hours": 3})
    assert response.json()["stop_at"] == "2026-03-10T13:00:00+08:00"
    assert api.get(f"/api/v1/instances/{host.pk}/").json()["stop_at"] == (
        "2026-03-10T13:00:00+08:00"
    )

    response = api.post(url(host), {"at": None})
    assert response.status_code == 200 and response.json()["stop_at"] is None
    host.refresh_from_db()
    assert host.stop_at is None


def test_a_time_without_an_offset_is_the_parks_local_time(clock, api, world, running_host):
    host = running_host()
    response = api.post(url(host), {"at": "2026-03-10T23:00"})
    assert response.status_code == 200, response.content
    host.refresh_from_db()
    assert host.stop_at == T0 + timedelta(hours=13)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"at": "2026-03-10T09:00:00+08:00"}, "at", "Choose a time in the future."),
        ({"at": "2026-04-10T09:00:00+08:00"}, "at", "at most 30 days ahead"),
        ({"at": "tomorrow"}, "at", "Datetime has wrong format"),
        ({"after_hours": 0}, "after_hours", "greater than or equal to 1"),
        ({"after_hours": 721}, "after_hours", "less than or equal to 720"),
        ({"after_hours": "2"}, "after_hours", "integer"),
        ({}, "non_field_errors", "Give at"),
        ({"at": None, "after_hours": 2}, "non_field_errors", "not both"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(clock, api, world, running_host, data, field, message):
    host = running_host()
    body = assert_field_errors(api.post(url(host), data), field)
    assert message in " ".join(body["errors"][field])
    host.refresh_from_db()
    assert host.stop_at is None


def test_a_stopped_host_is_a_409(clock, api, world, running_host, operate):
    host = running_host()
    operate(host, OrderKind.STOP)
    body = assert_problem(api.post(url(host), {"after_hours": 2}), 409, "invalid_transition")
    assert "only a running host" in body["detail"]


def test_a_read_key_may_not_schedule(clock, client, world, running_host, read_key):
    response = client.post(
        url(running_host()),
        {"after_hours": 2},
        content_type="application/json",
        **ENGLISH,
        **bearer(read_key),
    )
    assert_problem(response, 403)


def test_another_organizations_instance_is_404(clock, api, world, other_organization, other_owner):
    (order,) = submit_create(
        organization=other_organization, actor=other_owner, request=world.request(1)
    )
    their_host = Instance.objects.get(pk=order.instance_id)
    assert_problem(api.post(url(their_host), {"after_hours": 2}), 404, "not_found")
    their_host.refresh_from_db()
    assert their_host.stop_at is None


def test_the_schema_documents_the_action_and_stop_at(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/v1/instances/{id}/schedule-stop/"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][body.rsplit("/", 1)[1]]
    assert set(request["properties"]) == {"at", "after_hours"}
    assert request["properties"]["after_hours"]["maximum"] == 720
    assert {"200", "400", "404", "409"} <= set(operation["responses"])
    instance = schema["components"]["schemas"]["Instance"]["properties"]
    assert instance["stop_at"]["readOnly"] and instance["stop_at"]["format"] == "date-time"
