"""Bad input is a 4xx problem+json that names what is wrong, never a 500 and never stored data
PostgreSQL cannot hold (issue 18): NUL bytes in a path segment, a JSON string or a query value;
integers past the database's bigint; datetimes with an offset PostgreSQL refuses; filters that
name an object which does not exist or is not the caller's (an empty list, the same for both);
PATCH without the field it changes. Run on SQLite and on PostgreSQL (DATABASE_URL)."""

import pytest
from django.test import Client

from apps.api.models import IdempotencyRecord
from apps.orchestration.models import Task
from apps.orders.models import Order
from apps.quotas.models import QuotaLimit
from tests.api.conftest import ENGLISH, assert_field_errors, assert_problem, bearer, results
from tests.factories import (
    InstanceFactory,
    InvoiceFactory,
    OrderFactory,
    UsageRecordFactory,
)
from tests.orchestration.conftest import task_world as task_world  # the fixture, shared
from tests.orders.conftest import SSH_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

NUL = "\x00"
BIGINT_MAX = 2**63 - 1
HOST = {
    "flavor": "g1.1x",
    "image": "ubuntu-cuda",
    "region": "center",
    "ssh_public_key": SSH_KEY,
    "name": "web",
}
TASK = {"name": "bert", "image": "pytorch", "command": "python train.py"}


def no_nul_anywhere(value) -> bool:
    if isinstance(value, str):
        return NUL not in value
    if isinstance(value, dict):
        return all(no_nul_anywhere(k) and no_nul_anywhere(v) for k, v in value.items())
    if isinstance(value, list):
        return all(no_nul_anywhere(v) for v in value)
    return True


def assert_nul_refused(response, *fields) -> dict:
    body = assert_field_errors(response, *fields)
    assert no_nul_anywhere(body), body  # the answer never echoes the NUL back
    assert "null character" in " ".join(m for ms in body["errors"].values() for m in ms).lower()
    return body


@pytest.fixture
def operator_client(operator):
    browser = Client(**ENGLISH)
    browser.force_login(operator)
    return browser


# --- 1. NUL bytes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/flavors/%00/",
        "/api/v1/flavors/g1%001x/",
        "/api/v1/regions/%00/",
        "/api/v1/images/%00/",
        "/api/v1/accelerator-models/%00/",
        "/api/v1/orders/%00/",
        "/api/v1/instances/%00/",
        "/api/v1/tasks/%00/",
    ],
)
def test_a_nul_in_a_path_segment_is_a_400(api, world, path):
    response = api.get(path)
    body = assert_problem(response, 400, "invalid")
    assert no_nul_anywhere(body)


def test_a_nul_in_a_post_path_is_a_400_and_claims_no_key(api, world):
    response = api.post("/api/v1/instances/%00/stop/", HTTP_IDEMPOTENCY_KEY="stop-nul")
    assert_problem(response, 400, "invalid")
    assert not IdempotencyRecord.objects.exists()


def test_a_nul_in_an_operator_path_is_a_400(operator_client, world):
    for path in ("/api/v1/operator/organizations/%00/", "/api/v1/operator/quotas/%00/"):
        assert_problem(operator_client.get(path), 400, "invalid")


@pytest.mark.parametrize("field", ["flavor", "image", "region", "name", "ssh_public_key"])
@pytest.mark.parametrize("path", ["/api/v1/orders/", "/api/v1/quotes/"])
def test_a_nul_in_a_host_request_string_is_a_400_naming_it(api, world, path, field):
    response = api.post(path, {**HOST, field: HOST[field][:2] + NUL})
    assert_nul_refused(response, field)
    assert not Order.objects.exists()


def test_a_nul_in_a_resize_flavor_is_a_400(api, world, running_host):
    response = api.post(f"/api/v1/instances/{running_host().pk}/resize/", {"flavor": NUL})
    assert_nul_refused(response, "flavor")


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"image": "py" + NUL}, "image"),
        ({"accelerator_model": NUL}, "accelerator_model"),
        ({"allowed_regions": ["east", "we" + NUL]}, "allowed_regions.1"),
        ({"command": "python" + NUL}, "command"),
        ({"preference": NUL}, "preference"),
        ({"deadline": "2030-01-01" + NUL}, "deadline"),
    ],
)
def test_a_nul_in_a_task_string_is_a_400_naming_it(api, task_world, fields, field):
    response = api.post("/api/v1/tasks/", {**TASK, **fields})
    assert_nul_refused(response, field)
    assert not Task.objects.exists()


def test_a_nul_in_an_object_key_is_a_400_without_echoing_it(api, world):
    response = api.post("/api/v1/quotes/", {**HOST, "ex" + NUL + "tra": 1})
    body = assert_problem(response, 400, "invalid")
    assert no_nul_anywhere(body)


@pytest.mark.parametrize("query", ["state=%00", "kind=%00", "instance=%00", "ordering=%00"])
def test_a_nul_in_a_query_value_is_a_400(api, world, query):
    response = api.get("/api/v1/orders/?" + query)
    body = assert_problem(response, 400, "invalid")
    assert no_nul_anywhere(body)


def test_a_nul_in_a_flavor_filter_is_a_400(api, world):
    assert_problem(api.get("/api/v1/flavors/?region=%00"), 400, "invalid")


def test_a_nul_in_an_operator_reason_is_a_400(operator_client, world, other_organization):
    response = operator_client.post(
        f"/api/v1/operator/organizations/{other_organization.pk}/reject-verification/",
        {"reason": "no" + NUL},
        content_type="application/json",
    )
    assert_nul_refused(response, "reason")


def test_a_nul_in_the_api_key_is_a_401(client, world):
    response = client.get("/api/v1/organization/", HTTP_AUTHORIZATION="Bearer loam_ab" + NUL)
    assert_problem(response, 401)


# --- 1. Integers and datetimes the database cannot hold -----------------------------------------


@pytest.mark.parametrize("value", [10**30, -(10**30), str(10**30), BIGINT_MAX + 1])
def test_max_hourly_minor_past_bigint_is_a_400(api, task_world, value):
    response = api.post("/api/v1/tasks/", {**TASK, "max_hourly_minor": value})
    assert_field_errors(response, "max_hourly_minor")
    assert not Task.objects.exists()


def test_max_hourly_minor_at_bigint_is_accepted(api, task_world):
    response = api.post("/api/v1/tasks/", {**TASK, "max_hourly_minor": BIGINT_MAX})
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("field", ["count", "data_disk_gb", "bandwidth_mbps", "system_disk_gb"])
def test_a_huge_host_integer_is_a_400(api, world, field):
    assert_field_errors(api.post("/api/v1/quotes/", {**HOST, field: 10**30}), field)


@pytest.mark.parametrize("value", [10**30, BIGINT_MAX + 1, -1])
def test_a_quota_limit_past_bigint_is_a_400(operator_client, world, value):
    limit = QuotaLimit.objects.filter(organization=world.organization).first()
    response = operator_client.patch(
        f"/api/v1/operator/quotas/{limit.pk}/", {"limit": value}, content_type="application/json"
    )
    assert_field_errors(response, "limit")


def test_a_quota_patch_without_limit_is_a_400_naming_it(operator_client, world):
    limit = QuotaLimit.objects.filter(organization=world.organization).first()
    before = limit.limit
    response = operator_client.patch(
        f"/api/v1/operator/quotas/{limit.pk}/", {}, content_type="application/json"
    )
    assert_field_errors(response, "limit")
    limit.refresh_from_db()
    assert limit.limit == before


@pytest.mark.parametrize(
    "value",
    [
        "2024-01-01T00:00:00+16:00",
        "2024-01-01T00:00:00-16:00",
        "2024-01-01T00:00:00+23:59",
        "2024-01-01T00:00:00+14:00",
    ],
)
def test_a_started_at_filter_with_any_valid_offset_answers(api, world, value):
    for lookup in ("started_at__gte", "started_at__lt"):
        results(api.get("/api/v1/usage/", {lookup: value}))


@pytest.mark.parametrize(
    "value", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2024-13-01", "x"]
)
def test_a_started_at_filter_out_of_range_is_a_400(api, world, value):
    assert_field_errors(api.get("/api/v1/usage/", {"started_at__gte": value}), "started_at__gte")


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"])
def test_a_task_deadline_out_of_range_is_a_400(api, task_world, value):
    assert_field_errors(api.post("/api/v1/tasks/", {**TASK, "deadline": value}), "deadline")


def test_a_task_deadline_with_a_large_offset_is_accepted(api, task_world):
    response = api.post("/api/v1/tasks/", {**TASK, "deadline": "2099-01-01T00:00:00+16:00"})
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("pk", [str(10**30), str(BIGINT_MAX + 1), "-1", "1e3"])
def test_a_huge_id_in_a_path_is_a_404(api, world, pk):
    assert_problem(api.get(f"/api/v1/orders/{pk}/"), 404)
    assert_problem(api.post(f"/api/v1/instances/{pk}/stop/"), 404)


# --- 2. Filters naming an object that is not there or not yours --------------------------------


LIST_FILTERS = [
    ("/api/v1/orders/", "instance"),
    ("/api/v1/usage/", "instance"),
    ("/api/v1/usage/", "task"),
    ("/api/v1/usage/", "invoice"),
]


@pytest.mark.parametrize("path, name", LIST_FILTERS)
@pytest.mark.parametrize("value", ["999999", str(BIGINT_MAX), str(BIGINT_MAX + 1), "-1", "0"])
def test_a_filter_naming_a_missing_object_is_an_empty_list(api, world, path, name, value):
    assert results(api.get(path, {name: value})) == []


@pytest.fixture
def theirs(world, other_organization):
    """Another organization's instance, task and invoice, each with a usage record."""
    instance = InstanceFactory(organization=other_organization, running=True)
    invoice = InvoiceFactory(organization=other_organization)
    UsageRecordFactory(organization=other_organization, instance=instance, invoice=invoice)
    task_usage = UsageRecordFactory(organization=other_organization, for_task=True)
    OrderFactory(organization=other_organization, for_instance=True)
    return {"instance": instance.pk, "task": task_usage.workload.task.pk, "invoice": invoice.pk}


@pytest.mark.parametrize("path, name", LIST_FILTERS)
def test_a_filter_naming_another_organizations_object_is_the_same_empty_list(
    api, world, theirs, path, name
):
    missing = api.get(path, {name: 10**9})
    existing = api.get(path, {name: theirs[name]})
    assert results(missing) == results(existing) == []
    assert missing.json() == existing.json()


@pytest.mark.parametrize("value", ["x", "1.5", "1e3", "0x10"])
def test_a_filter_that_is_not_an_id_is_a_400_naming_it(api, world, value):
    assert_field_errors(api.get("/api/v1/orders/", {"instance": value}), "instance")


def test_the_operator_organization_filter_is_the_same_for_missing_and_other_parks(
    operator_client, world, elsewhere
):
    missing = operator_client.get("/api/v1/operator/quotas/", {"organization": 10**9})
    other_park = operator_client.get(
        "/api/v1/operator/quotas/", {"organization": elsewhere.organization.pk}
    )
    assert results(missing) == results(other_park) == []
    mine = results(
        operator_client.get("/api/v1/operator/quotas/", {"organization": world.organization.pk})
    )
    assert mine and {row["organization"] for row in mine} == {world.organization.pk}


def test_the_schema_documents_filters_as_ids(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/orders/"]["get"]["parameters"]}
    assert parameters["instance"]["schema"]["type"] == "integer"
    assert "empty list" in parameters["instance"]["description"]


# --- Every input integer is bounded --------------------------------------------------------------


def request_integers(schema):
    """(where, property schema) of every integer a request body of the API may hold."""
    components = schema["components"]["schemas"]

    def walk(node, where):
        if "$ref" in node:
            yield from walk(components[node["$ref"].rsplit("/", 1)[1]], where)
        elif node.get("readOnly"):
            return
        elif node.get("type") == "integer":
            yield where, node
        for name, item in node.get("properties", {}).items():
            yield from walk(item, f"{where}.{name}")
        if isinstance(node.get("items"), dict):
            yield from walk(node["items"], f"{where}[]")
        for item in node.get("allOf", []) + node.get("oneOf", []) + node.get("anyOf", []):
            yield from walk(item, where)

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                yield from walk(media["schema"], f"{method.upper()} {path}")


def test_every_integer_a_request_may_hold_is_within_bigint(client):
    """A request integer without bounds would reach the database past its bigint."""
    schema = client.get("/api/schema/", {"format": "json"}).json()
    integers = list(request_integers(schema))
    assert any("max_hourly_minor" in where for where, _ in integers)
    for where, integer in integers:
        assert integer.get("minimum", -(2**64)) >= -(2**63), where
        assert integer.get("maximum", 2**64) <= BIGINT_MAX, where


# --- 3. Idempotency keys: never stuck, never storing what PostgreSQL cannot -------------------


def post_with_key(client, key, data, idempotency_key, path="/api/v1/orders/"):
    return client.post(
        path,
        data,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=idempotency_key,
        **{**ENGLISH, **bearer(key)},
    )


def test_a_nul_refusal_claims_no_key_and_answers_the_same_again(client, world, write_key):
    bad = {**HOST, "flavor": NUL}
    first = post_with_key(client, write_key, bad, "nul-1")
    assert_nul_refused(first, "flavor")
    assert not IdempotencyRecord.objects.exists()  # refused before the key is claimed

    again = post_with_key(client, write_key, bad, "nul-1")

    assert again.status_code == 400 and again.json() == first.json()
    assert post_with_key(client, write_key, HOST, "nul-1").status_code == 201  # key still free


def test_a_nul_in_the_idempotency_key_is_a_400(client, world, write_key):
    response = post_with_key(client, write_key, HOST, "k" + NUL)
    assert_field_errors(response, "Idempotency-Key")
    assert not IdempotencyRecord.objects.exists() and not Order.objects.exists()


def test_what_postgresql_cannot_hold_is_never_stored(world, write_key):
    from apps.api import idempotency

    record = IdempotencyRecord.objects.create(
        caller="org:1", key="k", method="POST", path="/api/v1/orders/", body_hash="0" * 64
    )

    class Answer:
        status_code = 400
        data = {"errors": {"na" + NUL + "me": ["bad " + NUL]}, "list": [NUL]}

    idempotency.finish(record, Answer())

    record.refresh_from_db()
    assert record.status_code == 400
    assert record.response_body == {"errors": {"na\\0me": ["bad \\0"]}, "list": ["\\0"]}


def test_an_answer_that_cannot_be_stored_releases_the_key(client, world, write_key, monkeypatch):
    from apps.api import idempotency

    def unstorable(data):
        raise ValueError("cannot be stored")

    monkeypatch.setattr(idempotency, "storable", unstorable)
    first = post_with_key(client, write_key, HOST, "lost")
    assert first.status_code == 201  # the caller still gets the answer
    assert not IdempotencyRecord.objects.exists()  # and the key is not stuck


def test_a_crash_in_the_view_releases_the_key(world, write_key, monkeypatch):
    from django.db import DatabaseError

    from apps.api.views import orders as order_views

    real = order_views.services.submit_create

    def broken(**kwargs):
        raise DatabaseError("A string literal cannot contain NUL (0x00) characters.")

    monkeypatch.setattr(order_views.services, "submit_create", broken)
    browser = Client(raise_request_exception=False)
    assert post_with_key(browser, write_key, HOST, "crash").status_code == 500
    assert not IdempotencyRecord.objects.exists()
    monkeypatch.setattr(order_views.services, "submit_create", real)

    assert post_with_key(browser, write_key, HOST, "crash").status_code == 201


def test_a_claim_left_by_a_dead_process_expires(client, world, write_key):
    from datetime import timedelta

    from django.utils import timezone

    from apps.api import idempotency

    first = post_with_key(client, write_key, HOST, "dead")
    assert first.status_code == 201
    # As if the process had died after claiming: no answer recorded.
    IdempotencyRecord.objects.update(status_code=None, response_body=None)
    still = post_with_key(client, write_key, HOST, "dead")
    assert_problem(still, 409, "idempotency_conflict")
    IdempotencyRecord.objects.update(
        created_at=timezone.now() - idempotency.CLAIM_EXPIRES - timedelta(seconds=1)
    )

    again = post_with_key(client, write_key, HOST, "dead")

    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert IdempotencyRecord.objects.get(key="dead").status_code == 201


def test_a_park_wide_quota_limit_conforms_to_the_schema(client, operator_client, world):
    """Limits without an organization or an accelerator model answer null: the schema says so."""
    schema = client.get("/api/schema/", {"format": "json"}).json()
    properties = schema["components"]["schemas"]["QuotaLimit"]["properties"]
    assert properties["organization"]["nullable"] and properties["accelerator_model"]["nullable"]
    rows = results(operator_client.get("/api/v1/operator/quotas/"))
    assert any(row["accelerator_model"] is None for row in rows)
