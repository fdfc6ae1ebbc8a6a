"""A request whose transaction lost a race for rows (deadlock, lock or serialization failure)
answers 503 with Retry-After; any other database error stays a server error."""

import json

import psycopg.errors
import pytest
from django.db import IntegrityError, OperationalError
from django.test import RequestFactory
from django.urls import reverse

from apps.core.contention import ContentionMiddleware, is_contention


def database_error(cause, wrapper=OperationalError):
    """What Django raises for a driver error: its own class, the driver's error as the cause."""
    try:
        try:
            raise cause
        except Exception as exc:
            raise wrapper(str(exc)) from exc
    except wrapper as wrapped:
        return wrapped


@pytest.mark.parametrize(
    "cause",
    [
        psycopg.errors.DeadlockDetected("deadlock detected"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.LockNotAvailable("could not obtain lock on row"),
        Exception("database is locked"),  # SQLite's
    ],
)
def test_lost_races_are_contention(cause):
    assert is_contention(database_error(cause))


@pytest.mark.parametrize(
    "error",
    [
        database_error(psycopg.errors.ConnectionTimeout("connection timeout expired")),
        database_error(psycopg.errors.UniqueViolation("duplicate key"), IntegrityError),
        ValueError("database is locked"),
    ],
)
def test_other_errors_are_not(error):
    assert not is_contention(error)


@pytest.fixture
def deadlocked(monkeypatch):
    def lose_the_race(*args, **kwargs):
        raise database_error(psycopg.errors.DeadlockDetected("deadlock detected"))

    monkeypatch.setattr("apps.orders.views.instances_for", lose_the_race)


@pytest.mark.django_db
def test_a_page_that_lost_a_race_says_try_again(client, owner, deadlocked):
    client.force_login(owner)
    response = client.get(reverse("orders:instance_list"), HTTP_ACCEPT_LANGUAGE="en")

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert "Busy, try again" in response.content.decode()


@pytest.mark.django_db
def test_an_api_call_that_lost_a_race_is_a_503_problem():
    middleware = ContentionMiddleware(lambda request: None)
    request = RequestFactory().post("/api/v1/instances/7/stop/")
    error = database_error(psycopg.errors.DeadlockDetected("deadlock detected"))

    response = middleware.process_exception(request, error)

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content)["type"].endswith("/problems/busy")


@pytest.mark.django_db
def test_any_other_database_error_is_left_to_the_server_error_page(client, owner, monkeypatch):
    def fail(*args, **kwargs):
        raise database_error(psycopg.errors.ConnectionTimeout("connection timeout expired"))

    monkeypatch.setattr("apps.orders.views.instances_for", fail)
    client.force_login(owner)
    with pytest.raises(OperationalError):
        client.get(reverse("orders:instance_list"))
