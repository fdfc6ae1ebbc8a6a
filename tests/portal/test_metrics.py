"""/metrics: who may scrape, what it shows, what a scrape costs, and request counters that add up
across processes (prometheus_client's multiprocess mode, as under gunicorn)."""

import ipaddress
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from kombu import Connection
from prometheus_client.parser import text_string_to_metric_families

from apps.core.transitions import transition
from apps.orchestration.models import TaskState
from apps.orders.models import INSTANCE_TRANSITIONS, InstanceState, OrderState
from portal import metrics
from portal.celery import app as celery_app
from tests.factories import InstanceFactory, MeterFactory, OrderFactory, TaskFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "scrape-token-0123456789abcdef"
OUTSIDE = "203.0.113.7"  # TEST-NET-3: not loopback, not in any allowed network below


def samples(response) -> dict:
    """{(sample name, frozenset of labels): value} of a text exposition."""
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def scrape(client, **extra):
    return samples(client.get("/metrics", REMOTE_ADDR="127.0.0.1", **extra))


def value(found: dict, name: str, **labels) -> float:
    return found[(name, frozenset(labels.items()))]


# --- What a scrape shows -----------------------------------------------------------------------


def test_a_scrape_names_every_metric(client):
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(response.content.decode())
    }
    assert (
        families
        | {
            "loam_http_requests": "counter",
            "loam_http_request_duration_seconds": "histogram",
            "loam_orders": "gauge",
            "loam_instances": "gauge",
            "loam_training_tasks": "gauge",
            "loam_celery_broker_up": "gauge",
            "loam_celery_queue_length": "gauge",
            "loam_provisioning_duration_seconds": "histogram",
            "loam_metering_lag_seconds": "gauge",
            "loam_database_up": "gauge",
        }
        == families
    )


def test_orders_hosts_and_tasks_are_counted_by_state(client):
    OrderFactory.create_batch(2, state=OrderState.SUBMITTED)
    OrderFactory(state=OrderState.DONE)
    InstanceFactory.create_batch(3, running=True)
    InstanceFactory(state=InstanceState.ERROR)
    TaskFactory(state=TaskState.QUEUED)

    found = scrape(client)

    assert value(found, "loam_orders", state="submitted") == 2
    assert value(found, "loam_orders", state="done") == 1
    assert value(found, "loam_orders", state="cancelled") == 0  # every state, zero included
    assert value(found, "loam_instances", state="running") == 3
    assert value(found, "loam_instances", state="error") == 1
    assert value(found, "loam_training_tasks", state="queued") == 1
    assert value(found, "loam_training_tasks", state="running") == 0


def test_requests_are_counted_by_view_method_and_status_and_timed(client):
    before = scrape(client)
    for _ in range(3):
        client.get("/healthz")
    client.post("/healthz")
    client.get("/no-such-page/")
    after = scrape(client)

    def grew(name, **labels):
        key = (name, frozenset(labels.items()))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("loam_http_requests_total", view="healthz", method="GET", status="200") == 3
    assert grew("loam_http_requests_total", view="healthz", method="POST", status="405") == 1
    assert grew("loam_http_requests_total", view="<unresolved>", method="GET", status="404") == 1
    assert grew("loam_http_request_duration_seconds_count", view="healthz", method="GET") == 3
    assert grew("loam_http_request_duration_seconds_sum", view="healthz", method="GET") > 0


def test_provisioning_durations_come_from_the_transitions_of_hosts_that_came_up_lately(client):
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)

    def came_up(started, seconds):
        instance = InstanceFactory()
        with time_machine.travel(started, tick=False):
            instance = transition(instance, InstanceState.PROVISIONING, table=INSTANCE_TRANSITIONS)
        with time_machine.travel(started + timedelta(seconds=seconds), tick=False):
            return transition(instance, InstanceState.RUNNING, table=INSTANCE_TRANSITIONS)

    came_up(now - timedelta(minutes=10), 3)
    restarted = came_up(now - timedelta(minutes=5), 40)
    came_up(now - timedelta(hours=2), 4)  # came up before the window (1 h)
    with time_machine.travel(now - timedelta(minutes=2), tick=False):
        restarted = transition(restarted, InstanceState.STOPPING, table=INSTANCE_TRANSITIONS)
        restarted = transition(restarted, InstanceState.STOPPED, table=INSTANCE_TRANSITIONS)
        restarted = transition(restarted, InstanceState.STARTING, table=INSTANCE_TRANSITIONS)
        transition(restarted, InstanceState.RUNNING, table=INSTANCE_TRANSITIONS)  # not provisioning

    with time_machine.travel(now, tick=False):
        found = scrape(client)

    bucket = "loam_provisioning_duration_seconds_bucket"
    assert value(found, bucket, le="2.0") == 0
    assert value(found, bucket, le="5.0") == 1
    assert value(found, bucket, le="30.0") == 1
    assert value(found, bucket, le="60.0") == 2
    assert value(found, bucket, le="+Inf") == 2
    assert value(found, "loam_provisioning_duration_seconds_gcount") == 2
    assert value(found, "loam_provisioning_duration_seconds_gsum") == 43


def test_metering_lag_is_the_oldest_owed_meter(client):
    now = datetime(2026, 5, 1, 12, tzinfo=UTC)
    MeterFactory(started_at=now - timedelta(hours=1), metered_until=now - timedelta(seconds=90))
    with time_machine.travel(now, tick=False):
        assert value(scrape(client), "loam_metering_lag_seconds") == 90


def test_a_scrape_costs_the_same_few_queries_whatever_the_data_size(client):
    def queries():
        with CaptureQueriesContext(connection) as captured:
            scrape(client)
        return len(captured)

    few = queries()
    OrderFactory.create_batch(20, state=OrderState.SUBMITTED)
    InstanceFactory.create_batch(20, running=True)
    TaskFactory.create_batch(20)
    MeterFactory.create_batch(20)
    # orders, instances, tasks by state; provisioning durations; metering lag
    assert few == queries() == 5


# --- Celery queues -----------------------------------------------------------------------------


def _broker_reachable(url) -> bool:
    try:
        with Connection(url, connect_timeout=1) as probe:
            probe.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1)
    except Exception:  # kombu raises each transport's own errors
        return False
    return True


BROKERS = {
    "memory": "memory://",
    "redis": "redis://127.0.0.1:6379/6",
    "amqp": "amqp://guest:guest@127.0.0.1:5672//",
}


@pytest.fixture(params=[*BROKERS, "filesystem"])
def broker(request, tmp_path):
    """A connection to each broker Loam supports (Redis and RabbitMQ when they run here)."""
    if request.param == "filesystem":
        # Every folder in tmp_path: the control folder defaults to ./control.
        folders = {
            "data_folder_in": str(tmp_path),
            "data_folder_out": str(tmp_path),
            "control_folder": str(tmp_path / "control"),
        }
        with Connection("filesystem://", transport_options=folders) as conn:
            yield conn
        return
    url = BROKERS[request.param]
    if request.param != "memory" and not _broker_reachable(url):
        pytest.skip(f"no {request.param} broker on {url}")
    # RabbitMQ confirms each message, so that it is in the queue before the test counts it.
    with Connection(url, transport_options={"confirm_publish": True}) as conn:
        yield conn


def test_queue_lengths_on_every_broker(broker):
    waiting, never_used = f"metrics-test-{uuid.uuid4().hex}", f"metrics-none-{uuid.uuid4().hex}"
    queue = broker.SimpleQueue(waiting)
    try:
        for n in range(3):
            queue.put({"n": n})
        lengths = metrics.celery_queue_lengths(broker, [waiting, never_used])
    finally:
        queue.queue.delete()
        queue.close()
    assert lengths[waiting] == 3
    if broker.transport.driver_type == "amqp":
        assert never_used not in lengths  # RabbitMQ is asked passively: no queue is created
    else:
        assert lengths[never_used] == 0  # an empty virtual queue leaves nothing to find


def test_a_scrape_shows_the_routed_queues_of_the_configured_broker(client, monkeypatch):
    routed = f"metrics-test-{uuid.uuid4().hex}"
    monkeypatch.setitem(celery_app.conf, "task_routes", {"apps.orders.tasks.*": {"queue": routed}})
    options = {**celery_app.conf.broker_transport_options, "confirm_publish": True}
    with Connection(celery_app.conf.broker_url, transport_options=options) as conn:
        queue = conn.SimpleQueue(routed)
        try:
            queue.put({"n": 1})
            queue.put({"n": 2})
            found = scrape(client)
        finally:
            queue.queue.delete()
            queue.close()
    assert value(found, "loam_celery_broker_up") == 1
    assert value(found, "loam_celery_queue_length", queue=routed) == 2


def test_an_unreachable_broker_is_reported_down_and_the_rest_still_scraped(client, monkeypatch):
    # Port 9 (discard) on loopback is closed here: the connection is refused at once.
    monkeypatch.setattr(
        celery_app, "connection_for_read", lambda: Connection("amqp://guest:guest@127.0.0.1:9//")
    )
    found = scrape(client)
    assert value(found, "loam_celery_broker_up") == 0
    assert not any(name == "loam_celery_queue_length" for name, _labels in found)
    assert value(found, "loam_orders", state="submitted") == 0


def test_an_unreadable_database_is_reported_down_and_the_rest_still_scraped(client, monkeypatch):
    def outage(**kwargs):
        raise OperationalError("connection to server at 127.0.0.1, port 5432 failed")

    monkeypatch.setattr("portal.metrics.metering_lag_seconds", outage)
    client.get("/healthz")
    found = scrape(client)
    assert value(found, "loam_database_up") == 0
    assert not any(name == "loam_orders" for name, _labels in found)
    assert value(found, "loam_celery_broker_up") == 1
    assert any(name == "loam_http_requests_total" for name, _labels in found)


# --- Who may scrape ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remote_addr", "headers", "token", "allowed"),
    [
        ("127.0.0.1", {}, "", True),
        ("::1", {}, "", True),
        ("::ffff:127.0.0.1", {}, "", True),  # a dual-stack socket's IPv4 loopback
        ("10.1.2.3", {}, "", True),  # in METRICS_ALLOWED_IPS below
        (OUTSIDE, {}, "", False),
        (OUTSIDE, {"Authorization": f"Bearer {TOKEN}"}, TOKEN, True),
        (OUTSIDE, {"Authorization": f"bearer {TOKEN}"}, TOKEN, True),
        (OUTSIDE, {"Authorization": "Bearer wrong"}, TOKEN, False),
        (OUTSIDE, {"Authorization": f"Basic {TOKEN}"}, TOKEN, False),
        (OUTSIDE, {"Authorization": "Bearer "}, "", False),  # no token configured: none matches
        # Through nginx: REMOTE_ADDR is nginx's loopback address, not the client's.
        ("127.0.0.1", {"X-Forwarded-For": OUTSIDE}, "", False),
        ("127.0.0.1", {"X-Real-IP": "127.0.0.1"}, TOKEN, False),
        (
            "127.0.0.1",
            {"X-Forwarded-For": OUTSIDE, "Authorization": f"Bearer {TOKEN}"},
            TOKEN,
            True,
        ),
    ],
)
def test_who_may_scrape(client, settings, remote_addr, headers, token, allowed):
    settings.METRICS_TOKEN = token
    settings.METRICS_ALLOWED_NETWORKS = [
        ipaddress.ip_network(entry) for entry in ("127.0.0.0/8", "::1", "10.0.0.0/8")
    ]
    response = client.get("/metrics", REMOTE_ADDR=remote_addr, headers=headers)
    if allowed:
        assert response.status_code == 200
        assert b"loam_orders" in response.content
    else:
        # The site's ordinary 404, as for any page that does not exist: nothing leaks.
        assert response.status_code == 404
        assert b"loam_" not in response.content
        assert "404.html" in [template.name for template in response.templates]


def test_only_get_is_answered(client):
    assert client.get("/metrics").status_code == 200
    assert client.head("/metrics").status_code == 404
    assert client.post("/metrics").status_code == 404


def test_a_scraper_needs_neither_an_allowed_host_nor_https(client, settings):
    """Prometheus addresses a process by IP and port over plain HTTP (a pod's address in
    Kubernetes): neither ALLOWED_HOSTS nor the HTTPS redirect may turn it away."""
    settings.ALLOWED_HOSTS = ["portal.example"]
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/metrics", HTTP_HOST="10.1.2.3:8000").status_code == 200
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 400


def test_allowed_ips_are_addresses_or_networks_and_refused_when_malformed():
    probe = (
        "from django.conf import settings; import django; django.setup(); "
        "print([str(n) for n in settings.METRICS_ALLOWED_NETWORKS])"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings"}

    def run(allowed):
        return subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env={**env, "METRICS_ALLOWED_IPS": allowed},
            capture_output=True,
            text=True,
        )

    good = run("192.0.2.10,10.0.0.0/8")
    assert good.returncode == 0, good.stderr
    assert good.stdout.strip() == "['192.0.2.10/32', '10.0.0.0/8']"
    bad = run("10.0.0.0/8,localhost")
    assert bad.returncode != 0
    assert "METRICS_ALLOWED_IPS" in bad.stderr


# --- Several processes (gunicorn's workers) ------------------------------------------------------

WORKER = """
import json, sys, django
django.setup()
from django.test import Client
client = Client()
for _ in range(int(sys.argv[1])):
    client.get("/healthz", HTTP_HOST="localhost")
import os
print(json.dumps(os.getpid()))
"""


def test_request_counts_of_several_processes_add_up(client, tmp_path, monkeypatch):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
    }
    pids = set()
    for requests in (2, 3):
        worker = subprocess.run(
            [sys.executable, "-c", WORKER, str(requests)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert worker.returncode == 0, worker.stderr
        pids.add(json.loads(worker.stdout.strip().splitlines()[-1]))
    assert len(pids) == 2

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    found = scrape(client)
    healthz = sum(
        count
        for (name, labels), count in found.items()
        if name == "loam_http_requests_total" and ("view", "healthz") in labels
    )
    assert healthz == 5
    assert value(found, "loam_orders", state="submitted") == 0  # read here, at scrape time


def test_a_missing_multiprocess_directory_stops_the_web_process_at_start(monkeypatch, tmp_path):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "absent"))
    with pytest.raises(ImproperlyConfigured, match="PROMETHEUS_MULTIPROC_DIR"):
        metrics.RequestMetricsMiddleware(lambda request: None)
