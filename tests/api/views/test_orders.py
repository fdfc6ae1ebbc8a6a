"""Quotes, orders, instances and quotas through the partner API: the same services as the pages,
refusals as problem+json (400 with field errors, 403, 404, 409)."""

import json
from decimal import Decimal

import pytest
from rest_framework import serializers

from apps.api.serializers.orders import HostRequestSerializer, OrderSerializer, order_data
from apps.catalog.models import Flavor, Image, Region
from apps.catalog.selectors import visible_images
from apps.orders.models import Instance, Order, OrderKind
from apps.orders.services import approve_order, submit_create
from apps.quotas.models import QuotaResource
from apps.tenants.models import ApiKeyScope
from apps.tenants.services import create_api_key
from tests.api.conftest import assert_field_errors, assert_problem, bearer, results
from tests.factories import ImageFactory, MembershipFactory, ParkOperatorFactory, UserFactory
from tests.orders.conftest import SSH_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def body(**fields) -> dict:
    """A valid create/quote body for one g1.1x host in `center`."""
    return {
        "flavor": "g1.1x",
        "image": "ubuntu-cuda",
        "region": "center",
        "system_disk_gb": 100,
        "ssh_public_key": SSH_KEY,
        "name": "web",
        **fields,
    }


@pytest.fixture
def run_tasks(django_capture_on_commit_callbacks):
    """`with run_tasks():` runs what the request queued after commit (provisioning, operations)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def create(api, run_tasks):
    """create(**fields) -> the running Instance of a host ordered through the API."""

    def make(**fields) -> Instance:
        with run_tasks():
            response = api.post("/api/v1/orders/", body(**fields))
        assert response.status_code == 201, response.content
        (order,) = response.json()
        instance = Instance.objects.get(pk=order["instance"])
        assert instance.state == "running", instance.error_message
        return instance

    return make


@pytest.fixture
def waiting_order(world, other_organization, other_owner):
    """A create order of the unverified other organization (same park), awaiting approval."""
    (order,) = submit_create(
        organization=other_organization, actor=other_owner, request=world.request(1)
    )
    assert order.state == "awaiting_approval"
    return order


# --- Quotes ----------------------------------------------------------------------------------


def test_a_quote_has_the_figures(api, world):
    response = api.post(
        "/api/v1/quotes/", body(data_disk_gb=200, bandwidth_mbps=10, count=2, system_disk_gb=120)
    )

    assert response.status_code == 200, response.content
    # One host: 1000 flavor + (200 + 20 GB extra system disk) × 36 / 720 + 10 Mbps × 720 / 720.
    assert response.json() == {
        "currency": "CNY",
        "region": "center",
        "count": 2,
        "flavor_hourly_minor": 1000,
        "disk_hourly_minor": "11.000000",
        "bandwidth_hourly_minor": "10.000000",
        "hourly_minor": "2042.000000",
        "per_second_minor": str((Decimal(2042) / 3600).quantize(Decimal("0.000001"))),
        "monthly_minor": "1470240.000000",
    }
    assert not Order.objects.exists() and not Instance.objects.exists()


def test_a_quote_without_region_lets_the_scheduler_choose(api, world):
    response = api.post("/api/v1/quotes/", body(region=None, flavor="g1.8x"))
    assert response.status_code == 200, response.content
    assert response.json()["region"] == "center"
    assert response.json()["hourly_minor"] == "8000.000000"


def test_a_read_key_may_quote(client, world, read_key):
    response = client.post(
        "/api/v1/quotes/", body(), content_type="application/json", **bearer(read_key)
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"flavor": "no-such"}, "flavor"),
        ({"image": "no-such"}, "image"),
        ({"region": "no-such"}, "region"),
        ({"system_disk_gb": 10}, "system_disk_gb"),
        ({"system_disk_gb": 50}, "system_disk_gb"),  # below the flavor's 100 GB
        ({"system_disk_gb": 4096}, "system_disk_gb"),
        ({"data_disk_gb": -1}, "data_disk_gb"),
        ({"data_disk_gb": 10**6}, "data_disk_gb"),
        ({"bandwidth_mbps": -5}, "bandwidth_mbps"),
        ({"bandwidth_mbps": 10**5}, "bandwidth_mbps"),
        ({"count": 0}, "count"),
        ({"count": 11}, "count"),
        ({"count": "two"}, "count"),
        ({"name": "Not a host name!"}, "name"),
        ({"name": "x" * 61}, "name"),
        ({"ssh_public_key": "not a key"}, "ssh_public_key"),
    ],
)
@pytest.mark.parametrize("path", ["/api/v1/quotes/", "/api/v1/orders/"])
def test_each_invalid_field_is_a_400_naming_it(api, world, path, fields, field):
    assert_field_errors(api.post(path, body(**fields)), field)
    assert not Order.objects.exists() and not Instance.objects.exists()


@pytest.mark.parametrize("missing", ["flavor", "image"])
def test_a_missing_required_field_is_named(api, world, missing):
    data = body()
    del data[missing]
    assert_field_errors(api.post("/api/v1/quotes/", data), missing)


def test_an_image_of_another_stack_is_a_400_naming_image(api, world):
    ImageFactory(park=world.park, code="euler-cann", software_stack="cann")
    response = api.post("/api/v1/quotes/", body(image="euler-cann"))
    errors = assert_field_errors(response, "image")["errors"]
    assert "does not run on" in " ".join(errors["image"])
    assert_field_errors(api.post("/api/v1/orders/", body(image="euler-cann")), "image")


def test_another_parks_flavor_image_region_are_unknown(api, world, elsewhere):
    response = api.post(
        "/api/v1/quotes/",
        body(flavor=elsewhere.flavor.code, image=elsewhere.image.code, region="far-center"),
    )
    assert_field_errors(response, "flavor", "image", "region")


@pytest.mark.parametrize(
    "fields",
    [
        {"flavor": "nope"},
        {"image": "nope"},
        {"flavor": "nope", "image": "nope", "region": "nope"},
        {"image": "theirs"},  # another organization's own image
        {"flavor": 5},
        {"image": ["ubuntu-cuda"]},
        {"flavor": "", "image": None},
    ],
)
def test_a_flavor_or_image_it_cannot_order_is_refused_as_drfs_own_lookup_refuses_it(
    api, world, other_organization, fields
):
    """The flavor and the image are read together in one statement; what is refused, and
    how, is what DRF's SlugRelatedField over the park's catalog answers."""
    ImageFactory(park=world.park, code="theirs", organization=other_organization)

    class DrfLookups(serializers.Serializer):
        flavor = serializers.SlugRelatedField(
            slug_field="code",
            queryset=Flavor.objects.filter(is_active=True, family__park=world.park),
        )
        image = serializers.SlugRelatedField(
            slug_field="code",
            queryset=Image.objects.filter(
                visible_images(world.organization), is_active=True, park=world.park
            ),
        )
        region = serializers.SlugRelatedField(
            slug_field="code", queryset=Region.objects.filter(park=world.park), allow_null=True
        )

    data = body(**fields)
    expected = DrfLookups(data=data)
    assert not expected.is_valid()
    response = api.post("/api/v1/quotes/", data)
    errors = assert_field_errors(response, *expected.errors)["errors"]
    for field, messages in expected.errors.items():
        assert set(map(str, messages)) <= set(errors[field]), (field, errors)


def test_each_host_request_has_fields_of_its_own_copied_from_the_declared_ones(world):
    """Copied shallow (`HostRequestSerializer.get_fields`): right only while no field holds a
    field of its own, which would stay bound to the declared one, and while validating binds
    the copies alone."""
    first, second = (
        HostRequestSerializer(data=body(), park=world.park, organization=world.organization)
        for _ in range(2)
    )
    assert first.is_valid() and second.is_valid(), (first.errors, second.errors)
    for name, declared in HostRequestSerializer._declared_fields.items():
        assert first.fields[name] is not second.fields[name] is not declared
        assert first.fields[name].parent is first and second.fields[name].parent is second
        assert declared.parent is None and declared.field_name is None
        assert not isinstance(declared, serializers.BaseSerializer)
        assert not hasattr(declared, "child") and not hasattr(declared, "child_relation")


def test_a_quote_needs_credentials(client, world):
    assert_problem(
        client.post("/api/v1/quotes/", body(), content_type="application/json"),
        401,
        "not_authenticated",
    )


# --- Creating orders -------------------------------------------------------------------------


def test_create_answers_201_with_one_order_per_host(api, world, run_tasks):
    with run_tasks():
        response = api.post("/api/v1/orders/", body(count=2, name="job"))

    assert response.status_code == 201, response.content
    orders = response.json()
    assert isinstance(orders, list) and len(orders) == 2
    assert {o["kind"] for o in orders} == {"create"}
    assert all(o["hourly_minor"] == 1000 and o["currency"] == "CNY" for o in orders)
    assert orders[0]["parameters"]["flavor"] == "g1.1x"
    instances = Instance.objects.filter(pk__in=[o["instance"] for o in orders]).order_by("name")
    assert [(i.name, i.state) for i in instances] == [("job-1", "running"), ("job-2", "running")]
    assert all(Order.objects.get(pk=o["id"]).state == "done" for o in orders)


def test_create_without_running_tasks_is_provisioning(api, world):
    response = api.post("/api/v1/orders/", body())
    assert response.status_code == 201
    (order,) = response.json()
    assert order["state"] == "fulfilling"
    assert Instance.objects.get(pk=order["instance"]).state == "provisioning"


def test_create_answers_each_order_as_the_order_serializer_does(
    api, client, world, other_organization, other_owner, make_key
):
    """The create answer is written out (`order_data`); it is OrderSerializer's, field for
    field, for an order placed at once and one that waits, with and without a decision."""
    placed = api.post("/api/v1/orders/", body(count=2, name="job")).json()
    key = make_key(ApiKeyScope.WRITE, org=other_organization, actor=other_owner)
    waiting = client.post(
        "/api/v1/orders/", body(), content_type="application/json", **bearer(key)
    ).json()
    answered = placed + waiting
    orders = Order.objects.in_bulk([order["id"] for order in answered])
    assert {order["state"] for order in answered} == {"fulfilling", "awaiting_approval"}
    for order in answered:
        assert order == json.loads(json.dumps(OrderSerializer(orders[order["id"]]).data))
    decided = Order.objects.get(pk=waiting[0]["id"])
    decided.decided_at = decided.created_at
    assert order_data(decided) == OrderSerializer(decided).data


def test_the_created_instance_is_running_through_the_api(api, world, run_tasks):
    with run_tasks():
        (order,) = api.post("/api/v1/orders/", body()).json()
    response = api.get(f"/api/v1/instances/{order['instance']}/")
    assert response.status_code == 200
    instance = response.json()
    assert instance["state"] == "running"
    assert instance["flavor"] == "g1.1x" and instance["image"] == "ubuntu-cuda"
    assert instance["region"] == "center"
    assert instance["node"] in {"node-a", "node-b"}
    assert instance["simulated"] is True  # the test park is a demo: its hosts do not exist
    assert api.get(f"/api/v1/orders/{order['id']}/").json()["state"] == "done"


def test_a_read_key_cannot_order(client, world, read_key):
    response = client.post(
        "/api/v1/orders/", body(), content_type="application/json", **bearer(read_key)
    )
    assert_problem(response, 403, "permission_denied")
    assert not Order.objects.exists()


def test_a_viewer_session_cannot_order(client, world, viewer):
    client.force_login(viewer)
    response = client.post("/api/v1/orders/", body(), content_type="application/json")
    assert_problem(response, 403, "permission_denied")
    assert not Order.objects.exists()


def test_a_member_session_orders(client, world, member, run_tasks):
    client.force_login(member)
    with run_tasks():
        response = client.post("/api/v1/orders/", body(), content_type="application/json")
    assert response.status_code == 201
    (order,) = response.json()
    assert Instance.objects.get(pk=order["instance"]).created_by == member


def test_over_the_quota_is_a_409_problem(api, world):
    response = api.post("/api/v1/orders/", body(flavor="g1.8x", count=3))  # 24 > 16
    problem = assert_problem(response, 409, "quota_exceeded")
    assert "16" in problem["detail"]
    assert not Order.objects.exists() and not Instance.objects.exists()


def test_no_capacity_is_a_409_problem(api, world, run_tasks):
    world.set_limit(QuotaResource.ACCELERATORS, 64)
    with run_tasks():
        assert api.post("/api/v1/orders/", body(flavor="g1.8x", count=2)).status_code == 201
    assert world.free_accelerators() == 0

    response = api.post("/api/v1/orders/", body(flavor="g1.1x"))
    assert_problem(response, 409, "no_capacity")
    unplaced = api.post("/api/v1/orders/", body(flavor="g1.1x", region=None))
    assert_problem(unplaced, 409, "no_capacity")
    assert Order.objects.count() == 2


def test_an_unverified_organization_waits_for_approval(
    client, world, other_organization, other_owner, make_key
):
    key = make_key(ApiKeyScope.WRITE, org=other_organization, actor=other_owner)
    response = client.post(
        "/api/v1/orders/", body(), content_type="application/json", **bearer(key)
    )
    assert response.status_code == 201
    (order,) = response.json()
    assert order["state"] == "awaiting_approval"
    assert Instance.objects.get(pk=order["instance"]).state == "pending"


# --- Reading orders --------------------------------------------------------------------------


def test_orders_list_and_detail(api, world, create, waiting_order):
    first = create(name="one")
    second = create(name="two")
    rows = results(api.get("/api/v1/orders/"), 2)
    assert [row["instance"] for row in rows] == [second.pk, first.pk]  # newest first
    one = api.get(f"/api/v1/orders/{rows[1]['id']}/")
    assert one.status_code == 200
    assert one.json()["kind"] == "create" and one.json()["state"] == "done"


def test_orders_filter_by_kind_and_instance(api, world, create, run_tasks):
    instance = create()
    with run_tasks():
        assert api.post(f"/api/v1/instances/{instance.pk}/stop/").status_code == 202
    create(name="other")
    stops = results(api.get("/api/v1/orders/", {"kind": "stop"}), 1)
    assert stops[0]["instance"] == instance.pk
    mine = results(api.get("/api/v1/orders/", {"instance": instance.pk}), 2)
    assert {row["kind"] for row in mine} == {"create", "stop"}


def test_another_organizations_order_is_404(api, world, waiting_order):
    assert_problem(api.get(f"/api/v1/orders/{waiting_order.pk}/"), 404, "not_found")
    assert_problem(api.post(f"/api/v1/orders/{waiting_order.pk}/cancel/"), 404, "not_found")
    assert waiting_order.pk not in {row["id"] for row in results(api.get("/api/v1/orders/"))}
    waiting_order.refresh_from_db()
    assert waiting_order.state == "awaiting_approval"


def test_a_read_key_reads_orders(client, world, create, read_key):
    create()
    assert len(results(client.get("/api/v1/orders/", **bearer(read_key)), 1)) == 1


# --- Cancelling ------------------------------------------------------------------------------


def test_cancel_a_waiting_order(client, world, waiting_order, other_organization, other_owner):
    _key, secret = create_api_key(
        organization=other_organization, actor=other_owner, name="w", scope=ApiKeyScope.WRITE
    )
    response = client.post(f"/api/v1/orders/{waiting_order.pk}/cancel/", **bearer(secret))

    assert response.status_code == 200, response.content
    assert response.json()["id"] == waiting_order.pk
    assert response.json()["state"] == "cancelled"
    waiting_order.refresh_from_db()
    assert waiting_order.state == "cancelled"
    assert waiting_order.instance.state == "released"


def test_a_viewer_cannot_cancel(client, world, waiting_order, other_organization):
    viewer = MembershipFactory(organization=other_organization, role="viewer").user
    client.force_login(viewer)
    assert_problem(client.post(f"/api/v1/orders/{waiting_order.pk}/cancel/"), 403)
    waiting_order.refresh_from_db()
    assert waiting_order.state == "awaiting_approval"


def test_cancelling_a_done_order_is_409(api, world, create):
    instance = create()
    order = instance.orders.get(kind=OrderKind.CREATE)
    assert order.state == "done"
    assert_problem(api.post(f"/api/v1/orders/{order.pk}/cancel/"), 409, "invalid_transition")
    order.refresh_from_db()
    instance.refresh_from_db()
    assert order.state == "done" and instance.state == "running"


# --- Instances -------------------------------------------------------------------------------


def test_instances_list_and_detail(api, world, create):
    first, second = create(name="a"), create(name="b")
    rows = results(api.get("/api/v1/instances/"), 2)
    assert [row["name"] for row in rows] == ["b", "a"]
    assert all(row["state"] == "running" for row in rows)
    assert "ssh_public_key" not in rows[0]
    response = api.get(f"/api/v1/instances/{first.pk}/")
    assert response.status_code == 200
    assert response.json()["id"] == first.pk
    assert response.json()["system_disk_gb"] == 100
    running = results(api.get("/api/v1/instances/", {"state": "running"}), 2)
    assert {row["id"] for row in running} == {first.pk, second.pk}
    assert results(api.get("/api/v1/instances/", {"state": "stopped"}), 0) == []


@pytest.fixture
def their_instance(world, other_organization, other_owner, django_capture_on_commit_callbacks):
    (order,) = submit_create(
        organization=other_organization, actor=other_owner, request=world.request(1)
    )
    operator = UserFactory()
    ParkOperatorFactory(park=world.park, user=operator)
    with django_capture_on_commit_callbacks(execute=True):
        approve_order(order=order, operator=operator)
    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.state == "running"
    return instance


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("stop", None),
        ("start", None),
        ("release", None),
        ("resize", {"flavor": "g1.2x"}),
        ("expand-disk", {"data_disk_gb": 500}),
        ("set-bandwidth", {"bandwidth_mbps": 100}),
        ("schedule-stop", {"after_hours": 2}),
    ],
)
def test_another_organizations_instance_is_404(api, world, their_instance, action, data):
    assert_problem(api.get(f"/api/v1/instances/{their_instance.pk}/"), 404, "not_found")
    response = api.post(f"/api/v1/instances/{their_instance.pk}/{action}/", data)
    assert_problem(response, 404, "not_found")
    assert their_instance.orders.count() == 1
    assert their_instance.pk not in {row["id"] for row in results(api.get("/api/v1/instances/"))}


# --- Operations ------------------------------------------------------------------------------


def operation(api, run_tasks, instance, action, data=None) -> dict:
    with run_tasks():
        response = api.post(f"/api/v1/instances/{instance.pk}/{action}/", data)
    assert response.status_code == 202, response.content
    order = response.json()
    assert order["instance"] == instance.pk
    assert order["state"] == "fulfilling"  # as answered; the task ran after
    instance.refresh_from_db()
    assert Order.objects.get(pk=order["id"]).state == "done"
    return order


def test_stop_and_start(api, world, create, run_tasks):
    instance = create()
    assert operation(api, run_tasks, instance, "stop")["kind"] == "stop"
    assert instance.state == "stopped"
    assert operation(api, run_tasks, instance, "start")["kind"] == "start"
    assert instance.state == "running"


def test_resize(api, world, create, run_tasks):
    instance = create()
    order = operation(api, run_tasks, instance, "resize", {"flavor": "g1.2x"})
    assert order["kind"] == "resize"
    assert order["parameters"]["from"] == "g1.1x" and order["parameters"]["to"] == "g1.2x"
    assert instance.flavor.code == "g1.2x"
    assert instance.state == "running"


def test_expand_disk(api, world, create, run_tasks):
    instance = create(data_disk_gb=100)
    order = operation(api, run_tasks, instance, "expand-disk", {"data_disk_gb": 500})
    assert order["kind"] == "expand_disk"
    assert order["parameters"] == {"from": 100, "to": 500}
    assert instance.data_disk_gb == 500


def test_set_bandwidth(api, world, create, run_tasks):
    instance = create()
    order = operation(api, run_tasks, instance, "set-bandwidth", {"bandwidth_mbps": 100})
    assert order["kind"] == "set_bandwidth"
    assert instance.bandwidth_mbps == 100


def test_release(api, world, create, run_tasks):
    instance = create()
    assert world.free_accelerators() == 15
    assert operation(api, run_tasks, instance, "release")["kind"] == "release"
    assert instance.state == "released"
    assert world.free_accelerators() == 16


def test_the_202_is_answered_before_the_backend_runs(api, world, create):
    instance = create()
    response = api.post(f"/api/v1/instances/{instance.pk}/stop/")
    assert response.status_code == 202
    instance.refresh_from_db()
    assert instance.state == "stopping"
    # A second operation while one is in progress is a conflict.
    assert_problem(api.post(f"/api/v1/instances/{instance.pk}/start/"), 409, "invalid_transition")


def test_stopping_a_stopped_host_is_409(api, world, create, run_tasks):
    instance = create()
    operation(api, run_tasks, instance, "stop")
    response = api.post(f"/api/v1/instances/{instance.pk}/stop/")
    assert "stop" in assert_problem(response, 409, "invalid_transition")["detail"].lower()
    assert instance.orders.filter(kind="stop").count() == 1


def test_starting_a_running_host_is_409(api, world, create):
    instance = create()
    assert_problem(api.post(f"/api/v1/instances/{instance.pk}/start/"), 409, "invalid_transition")


def test_resizing_to_another_family_is_refused_as_wrong_family(api, world, create, other_family):
    instance = create()
    response = api.post(f"/api/v1/instances/{instance.pk}/resize/", {"flavor": "g2.2x"})
    assert response["Content-Type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["status"] == response.status_code
    assert response.status_code == 422  # well-formed, but not a size this host can take
    assert problem["type"].endswith("/wrong_family")
    assert "g2.2x" in problem["detail"]
    instance.refresh_from_db()
    assert instance.flavor.code == "g1.1x" and instance.state == "running"
    assert instance.orders.count() == 1


@pytest.mark.parametrize(
    ("action", "data", "field"),
    [
        ("resize", {}, "flavor"),
        ("resize", {"flavor": "no-such"}, "flavor"),
        ("resize", {"flavor": "g1.1x"}, "flavor"),  # the current size
        ("expand-disk", {"data_disk_gb": 50}, "data_disk_gb"),  # a disk only grows
        ("expand-disk", {"data_disk_gb": 100}, "data_disk_gb"),
        ("expand-disk", {"data_disk_gb": 0}, "data_disk_gb"),
        ("expand-disk", {}, "data_disk_gb"),
        ("expand-disk", {"data_disk_gb": 10**6}, "data_disk_gb"),
        ("set-bandwidth", {"bandwidth_mbps": -1}, "bandwidth_mbps"),
        ("set-bandwidth", {"bandwidth_mbps": 0}, "bandwidth_mbps"),  # the current bandwidth
        ("set-bandwidth", {}, "bandwidth_mbps"),
    ],
)
def test_invalid_operation_fields_are_400(api, world, create, action, data, field):
    instance = create(data_disk_gb=100)
    assert_field_errors(api.post(f"/api/v1/instances/{instance.pk}/{action}/", data), field)
    instance.refresh_from_db()
    assert instance.data_disk_gb == 100 and instance.flavor.code == "g1.1x"
    assert instance.orders.count() == 1


def test_a_resize_over_the_quota_is_409(api, world, create):
    world.set_limit(QuotaResource.ACCELERATORS, 1)
    instance = create()
    response = api.post(f"/api/v1/instances/{instance.pk}/resize/", {"flavor": "g1.2x"})
    assert_problem(response, 409, "quota_exceeded")


@pytest.mark.parametrize("action", ["stop", "release"])
def test_a_read_key_cannot_operate(client, world, create, read_key, action):
    instance = create()
    response = client.post(f"/api/v1/instances/{instance.pk}/{action}/", **bearer(read_key))
    assert_problem(response, 403, "permission_denied")
    instance.refresh_from_db()
    assert instance.state == "running"


def test_a_billing_session_cannot_release(client, world, create, billing):
    instance = create()
    client.force_login(billing)
    assert_problem(client.post(f"/api/v1/instances/{instance.pk}/release/"), 403)


# --- Quotas ----------------------------------------------------------------------------------


def test_quotas_with_usage(api, world, create):
    create(flavor="g1.2x")
    response = api.get("/api/v1/quotas/")
    assert response.status_code == 200
    rows = {row["resource"]: row for row in response.json()}
    assert rows["accelerators"] == {
        "resource": "accelerators",
        "accelerator_model": None,
        "used": "2.000",
        "limit": 16,
    }
    assert rows["instances"]["used"] == "1.000"
    assert rows["instances"]["limit"] == 10


def test_quotas_of_a_read_key_and_without_credentials(client, world, read_key):
    response = client.get("/api/v1/quotas/", **bearer(read_key))
    assert response.status_code == 200
    assert {row["used"] for row in response.json()} == {"0.000"}
    assert_problem(client.get("/api/v1/quotas/"), 401, "not_authenticated")
