"""The tenant endpoints of the REST API: API-key and session authentication, key scopes against
the role matrix, isolation between organizations, CSRF, and the OpenAPI schema."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.tenants import services
from apps.tenants.models import ApiKey, ApiKeyScope
from tests.api.conftest import bearer

pytestmark = pytest.mark.django_db


PROBLEM_TYPE = "https://loam.localhost/problems/"


def assert_problem(response, status, code=None) -> dict:
    """An RFC 9457 problem+json refusal with `status` (and, if given, the type ending `code`)."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status
    assert body["type"].startswith(PROBLEM_TYPE)
    if code is not None:
        assert body["type"] == PROBLEM_TYPE + code
    assert body["title"]
    assert body["detail"]
    return body


def page(response, count=None) -> list:
    """The rows of a paginated list (all on one page here)."""
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert body["count"] == len(body["results"])
    if count is not None:
        assert body["count"] == count
    assert body["next"] is None and body["previous"] is None
    return body["results"]


def assert_401(response):
    assert_problem(response, 401)
    assert response["WWW-Authenticate"] == "Bearer"


# --- API keys: scopes ------------------------------------------------------------------------


def test_read_key_gets_the_organization(client, read_key, organization):
    response = client.get("/api/v1/organization/", **bearer(read_key))

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == organization.pk
    assert body["slug"] == organization.slug
    assert body["park"] == organization.park.slug
    assert body["verification_state"] == organization.verification_state


def test_read_key_lists_the_members(client, read_key, owner, member, other_owner):
    response = client.get("/api/v1/members/", **bearer(read_key))

    emails = {row["email"]: row["role"] for row in page(response, 2)}
    assert emails == {owner.email: "owner", member.email: "member"}


def test_read_key_gets_one_member(client, read_key, owner, organization):
    membership = owner.memberships.get(organization=organization)
    response = client.get(f"/api/v1/members/{membership.pk}/", **bearer(read_key))
    assert response.status_code == 200
    assert response.json()["email"] == owner.email


def test_read_key_cannot_list_or_revoke_keys(client, read_key, write_key):
    assert_problem(client.get("/api/v1/api-keys/", **bearer(read_key)), 403, "permission_denied")
    assert_problem(
        client.get(f"/api/v1/api-keys/{write_key.pk}/", **bearer(read_key)),
        403,
        "permission_denied",
    )
    response = client.post(f"/api/v1/api-keys/{write_key.pk}/revoke/", **bearer(read_key))
    assert_problem(response, 403, "permission_denied")
    write_key.refresh_from_db()
    assert write_key.revoked_at is None


def test_write_key_lists_and_gets_keys(client, read_key, write_key):
    response = client.get("/api/v1/api-keys/", **bearer(write_key))

    rows = page(response, 2)
    assert {row["id"] for row in rows} == {read_key.pk, write_key.pk}
    assert all("key_hash" not in row and "secret" not in row for row in rows)
    assert [row["id"] for row in rows] == [write_key.pk, read_key.pk]  # newest first

    one = client.get(f"/api/v1/api-keys/{read_key.pk}/", **bearer(write_key))
    assert one.status_code == 200
    assert one.json()["prefix"] == read_key.prefix


def test_write_key_revokes_a_key(client, read_key, write_key):
    response = client.post(f"/api/v1/api-keys/{read_key.pk}/revoke/", **bearer(write_key))

    assert response.status_code == 200
    assert response.json()["id"] == read_key.pk
    assert response.json()["revoked_at"] is not None
    read_key.refresh_from_db()
    assert read_key.revoked_at is not None
    # The revoked key stops working at once.
    assert_401(client.get("/api/v1/organization/", **bearer(read_key)))


def test_revoking_twice_keeps_the_first_time(client, read_key, write_key):
    client.post(f"/api/v1/api-keys/{read_key.pk}/revoke/", **bearer(write_key))
    read_key.refresh_from_db()
    first = read_key.revoked_at
    response = client.post(f"/api/v1/api-keys/{read_key.pk}/revoke/", **bearer(write_key))
    assert response.status_code == 200
    read_key.refresh_from_db()
    assert read_key.revoked_at == first


def test_key_use_is_recorded(client, read_key):
    client.get("/api/v1/organization/", **bearer(read_key), REMOTE_ADDR="10.1.2.3")
    read_key.refresh_from_db()
    assert read_key.last_used_at is not None
    assert read_key.last_used_ip == "10.1.2.3"


# --- API keys: unusable credentials ----------------------------------------------------------


def test_revoked_key_is_401(client, read_key, owner):
    services.revoke_api_key(api_key=read_key, actor=owner)
    response = client.get("/api/v1/organization/", **bearer(read_key))
    assert_401(response)


def test_expired_key_is_401(client, make_key):
    key = make_key(ApiKeyScope.WRITE, expires_at=timezone.now() + timedelta(hours=1))
    assert client.get("/api/v1/organization/", **bearer(key)).status_code == 200
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert_401(client.get("/api/v1/organization/", **bearer(key)))
    assert_401(client.get("/api/v1/api-keys/", **bearer(key)))


@pytest.mark.parametrize(
    "secret",
    ["loam_deadbeef_not-the-secret", "garbage", "loam__", ""],
)
def test_unknown_secret_is_401(client, read_key, secret):
    assert_401(client.get("/api/v1/organization/", **bearer(secret)))


def test_a_tampered_secret_of_a_real_prefix_is_401(client, read_key):
    tampered = read_key.secret[:-1] + ("A" if read_key.secret[-1] != "A" else "B")
    assert_401(client.get("/api/v1/organization/", **bearer(tampered)))


@pytest.mark.parametrize("path", ["/api/v1/organization/", "/api/v1/members/", "/api/v1/api-keys/"])
def test_no_credentials_is_401(client, path):
    assert_401(client.get(path))


def test_no_credentials_revoke_is_401(client, read_key):
    assert_401(client.post(f"/api/v1/api-keys/{read_key.pk}/revoke/"))
    read_key.refresh_from_db()
    assert read_key.revoked_at is None


# --- Session authentication ------------------------------------------------------------------


def test_owner_session_gets_everything(client, owner, organization, read_key):
    client.force_login(owner)
    assert client.get("/api/v1/organization/").json()["id"] == organization.pk
    assert client.get("/api/v1/members/").status_code == 200
    keys = client.get("/api/v1/api-keys/")
    assert [row["id"] for row in page(keys, 1)] == [read_key.pk]


def test_viewer_session_reads_but_cannot_see_keys(client, viewer, read_key):
    client.force_login(viewer)
    assert client.get("/api/v1/organization/").status_code == 200
    assert client.get("/api/v1/members/").status_code == 200
    assert_problem(client.get("/api/v1/api-keys/"), 403, "permission_denied")
    assert_problem(client.get(f"/api/v1/api-keys/{read_key.pk}/"), 403, "permission_denied")


def test_session_acts_for_the_current_organization(client, owner, organization, other_organization):
    from tests.factories import MembershipFactory

    MembershipFactory(organization=other_organization, user=owner, role="viewer")
    client.force_login(owner)
    client.post("/org/switch/", {"organization": other_organization.pk})
    assert client.get("/api/v1/organization/").json()["id"] == other_organization.pk
    assert_problem(client.get("/api/v1/api-keys/"), 403)  # a viewer there


@pytest.mark.parametrize("path", ["/api/v1/organization/", "/api/v1/members/", "/api/v1/api-keys/"])
def test_session_of_a_user_without_organization_is_403(client, path):
    from tests.factories import UserFactory

    client.force_login(UserFactory())
    assert_problem(client.get(path), 403, "permission_denied")


def test_session_revoke_without_csrf_token_is_403(owner, read_key):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    assert browser.get("/api/v1/api-keys/").status_code == 200

    response = browser.post(f"/api/v1/api-keys/{read_key.pk}/revoke/")

    assert "CSRF" in assert_problem(response, 403, "permission_denied")["detail"]
    read_key.refresh_from_db()
    assert read_key.revoked_at is None


def test_session_revoke_with_csrf_token_works(owner, read_key):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    browser.get("/org/api-keys/")  # sets the CSRF cookie
    token = browser.cookies["csrftoken"].value

    response = browser.post(f"/api/v1/api-keys/{read_key.pk}/revoke/", HTTP_X_CSRFTOKEN=token)

    assert response.status_code == 200
    read_key.refresh_from_db()
    assert read_key.revoked_at is not None


def test_a_key_needs_no_csrf_token(read_key, write_key):
    browser = Client(enforce_csrf_checks=True)
    response = browser.post(f"/api/v1/api-keys/{read_key.pk}/revoke/", **bearer(write_key))
    assert response.status_code == 200


# --- Isolation between organizations ---------------------------------------------------------


@pytest.fixture
def their_key(make_key, other_organization, other_owner):
    return make_key(ApiKeyScope.WRITE, org=other_organization, actor=other_owner)


def test_another_organizations_key_is_404_with_a_key(client, write_key, their_key):
    assert_problem(
        client.get(f"/api/v1/api-keys/{their_key.pk}/", **bearer(write_key)), 404, "not_found"
    )
    response = client.post(f"/api/v1/api-keys/{their_key.pk}/revoke/", **bearer(write_key))
    assert_problem(response, 404, "not_found")
    their_key.refresh_from_db()
    assert their_key.revoked_at is None
    listed = page(client.get("/api/v1/api-keys/", **bearer(write_key)))
    assert their_key.pk not in {row["id"] for row in listed}


def test_another_organizations_key_is_404_with_a_session(client, owner, their_key):
    client.force_login(owner)
    assert_problem(client.get(f"/api/v1/api-keys/{their_key.pk}/"), 404, "not_found")
    assert_problem(client.post(f"/api/v1/api-keys/{their_key.pk}/revoke/"), 404, "not_found")
    their_key.refresh_from_db()
    assert their_key.revoked_at is None


def test_another_organizations_member_is_404(client, read_key, other_owner, other_organization):
    membership = other_owner.memberships.get(organization=other_organization)
    response = client.get(f"/api/v1/members/{membership.pk}/", **bearer(read_key))
    assert_problem(response, 404, "not_found")


def test_a_key_acts_for_its_own_organization_not_the_session(
    client, other_owner, read_key, organization
):
    client.force_login(other_owner)
    response = client.get("/api/v1/organization/", **bearer(read_key))
    assert response.json()["id"] == organization.pk


def test_a_non_numeric_id_is_404(client, write_key):
    assert_problem(client.get("/api/v1/api-keys/nope/", **bearer(write_key)), 404, "not_found")


# --- Methods and the schema ------------------------------------------------------------------


def test_methods_the_endpoints_do_not_take_are_405(client, write_key):
    auth = bearer(write_key)
    for response, allow in (
        (client.delete(f"/api/v1/api-keys/{write_key.pk}/", **auth), "GET"),
        (client.get(f"/api/v1/api-keys/{write_key.pk}/revoke/", **auth), "POST"),
        (client.post("/api/v1/organization/", **auth), "GET"),
        (client.post("/api/v1/members/", **auth), "GET"),
    ):
        assert_problem(response, 405, "method_not_allowed")
        assert allow in response["Allow"]
    write_key.refresh_from_db()
    assert write_key.revoked_at is None


def test_schema_names_the_tenant_paths(client, owner):
    client.force_login(owner)
    response = client.get("/api/schema/")

    assert response.status_code == 200
    document = response.content.decode()
    assert document.startswith("openapi: 3.")
    for path in (
        "/api/v1/organization/:",
        "/api/v1/members/:",
        "/api/v1/members/{id}/:",
        "/api/v1/api-keys/:",
        "/api/v1/api-keys/{id}/:",
        "/api/v1/api-keys/{id}/revoke/:",
    ):
        assert f"\n  {path}\n" in document, path
    assert "bearer" in document


def test_schema_as_json(client, owner):
    client.force_login(owner)
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {"/api/v1/organization/", "/api/v1/members/", "/api/v1/api-keys/"} <= set(paths)
    assert "post" in paths["/api/v1/api-keys/{id}/revoke/"]


def test_lists_are_paginated_with_page_size(client, read_key, write_key, make_key):
    third = make_key(ApiKeyScope.READ)
    response = client.get("/api/v1/api-keys/", {"page_size": 2}, **bearer(write_key))

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    assert [row["id"] for row in body["results"]] == [third.pk, write_key.pk]
    assert body["previous"] is None
    assert "page=2" in body["next"]
    rest = client.get(body["next"], **bearer(write_key)).json()
    assert [row["id"] for row in rest["results"]] == [read_key.pk]
    assert rest["next"] is None and rest["previous"]


def test_a_page_past_the_end_is_a_404_problem(client, write_key):
    response = client.get("/api/v1/api-keys/", {"page": 9}, **bearer(write_key))
    assert_problem(response, 404, "not_found")
