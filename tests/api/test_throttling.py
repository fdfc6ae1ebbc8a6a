"""The rates per API key and per signed-in user (apps/api/throttling.py): 429 problem+json with
Retry-After."""

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.settings import api_settings

from apps.api import throttling
from apps.api.models import IdempotencyRecord
from apps.orders.models import Order
from apps.tenants.models import ApiKeyScope
from tests.api.conftest import assert_problem, bearer
from tests.api.test_idempotency import post

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


@pytest.fixture
def rates(settings, monkeypatch):
    """Three calls a minute per key and per user (throttle classes read rates at import)."""
    rates = {"api_key": "3/min", "user": "3/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    monkeypatch.setattr(api_settings, "DEFAULT_THROTTLE_RATES", rates, raising=False)
    monkeypatch.setattr(throttling.ApiKeyThrottle, "THROTTLE_RATES", rates)
    monkeypatch.setattr(throttling.UserThrottle, "THROTTLE_RATES", rates)
    cache.clear()
    yield rates
    cache.clear()


def assert_throttled(response):
    problem = assert_problem(response, 429, "throttled")
    wait = int(response["Retry-After"])
    assert 0 < wait <= 60
    assert problem["detail"]


def test_the_fourth_call_of_a_key_is_429(client, rates, read_key, make_key):
    for _ in range(3):
        assert client.get("/api/v1/organization/", **bearer(read_key)).status_code == 200

    assert_throttled(client.get("/api/v1/organization/", **bearer(read_key)))
    assert_throttled(client.get("/api/v1/members/", **bearer(read_key)))  # per key, any path

    # Another key of the same organization has its own budget.
    other = make_key(ApiKeyScope.READ)
    assert client.get("/api/v1/organization/", **bearer(other)).status_code == 200


def test_a_throttled_post_does_nothing(client, world, rates, write_key):
    for n in range(3):
        assert client.get("/api/v1/organization/", **bearer(write_key)).status_code == 200, n
    assert_throttled(post(client, write_key, idempotency_key="late"))
    assert not Order.objects.exists()
    assert not IdempotencyRecord.objects.exists()


def test_the_fourth_call_of_a_user_is_429(rates, owner, admin):
    browser = Client()
    browser.force_login(owner)
    for _ in range(3):
        assert browser.get("/api/v1/organization/").status_code == 200
    assert_throttled(browser.get("/api/v1/organization/"))

    someone_else = Client()
    someone_else.force_login(admin)
    assert someone_else.get("/api/v1/organization/").status_code == 200


def test_a_users_key_is_counted_apart_from_the_session(client, rates, owner, read_key):
    browser = Client()
    browser.force_login(owner)
    for _ in range(3):
        assert browser.get("/api/v1/organization/").status_code == 200
    assert_throttled(browser.get("/api/v1/organization/"))
    assert client.get("/api/v1/organization/", **bearer(read_key)).status_code == 200


def test_default_rates_do_not_throttle_a_few_calls(client, read_key):
    cache.clear()
    for _ in range(5):
        assert client.get("/api/v1/organization/", **bearer(read_key)).status_code == 200


def test_a_burst_across_a_windows_edge_still_meets_the_rate(client, rates, read_key, monkeypatch):
    """Counted per minute, but the previous minute's calls, taken as spread over it, count for
    the part of it still within a minute of now, each whole: three at 0:59 leave no room at
    1:01 (until 1:20, when a third of them is out), one at 1:30 (half of them, rounded up,
    still count) and two at 2:00 (1:30's)."""
    now = {"at": 59.0}
    monkeypatch.setattr(throttling.ApiKeyThrottle, "timer", lambda self: now["at"])
    for _ in range(3):
        assert client.get("/api/v1/organization/", **bearer(read_key)).status_code == 200

    now["at"] = 61.0
    response = client.get("/api/v1/organization/", **bearer(read_key))
    assert_throttled(response)
    assert int(response["Retry-After"]) == 19

    now["at"] = 90.0
    assert client.get("/api/v1/organization/", **bearer(read_key)).status_code == 200
    assert_throttled(client.get("/api/v1/organization/", **bearer(read_key)))

    now["at"] = 120.0
    for _ in range(2):
        assert client.get("/api/v1/organization/", **bearer(read_key)).status_code == 200
    assert_throttled(client.get("/api/v1/organization/", **bearer(read_key)))


def test_a_keys_count_is_one_number_at_any_rate(client, rates, read_key, monkeypatch):
    """What the cache keeps per key and window does not grow with the calls made."""
    monkeypatch.setattr(throttling.ApiKeyThrottle, "timer", lambda self: 30.0)
    for _ in range(3):
        client.get("/api/v1/organization/", **bearer(read_key))
    assert_throttled(client.get("/api/v1/organization/", **bearer(read_key)))
    assert cache.get(f"throttle_api_key_{read_key.pk}_0") == 3
