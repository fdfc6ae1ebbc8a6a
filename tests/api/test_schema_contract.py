"""The schema and the API agree (what deploy/api_contract.sh checks live with schemathesis):
each GET takes exactly the query parameters its operation documents, every documented ordering
term orders, a list answered by a POST is documented as the list it is, a paging action
documents no filters it ignores, and a JSON body's values are of the type the schema states."""

import pytest
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from tests.api.conftest import assert_field_errors, bearer
from tests.api.views.test_orders import body

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def get_operations(schema):
    """(path template, documented query parameter names) of every GET of the schema."""
    for path, operations in schema["paths"].items():
        if "get" in operations:
            parameters = operations["get"].get("parameters", [])
            yield path, {p["name"] for p in parameters if p["in"] == "query"}


def view_for(path_template: str):
    """The view a GET of `path_template` is answered by (its path values made up)."""
    path = path_template.replace("{id}", "1").replace("{mapping_id}", "1")
    path = path.replace("{rule_id}", "1").replace("{code}", "x").replace("{slug}", "x")
    match = resolve(path)
    view = match.func.cls(**match.func.initkwargs)
    view.action_map = getattr(match.func, "actions", {})
    view.action = view.action_map.get("get")
    view.args, view.kwargs = (), match.kwargs
    view.request = Request(APIRequestFactory().get(path))
    view.format_kwarg = None
    return view


def test_each_get_takes_the_query_parameters_it_documents_and_no_other(schema):
    operations = list(get_operations(schema))
    assert len(operations) > 30
    for path, documented in operations:
        view = view_for(path)
        assert view.query_parameters() == documented | {"format"}, path


def test_every_documented_ordering_term_orders_its_list(api, world, running_host, schema):
    running_host()
    ordered = 0
    for path, documented in get_operations(schema):
        if "ordering" not in documented or "{" in path or "/operator/" in path:
            continue
        parameter = next(
            p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "ordering"
        )
        terms = parameter["schema"]["items"]["enum"]
        assert terms, path
        for term in terms:
            response = api.get(path, {"ordering": term})
            assert response.status_code == 200, (path, term, response.content)
            ordered += 1
    assert ordered > 50


def test_an_ordering_term_not_documented_is_a_400_naming_ordering(api, world):
    body = assert_field_errors(api.get("/api/v1/tasks/", {"ordering": "priority,cost"}), "ordering")
    assert '"cost"' in body["errors"]["ordering"][0]
    assert_field_errors(api.get("/api/v1/tasks/", {"ordering": ""}), "ordering")
    assert api.get("/api/v1/tasks/", {"ordering": "-priority,submitted_at"}).status_code == 200


def test_a_filter_given_without_a_value_it_takes_is_a_400_naming_it(api, world):
    # The first schemathesis found: an empty date-time filter answered every record.
    assert_field_errors(api.get("/api/v1/usage/", {"started_at__lt": ""}), "started_at__lt")
    assert_field_errors(api.get("/api/v1/usage/", {"instance": ""}), "instance")
    assert api.get("/api/v1/usage/", {"started_at__lt": "2030-01-01T00:00:00Z"}).status_code == 200


@pytest.mark.parametrize("value", ["null", "ten", "-1", "0", " 5", "5.0"])
def test_a_page_size_that_is_no_whole_number_from_1_is_a_400(api, world, value):
    assert_field_errors(api.get("/api/v1/orders/", {"page_size": value}), "page_size")


def test_a_page_that_is_no_number_is_a_400_and_one_past_the_last_a_404(api, world):
    assert_field_errors(api.get("/api/v1/orders/", {"page": "abc"}), "page")
    assert api.get("/api/v1/orders/", {"page": "2"}).status_code == 404
    assert api.get("/api/v1/orders/", {"page": "1", "page_size": "500"}).status_code == 200


def test_a_paging_action_documents_and_takes_no_filters(api, world, running_host, schema):
    instance = running_host()
    path = "/api/v1/instances/{id}/port-mappings/"
    documented = dict(get_operations(schema))
    assert documented[path] == {"page", "page_size"}
    # `state` and `ordering` were documented here (the instance list's) and silently ignored.
    mappings = f"/api/v1/instances/{instance.pk}/port-mappings/"
    assert_field_errors(api.get(mappings, {"state": "released"}), "state")
    assert api.get(mappings, {"page_size": "1"}).status_code == 200


def test_the_flavor_list_documents_its_catalog_filters_not_ordering(api, world, schema):
    documented = dict(get_operations(schema))["/api/v1/flavors/"]
    assert {"sort", "max_price", "accelerator_count"} <= documented
    assert "ordering" not in documented  # it never ordered the flavors
    assert_field_errors(api.get("/api/v1/flavors/", {"ordering": "code"}), "ordering")
    assert api.get("/api/v1/flavors/", {"sort": "price"}).status_code == 200


def test_a_create_for_several_hosts_is_documented_as_the_plain_list_it_answers(api, world, schema):
    operation = schema["paths"]["/api/v1/orders/"]["post"]
    documented = operation["responses"]["201"]["content"]["application/json"]["schema"]
    assert documented == {"type": "array", "items": {"$ref": "#/components/schemas/Order"}}
    assert not [p for p in operation.get("parameters", []) if p["in"] == "query"]
    response = api.post("/api/v1/orders/", body(count=2))
    assert response.status_code == 201, response.content
    assert isinstance(response.json(), list) and len(response.json()) == 2


# Each instance operation, the body it is sent with, and whether the host is stopped first.
INSTANCE_OPERATIONS = [
    ("stop", {}, False),
    ("start", {"without_cards": False}, True),
    ("release", {"keep_data_disk": None}, False),
    ("resize", {"flavor": "g1.2x"}, False),
    ("expand-disk", {"data_disk_gb": 50}, False),
    ("set-bandwidth", {"bandwidth_mbps": 5}, False),
]


@pytest.mark.parametrize(("operation", "data", "stopped"), INSTANCE_OPERATIONS)
def test_an_instance_operation_answers_the_status_and_body_its_schema_documents(
    api, world, running_host, operate, schema, operation, data, stopped
):
    instance = running_host()
    if stopped:
        operate(instance, "stop")
    documented = schema["paths"][f"/api/v1/instances/{{id}}/{operation}/"]["post"]
    response = api.post(f"/api/v1/instances/{instance.pk}/{operation}/", data)
    assert response.status_code == 202, response.content
    answered = documented["responses"][str(response.status_code)]  # was only a 200
    assert answered["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Order"
    }
    order = schema["components"]["schemas"]["Order"]
    assert set(response.json()) == set(order["properties"])
    # The body documented is the one the operation reads (it was the Instance's).
    request_body = documented.get("requestBody", {}).get("content", {}).get("application/json")
    if data:
        fields = schema["components"]["schemas"][request_body["schema"]["$ref"].split("/")[-1]]
        assert set(data) == set(fields["properties"])
    else:
        assert request_body is None


def test_a_resize_to_another_family_answers_a_documented_422(
    api, world, running_host, other_family, schema
):
    """Found once the contract check reached real hosts: the 422 was in no operation's schema."""
    instance = running_host()
    response = api.post(f"/api/v1/instances/{instance.pk}/resize/", {"flavor": other_family.code})
    assert response.status_code == 422, response.content
    documented = schema["paths"]["/api/v1/instances/{id}/resize/"]["post"]["responses"]
    assert set(documented["422"]["content"]) == {"application/problem+json"}


def test_request_bodies_are_documented_as_json(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            assert set(content) <= {"application/json"}, (method, path, set(content))


# --- JSON values of the type the schema states -------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": 0}, "name"),  # DRF read the number as the text "0"
        ({"name": "web", "description": 1.5}, "description"),
    ],
)
def test_a_number_where_text_is_documented_is_a_400_naming_the_field(api, world, data, field):
    assert_field_errors(api.post("/api/v1/security-groups/", data), field)


def test_text_or_a_bool_where_a_number_is_documented_is_a_400(api, world, running_host):
    instance = running_host()
    path = f"/api/v1/instances/{instance.pk}/set-bandwidth/"
    assert_field_errors(api.post(path, {"bandwidth_mbps": "5"}), "bandwidth_mbps")
    assert_field_errors(api.post(path, {"bandwidth_mbps": True}), "bandwidth_mbps")
    assert api.post(path, {"bandwidth_mbps": 5}).status_code == 202


def test_a_patch_with_a_number_for_a_name_is_a_400(client, world, write_key):
    created = client.post(
        "/api/v1/security-groups/",
        {"name": "web"},
        content_type="application/json",
        **bearer(write_key),
    )
    path = f"/api/v1/security-groups/{created.json()['id']}/"
    refused = client.patch(path, {"name": 5}, content_type="application/json", **bearer(write_key))
    assert_field_errors(refused, "name")
    renamed = client.patch(
        path, {"name": "api"}, content_type="application/json", **bearer(write_key)
    )
    assert renamed.status_code == 200 and renamed.json()["name"] == "api"


def test_a_form_body_is_still_read_as_text(client, world, write_key):
    """The browsable API posts forms: every value is text there, and read as DRF reads it."""
    response = client.post("/api/v1/security-groups/", {"name": "0"}, **bearer(write_key))
    assert response.status_code == 201, response.content


def test_the_browsable_apis_filter_form_still_filters_with_its_empty_fields(
    client, world, owner, running_host
):
    """A signed-in browser's filter form (DRF's browsable API) sends every filter, the unset
    ones empty: there an empty value means no filter, as Django's forms read it."""
    running_host()
    client.force_login(owner)
    page = client.get(
        "/api/v1/orders/", {"state": "", "kind": "", "instance": ""}, HTTP_ACCEPT="text/html"
    )
    assert page.status_code == 200, page.content
    assert "&quot;count&quot;: 1," in page.content.decode()  # the one order, unfiltered
    as_json = client.get(
        "/api/v1/orders/", {"state": "", "kind": ""}, HTTP_ACCEPT="application/json"
    )
    assert_field_errors(as_json, "state", "kind")
