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
