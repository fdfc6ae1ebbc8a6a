"""The API keeps the contract its schema states (what deploy/api_contract.sh checks live): an
instance operation answers a status the schema documents, and a query parameter the route does
not take, or a value outside what it documents, is a 400 naming the parameter."""

import pytest
from drf_spectacular.generators import SchemaGenerator

from tests.api.conftest import assert_field_errors, results

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

INSTANCE_OPERATIONS = ["stop", "start", "release", "resize", "expand-disk", "set-bandwidth"]


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def documented_statuses(schema, path, method="post") -> set[str]:
    return set(schema["paths"][path][method]["responses"])


# --- Instance operations: the status they answer is the one documented ------------------------


@pytest.mark.parametrize("operation", INSTANCE_OPERATIONS)
def test_instance_operations_document_the_202_with_its_order(schema, operation):
    response = schema["paths"][f"/api/v1/instances/{{id}}/{operation}/"]["post"]["responses"]
    assert "202" in response
    assert response["202"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Order"
    }


def test_an_instance_operation_answers_a_documented_status_first_and_on_replay(
    api, schema, running_host
):
    instance = running_host()
    path = f"/api/v1/instances/{instance.pk}/stop/"
    documented = documented_statuses(schema, "/api/v1/instances/{id}/stop/")

    first = api.post(path, HTTP_IDEMPOTENCY_KEY="stop-once")
    replay = api.post(path, HTTP_IDEMPOTENCY_KEY="stop-once")

    assert first.status_code == 202, first.content
    assert str(first.status_code) in documented
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.status_code == first.status_code
    assert replay.json() == first.json()


# --- Query parameters a route does not take ----------------------------------------------------


def test_a_list_refuses_an_unknown_query_parameter_by_name(api, world):
    response = api.get("/api/v1/orders/", {"stat": "done"})  # a misspelt `state`
    assert_field_errors(response, "stat")


def test_a_detail_and_an_operation_refuse_query_parameters(api, running_host):
    instance = running_host()
    assert_field_errors(api.get(f"/api/v1/instances/{instance.pk}/", {"page": "1"}), "page")
    refused = api.post(f"/api/v1/instances/{instance.pk}/stop/?force=1")
    assert_field_errors(refused, "force")
    instance.refresh_from_db()
    assert instance.state == "running"  # refused before anything was queued


def test_a_route_without_parameters_names_every_unknown_one(api, world):
    assert_field_errors(api.get("/api/v1/wallet/", {"b": "1", "a": "2"}), "a", "b")


def test_the_documented_parameters_are_still_taken(api, world, running_host):
    instance = running_host()
    rows = results(
        api.get(
            "/api/v1/instances/",
            {"state": "running", "ordering": "-created_at,name", "page": 1, "page_size": 10},
        ),
        1,
    )
    assert rows[0]["id"] == instance.pk
    assert api.get(f"/api/v1/instances/{instance.pk}/", {"format": "json"}).status_code == 200


# --- Values outside what a parameter documents -------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parameter", "value"),
    [
        ("/api/v1/orders/", "ordering", "-secret"),  # not a documented ordering term
        ("/api/v1/instances/", "ordering", "name,price"),
        ("/api/v1/orders/", "kind", ""),  # an enum given no value: not the whole list
        ("/api/v1/security-groups/", "is_default", "maybe"),
        ("/api/v1/instances/", "page_size", "0"),  # documented minimum 1
        ("/api/v1/invoices/", "page", "last"),
    ],
)
def test_a_value_outside_the_documented_ones_is_a_400_naming_the_parameter(
    api, world, path, parameter, value
):
    assert_field_errors(api.get(path, {parameter: value}), parameter)


def test_the_schema_documents_the_ordering_terms_and_page_minimums(schema):
    parameters = {
        parameter["name"]: parameter
        for parameter in schema["paths"]["/api/v1/instances/"]["get"]["parameters"]
    }
    assert set(parameters["ordering"]["schema"]["items"]["enum"]) == {
        term for name in ("created_at", "name", "state") for term in (name, f"-{name}")
    }
    assert parameters["page"]["schema"]["minimum"] == 1
    assert parameters["page_size"]["schema"]["minimum"] == 1
