import pytest
from kombu import Connection

from portal.celery import app as celery_app

pytestmark = pytest.mark.django_db


def test_healthz_reports_database_and_broker(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"] == {
        "ok": True,
        "transport": celery_app.conf.broker_url.split("://")[0],  # "filesystem" or "amqp"
    }
    assert "no-cache" in response["Cache-Control"]


def test_healthz_is_503_with_the_reason_when_the_broker_is_unreachable(client, monkeypatch):
    # Port 9 (discard) on loopback is closed here: the connection is refused at once.
    # Replacing the connection, not the app's settings, which Celery caches in several places.
    monkeypatch.setattr(
        celery_app, "connection_for_write", lambda: Connection("amqp://guest:guest@127.0.0.1:9//")
    )
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["broker"]["error"]


def test_healthz_is_503_when_the_database_is_unreachable(client, monkeypatch):
    from django.db import OperationalError

    from apps.core import health

    def broken_cursor():
        raise OperationalError("connection refused")

    monkeypatch.setattr(health.connection, "cursor", broken_cursor)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {
        "ok": False,
        "vendor": health.connection.vendor,
        "error": "connection refused",
    }


def test_healthz_only_answers_get(client):
    assert client.post("/healthz").status_code == 405
