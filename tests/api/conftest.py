"""Fixtures of the partner-API tests: the sellable `world` of tests/orders (reused, not copied),
API keys of each scope, a second park with its own catalog, and problem+json helpers."""

import pytest

from apps.tenants import services
from apps.tenants.models import ApiKeyScope
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    MembershipFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    PriceFactory,
    RegionFactory,
    UserFactory,
)

# The world of tests/orders: one priced region, a g1 family of 1/2/4/8 flavors, an image, two
# simulator nodes of eight accelerators and quota limits for the verified organization.
from tests.orders.conftest import (  # noqa: F401
    _no_injected_failures,
    english_messages,
    host_request,
    operate,
    order_hosts,
    other_family,
    running_host,
    world,
)

PROBLEM_TYPE = "https://loam.localhost/problems/"
ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


def bearer(key_or_secret) -> dict:
    secret = getattr(key_or_secret, "secret", key_or_secret)
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def assert_problem(response, status, code=None) -> dict:
    """An RFC 9457 problem+json refusal with `status` (and, if given, the type ending `code`)."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status
    assert body["type"].startswith(PROBLEM_TYPE)
    if code is not None:
        assert body["type"] == PROBLEM_TYPE + code, body
    assert body["title"] and body["detail"]
    return body


def assert_field_errors(response, *fields) -> dict:
    """A 400 problem whose `errors` name exactly `fields`."""
    body = assert_problem(response, 400, "invalid")
    assert set(body["errors"]) == set(fields), body
    for field in fields:
        messages = body["errors"][field]
        assert messages and all(messages) if isinstance(messages, list) else messages
    return body


def results(response, count=None) -> list:
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert body["count"] == len(body["results"])
    if count is not None:
        assert body["count"] == count
    return body["results"]


@pytest.fixture
def make_key(owner, organization):
    """make_key(scope=read, org=organization, actor=owner) -> an ApiKey with `.secret`."""

    def make(scope=ApiKeyScope.READ, *, org=None, actor=None, **kwargs):
        key, secret = services.create_api_key(
            organization=org or organization,
            actor=actor or owner,
            name=f"{scope} key",
            scope=scope,
            **kwargs,
        )
        key.secret = secret
        return key

    return make


@pytest.fixture
def read_key(make_key):
    return make_key(ApiKeyScope.READ)


@pytest.fixture
def write_key(make_key):
    return make_key(ApiKeyScope.WRITE)


@pytest.fixture
def api(client, write_key):
    """The test client with the organization's write key on every call (messages in English)."""

    class Api:
        def get(self, path, data=None, **extra):
            return client.get(path, data, **{**ENGLISH, **bearer(write_key), **extra})

        def post(self, path, data=None, **extra):
            return client.post(
                path,
                data or {},
                content_type="application/json",
                **{**ENGLISH, **bearer(write_key), **extra},
            )

        def delete(self, path, **extra):
            return client.delete(path, **{**ENGLISH, **bearer(write_key), **extra})

    return Api()


@pytest.fixture
def elsewhere(db):
    """Another park with its own organization, owner, operator and catalog (a region, a
    priced flavor of another family, an image), all sharing nothing with the `park` fixture."""

    class Elsewhere:
        pass

    there = Elsewhere()
    there.park = ParkFactory()
    there.organization = OrganizationFactory(park=there.park, verified=True)
    there.owner = UserFactory()
    MembershipFactory(organization=there.organization, user=there.owner, role="owner")
    there.operator = UserFactory()
    ParkOperatorFactory(park=there.park, user=there.operator)
    there.region = RegionFactory(park=there.park, code="far-center")
    there.model = AcceleratorModelFactory(ascend=True)
    there.family = FlavorFamilyFactory(park=there.park, accelerator_model=there.model, code="a1")
    there.flavor = FlavorFactory(family=there.family, code="a1-1x", accelerator_count=1)
    there.image = ImageFactory(
        park=there.park,
        code="far-image",
        software_stack="cann",
        compatible_accelerators=[there.model],
    )
    there.price = PriceFactory(region=there.region, flavor=there.flavor, amount_minor=777)
    return there
