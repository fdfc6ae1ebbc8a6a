"""The operator routes: a park's operators list and decide on their park's organizations, orders
and quotas, and nothing of another park; tenants and API keys are refused."""

import pytest
from django.test import Client

from apps.core.models import AuditEvent
from apps.orchestration.services import register_node
from apps.orders.models import Instance
from apps.orders.services import HostRequest, submit_create
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.tenants.models import ApiKeyScope
from apps.tenants.services import create_api_key
from tests.api.conftest import ENGLISH, assert_field_errors, assert_problem, bearer, results
from tests.factories import BackendFactory, MembershipFactory, OrganizationFactory, PoolFactory
from tests.orders.conftest import SSH_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


@pytest.fixture
def op(operator):
    """A client signed in as the park's operator."""
    browser = Client(**ENGLISH)
    browser.force_login(operator)

    class Op:
        def get(self, path, data=None):
            return browser.get(path, data)

        def post(self, path, data=None):
            return browser.post(path, data or {}, content_type="application/json")

        def patch(self, path, data):
            return browser.patch(path, data, content_type="application/json")

    return Op()


@pytest.fixture
def submitted(park):
    return OrganizationFactory(park=park, verification_state="submitted", name="Acme Submitted")


@pytest.fixture
def waiting(world, other_organization, other_owner):
    """A create order of the unverified other organization, awaiting approval."""
    (order,) = submit_create(
        organization=other_organization, actor=other_owner, request=world.request(1)
    )
    assert order.state == "awaiting_approval"
    return order


@pytest.fixture
def far_waiting(elsewhere):
    """A waiting order in the other park (its organization left unverified)."""
    organization = elsewhere.organization
    type(organization).objects.filter(pk=organization.pk).update(verification_state="submitted")
    organization.refresh_from_db()
    pool = PoolFactory(
        backend=BackendFactory(park=elsewhere.park),
        region=elsewhere.region,
        accelerator_model=elsewhere.model,
    )
    register_node(pool=pool, hostname="far-1", accelerators=8, vcpu=256, ram_gb=2048)
    (order,) = submit_create(
        organization=organization,
        actor=elsewhere.owner,
        request=HostRequest(
            flavor=elsewhere.flavor,
            image=elsewhere.image,
            region=elsewhere.region,
            system_disk_gb=elsewhere.flavor.system_disk_gb,
            ssh_public_key=SSH_KEY,
            name="far",
        ),
    )
    assert order.state == "awaiting_approval"
    return order


# --- Organizations ---------------------------------------------------------------------------


def test_organizations_of_the_operators_park_only(op, organization, other_organization, elsewhere):
    rows = results(op.get("/api/v1/operator/organizations/"), 2)
    assert {row["id"] for row in rows} == {organization.pk, other_organization.pk}
    one = op.get(f"/api/v1/operator/organizations/{organization.pk}/")
    assert one.status_code == 200 and one.json()["slug"] == organization.slug
    far = op.get(f"/api/v1/operator/organizations/{elsewhere.organization.pk}/")
    assert_problem(far, 404, "not_found")


def test_organizations_filter_by_verification_state(op, organization, submitted):
    rows = results(op.get("/api/v1/operator/organizations/", {"verification_state": "submitted"}))
    assert [row["id"] for row in rows] == [submitted.pk]


def test_approve_verification(op, submitted, operator):
    response = op.post(f"/api/v1/operator/organizations/{submitted.pk}/approve-verification/")

    assert response.status_code == 200, response.content
    assert response.json()["verification_state"] == "verified"
    submitted.refresh_from_db()
    assert submitted.is_verified
    assert QuotaLimit.objects.filter(organization=submitted).exists()  # verified defaults


def test_approving_an_unsubmitted_organization_is_409(op, organization):
    response = op.post(f"/api/v1/operator/organizations/{organization.pk}/approve-verification/")
    assert_problem(response, 409)
    organization.refresh_from_db()
    assert organization.verification_state == "unverified"


def test_reject_verification_with_a_reason(op, submitted):
    response = op.post(
        f"/api/v1/operator/organizations/{submitted.pk}/reject-verification/",
        {"reason": "The licence is unreadable."},
    )

    assert response.status_code == 200, response.content
    assert response.json()["verification_state"] == "rejected"
    assert response.json()["verification_note"] == "The licence is unreadable."
    submitted.refresh_from_db()
    assert submitted.verification_state == "rejected"


@pytest.mark.parametrize("data", [{}, {"reason": ""}, {"reason": "x" * 1001}])
def test_reject_verification_needs_a_reason(op, submitted, data):
    path = f"/api/v1/operator/organizations/{submitted.pk}/reject-verification/"
    assert_field_errors(op.post(path, data), "reason")
    submitted.refresh_from_db()
    assert submitted.verification_state == "submitted"


def test_a_blank_reason_is_400(op, submitted):
    path = f"/api/v1/operator/organizations/{submitted.pk}/reject-verification/"
    response = op.post(path, {"reason": "   "})
    assert_problem(response, 400)
    submitted.refresh_from_db()
    assert submitted.verification_state == "submitted"


def test_another_parks_organization_cannot_be_decided(op, elsewhere):
    organization = elsewhere.organization
    type(organization).objects.filter(pk=organization.pk).update(verification_state="submitted")
    base = f"/api/v1/operator/organizations/{organization.pk}"
    assert_problem(op.post(f"{base}/approve-verification/"), 404, "not_found")
    assert_problem(op.post(f"{base}/reject-verification/", {"reason": "no"}), 404, "not_found")
    assert_problem(op.post(f"{base}/reject-verification/", {}), 404, "not_found")
    organization.refresh_from_db()
    assert organization.verification_state == "submitted"


# --- Orders ----------------------------------------------------------------------------------


def test_orders_of_the_operators_park(op, waiting, far_waiting):
    rows = results(op.get("/api/v1/operator/orders/"), 1)
    assert rows[0]["id"] == waiting.pk
    waiting_rows = results(op.get("/api/v1/operator/orders/", {"state": "awaiting_approval"}))
    assert [row["id"] for row in waiting_rows] == [waiting.pk]
    assert op.get(f"/api/v1/operator/orders/{waiting.pk}/").json()["state"] == "awaiting_approval"
    assert_problem(op.get(f"/api/v1/operator/orders/{far_waiting.pk}/"), 404, "not_found")


def test_approve_a_waiting_order(op, world, waiting, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = op.post(f"/api/v1/operator/orders/{waiting.pk}/approve/")

    assert response.status_code == 200, response.content
    assert response.json()["id"] == waiting.pk
    assert response.json()["state"] == "fulfilling"
    waiting.refresh_from_db()
    assert waiting.state == "done"
    assert Instance.objects.get(pk=waiting.instance_id).state == "running"


def test_reject_a_waiting_order(op, waiting):
    response = op.post(f"/api/v1/operator/orders/{waiting.pk}/reject/", {"reason": "Not now."})

    assert response.status_code == 200, response.content
    assert response.json()["state"] == "rejected"
    assert response.json()["reason"] == "Not now."
    waiting.refresh_from_db()
    assert waiting.state == "rejected"
    assert waiting.instance.state == "released"


@pytest.mark.parametrize("data", [{}, {"reason": ""}])
def test_rejecting_an_order_needs_a_reason(op, waiting, data):
    assert_field_errors(op.post(f"/api/v1/operator/orders/{waiting.pk}/reject/", data), "reason")
    waiting.refresh_from_db()
    assert waiting.state == "awaiting_approval"


def test_deciding_twice_is_409(op, waiting):
    rejected = op.post(f"/api/v1/operator/orders/{waiting.pk}/reject/", {"reason": "no"})
    assert rejected.status_code == 200
    assert_problem(op.post(f"/api/v1/operator/orders/{waiting.pk}/approve/"), 409)


def test_another_parks_order_is_404(op, far_waiting):
    base = f"/api/v1/operator/orders/{far_waiting.pk}"
    assert_problem(op.post(f"{base}/approve/"), 404, "not_found")
    assert_problem(op.post(f"{base}/reject/", {"reason": "no"}), 404, "not_found")
    assert_problem(op.post(f"{base}/reject/", {}), 404, "not_found")
    far_waiting.refresh_from_db()
    assert far_waiting.state == "awaiting_approval"


# --- Quotas ----------------------------------------------------------------------------------


def test_quotas_of_the_operators_park(op, world, elsewhere):
    far = QuotaLimit.objects.create(
        park=elsewhere.park,
        organization=elsewhere.organization,
        resource=QuotaResource.ACCELERATORS,
        limit=4,
    )
    rows = results(op.get("/api/v1/operator/quotas/"))
    assert {(row["resource"], row["limit"]) for row in rows} == {
        ("accelerators", 16),
        ("instances", 10),
    }
    assert all(row["organization"] == world.organization.pk for row in rows)
    assert far.pk not in {row["id"] for row in rows}


def test_patch_a_limit(op, world, operator):
    limit = QuotaLimit.objects.get(organization=world.organization, resource="accelerators")

    response = op.patch(f"/api/v1/operator/quotas/{limit.pk}/", {"limit": 32})

    assert response.status_code == 200, response.content
    assert response.json()["limit"] == 32
    limit.refresh_from_db()
    assert limit.limit == 32
    event = AuditEvent.objects.filter(action="quota.changed").get()
    assert event.data == {"resource": "accelerators", "from": 16, "to": 32}


def test_only_the_limit_changes(op, world, other_organization):
    limit = QuotaLimit.objects.get(organization=world.organization, resource="accelerators")
    response = op.patch(
        f"/api/v1/operator/quotas/{limit.pk}/",
        {"limit": 20, "organization": other_organization.pk, "resource": "instances"},
    )
    assert response.status_code == 200
    limit.refresh_from_db()
    assert (limit.limit, limit.organization_id, limit.resource) == (
        20,
        world.organization.pk,
        "accelerators",
    )


@pytest.mark.parametrize("value", [-1, "many", None])
def test_an_invalid_limit_is_400(op, world, value):
    limit = QuotaLimit.objects.get(organization=world.organization, resource="accelerators")
    assert_field_errors(op.patch(f"/api/v1/operator/quotas/{limit.pk}/", {"limit": value}), "limit")
    limit.refresh_from_db()
    assert limit.limit == 16


def test_another_parks_quota_is_404(op, elsewhere):
    far = QuotaLimit.objects.create(
        park=elsewhere.park,
        organization=elsewhere.organization,
        resource=QuotaResource.ACCELERATORS,
        limit=4,
    )
    assert_problem(op.get(f"/api/v1/operator/quotas/{far.pk}/"), 404, "not_found")
    assert_problem(op.patch(f"/api/v1/operator/quotas/{far.pk}/", {"limit": 99}), 404, "not_found")
    assert_problem(op.patch(f"/api/v1/operator/quotas/{far.pk}/", {"limit": -1}), 404, "not_found")
    far.refresh_from_db()
    assert far.limit == 4


def test_quotas_take_no_put_post_or_delete(op, operator, world):
    limit = QuotaLimit.objects.get(organization=world.organization, resource="accelerators")
    assert_problem(op.post("/api/v1/operator/quotas/", {"limit": 1}), 405, "method_not_allowed")
    browser = Client()
    browser.force_login(operator)
    path = f"/api/v1/operator/quotas/{limit.pk}/"
    put = browser.put(path, {"limit": 1}, content_type="application/json")
    assert_problem(put, 405, "method_not_allowed")
    assert_problem(browser.delete(path), 405, "method_not_allowed")
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 16


# --- Who may use the operator routes ---------------------------------------------------------

OPERATOR_PATHS = [
    "/api/v1/operator/organizations/",
    "/api/v1/operator/orders/",
    "/api/v1/operator/quotas/",
]


@pytest.mark.parametrize("path", OPERATOR_PATHS)
@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_a_tenant_session_is_403(client, request, path, role):
    client.force_login(request.getfixturevalue(role))
    assert_problem(client.get(path), 403, "permission_denied")


@pytest.mark.parametrize("path", OPERATOR_PATHS)
def test_an_api_key_is_403(client, make_key, path):
    assert_problem(client.get(path, **bearer(make_key(ApiKeyScope.WRITE))), 403)


def test_an_operators_own_key_is_403(client, operator, organization, world, waiting):
    MembershipFactory(organization=organization, user=operator, role="owner")
    _key, secret = create_api_key(
        organization=organization, actor=operator, name="op", scope=ApiKeyScope.WRITE
    )
    response = client.post(f"/api/v1/operator/orders/{waiting.pk}/approve/", **bearer(secret))
    assert_problem(response, 403, "permission_denied")
    waiting.refresh_from_db()
    assert waiting.state == "awaiting_approval"


def test_a_tenant_cannot_decide(client, owner, waiting, submitted):
    client.force_login(owner)
    assert_problem(client.post(f"/api/v1/operator/orders/{waiting.pk}/approve/"), 403)
    path = f"/api/v1/operator/organizations/{submitted.pk}/approve-verification/"
    assert_problem(client.post(path), 403)
    waiting.refresh_from_db()
    submitted.refresh_from_db()
    assert waiting.state == "awaiting_approval"
    assert submitted.verification_state == "submitted"


@pytest.mark.parametrize("path", OPERATOR_PATHS)
def test_no_credentials_is_401(client, path):
    assert_problem(client.get(path), 401, "not_authenticated")


def test_another_parks_operator_sees_only_theirs(elsewhere, waiting, organization):
    browser = Client()
    browser.force_login(elsewhere.operator)
    rows = results(browser.get("/api/v1/operator/organizations/"), 1)
    assert rows[0]["id"] == elsewhere.organization.pk
    assert results(browser.get("/api/v1/operator/orders/"), 0) == []
    assert_problem(browser.post(f"/api/v1/operator/orders/{waiting.pk}/approve/"), 404)


def test_a_limit_below_what_is_used_answers_with_a_warning(op, world):
    from tests.factories import InstanceFactory

    InstanceFactory(organization=world.organization, state="running")  # holds its flavor's cards
    limit = QuotaLimit.objects.get(organization=world.organization, resource="accelerators")

    below = op.patch(f"/api/v1/operator/quotas/{limit.pk}/", {"limit": 0})
    assert below.status_code == 200, below.content
    assert "Nothing running is stopped" in below.json()["warning"]

    above = op.patch(f"/api/v1/operator/quotas/{limit.pk}/", {"limit": 10_000})
    assert above.json()["warning"] is None
