"""`Idempotency-Key` on POSTs (apps/api/idempotency.py): replay, conflict, per caller, 24
hours."""

from datetime import timedelta

import psycopg.errors
import pytest
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from apps.api.models import IdempotencyRecord
from apps.orders.models import Instance, Order
from apps.quotas.models import QuotaResource
from apps.tenants.models import ApiKeyScope
from tests.api.conftest import assert_problem, bearer
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.orders.conftest import SSH_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

BODY = {
    "flavor": "g1.1x",
    "image": "ubuntu-cuda",
    "region": "center",
    "ssh_public_key": SSH_KEY,
    "name": "web",
}


def post(client, key, data=None, *, idempotency_key=None, path="/api/v1/orders/"):
    headers = {"HTTP_IDEMPOTENCY_KEY": idempotency_key} if idempotency_key is not None else {}
    return client.post(
        path, data or BODY, content_type="application/json", **bearer(key), **headers
    )


def test_same_key_and_body_replays_the_first_response(
    client, world, write_key, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, write_key, idempotency_key="order-1")
    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        again = post(client, write_key, idempotency_key="order-1")

    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert callbacks == []  # nothing queued the second time
    assert Instance.objects.count() == 1 and Order.objects.count() == 1
    assert IdempotencyRecord.objects.get().status_code == 201


def test_a_replayed_refusal_is_the_same_problem(client, world, write_key):
    big = {**BODY, "flavor": "g1.8x", "count": 3}  # 24 accelerators > 16
    first = post(client, write_key, big, idempotency_key="too-big")
    assert_problem(first, 409, "quota_exceeded")
    world.set_limit(QuotaResource.ACCELERATORS, 64)  # would fit now: the replay still refuses

    again = post(client, write_key, big, idempotency_key="too-big")

    assert again["Idempotent-Replayed"] == "true"
    assert again.status_code == 409
    assert again.json() == first.json()
    assert not Order.objects.exists()


def test_a_replayed_refusal_keeps_the_problem_content_type(client, world, write_key):
    big = {**BODY, "flavor": "g1.8x", "count": 3}
    post(client, write_key, big, idempotency_key="too-big")
    again = post(client, write_key, big, idempotency_key="too-big")
    assert again["Content-Type"].startswith("application/problem+json")


def test_same_key_with_another_body_is_a_409_problem(client, world, write_key):
    assert post(client, write_key, idempotency_key="k").status_code == 201

    response = post(client, write_key, {**BODY, "name": "other"}, idempotency_key="k")

    assert_problem(response, 409, "idempotency_conflict")
    assert "Idempotent-Replayed" not in response
    assert Order.objects.count() == 1


def test_same_key_on_another_path_is_a_409_problem(client, world, write_key):
    assert post(client, write_key, idempotency_key="k").status_code == 201
    response = post(client, write_key, idempotency_key="k", path="/api/v1/quotes/")
    assert_problem(response, 409, "idempotency_conflict")


def test_without_a_key_two_posts_make_two_orders(client, world, write_key):
    assert post(client, write_key).status_code == 201
    assert post(client, write_key).status_code == 201
    assert Order.objects.count() == 2
    assert not IdempotencyRecord.objects.exists()


def test_a_blank_key_is_no_key(client, world, write_key):
    assert post(client, write_key, idempotency_key="  ").status_code == 201
    assert post(client, write_key, idempotency_key="  ").status_code == 201
    assert Order.objects.count() == 2


def test_keys_are_per_organization(client, world, write_key, make_key, owner):
    """Another key of the same organization, or a member's session, replays: one
    Idempotency-Key orders once for the whole organization."""
    other_key = make_key(ApiKeyScope.WRITE)
    first = post(client, write_key, idempotency_key="shared")
    assert first.status_code == 201

    response = post(client, other_key, idempotency_key="shared")

    assert response.status_code == 201
    assert response["Idempotent-Replayed"] == "true"
    assert response.json() == first.json()
    session = Client()
    session.force_login(owner)
    by_session = session.post(
        "/api/v1/orders/", BODY, content_type="application/json", HTTP_IDEMPOTENCY_KEY="shared"
    )
    assert by_session["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1
    assert IdempotencyRecord.objects.get(key="shared").caller == f"org:{world.organization.pk}"


def test_keys_of_another_organization_are_apart(client, world, write_key, make_key):
    other = OrganizationFactory(park=world.park, verified=True)
    their_owner = UserFactory()
    MembershipFactory(organization=other, user=their_owner, role="owner")
    their_key = make_key(ApiKeyScope.WRITE, org=other, actor=their_owner)
    assert post(client, write_key, idempotency_key="shared").status_code == 201

    response = post(client, their_key, BODY, idempotency_key="shared", path="/api/v1/quotes/")

    assert response.status_code == 200, response.content  # not a conflict with ours
    assert "Idempotent-Replayed" not in response
    assert IdempotencyRecord.objects.filter(key="shared").count() == 2


def test_a_record_older_than_24_hours_is_a_new_request(client, world, write_key):
    first = post(client, write_key, idempotency_key="daily")
    assert first.status_code == 201
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=24, minutes=1))

    again = post(client, write_key, idempotency_key="daily")

    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again
    assert again.json()[0]["id"] != first.json()[0]["id"]
    assert Order.objects.count() == 2
    assert IdempotencyRecord.objects.count() == 1


def test_a_record_younger_than_24_hours_still_replays(client, world, write_key):
    post(client, write_key, idempotency_key="daily")
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=23))
    assert post(client, write_key, idempotency_key="daily")["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_an_invalid_request_is_replayed_as_the_same_400(client, world, write_key):
    bad = {**BODY, "count": 0}
    first = post(client, write_key, bad, idempotency_key="bad")
    assert first.status_code == 400
    again = post(client, write_key, bad, idempotency_key="bad")
    assert again.status_code == 400
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()


def test_an_operation_replays_too(client, world, write_key, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        (order,) = post(client, write_key).json()
    path = f"/api/v1/instances/{order['instance']}/stop/"
    first = client.post(path, **bearer(write_key), HTTP_IDEMPOTENCY_KEY="stop-1")
    assert first.status_code == 202
    again = client.post(path, **bearer(write_key), HTTP_IDEMPOTENCY_KEY="stop-1")
    assert again.status_code == 202
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Order.objects.filter(kind="stop").count() == 1


def test_a_key_longer_than_255_characters_is_refused(client, world, write_key):
    assert_problem(post(client, write_key, idempotency_key="k" * 256), 409, "idempotency_conflict")
    assert not Order.objects.exists()


def test_a_retry_after_a_server_error_is_processed(world, write_key, monkeypatch):
    from apps.api.views import orders as order_views

    real = order_views.services.submit_create

    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(order_views.services, "submit_create", broken)
    browser = Client(raise_request_exception=False)
    assert post(browser, write_key, idempotency_key="retry").status_code == 500
    monkeypatch.setattr(order_views.services, "submit_create", real)

    response = post(browser, write_key, idempotency_key="retry")

    assert response.status_code == 201, response.content


def test_a_request_that_lost_a_race_is_a_503_and_its_retry_is_processed(
    world, write_key, monkeypatch
):
    from apps.api.views import orders as order_views

    real = order_views.services.submit_create

    def deadlocked(**kwargs):
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.Error as exc:
            raise OperationalError(str(exc)) from exc  # as Django wraps the driver's error

    monkeypatch.setattr(order_views.services, "submit_create", deadlocked)
    response = post(Client(), write_key, idempotency_key="raced")
    assert_problem(response, 503, "busy")
    assert response["Retry-After"] == "1"
    monkeypatch.setattr(order_views.services, "submit_create", real)

    response = post(Client(), write_key, idempotency_key="raced")

    assert response.status_code == 201, response.content
    assert Order.objects.filter(organization=world.organization).count() == 1
