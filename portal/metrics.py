"""Prometheus metrics at `/metrics`: requests and latencies, and the state of the park's work.

Two kinds of figures, gathered two ways, because gunicorn runs several worker processes:

- Requests (count by view, method and status; latency by view and method) happen in one worker
  each. With `PROMETHEUS_MULTIPROC_DIR` set (production), prometheus_client's multiprocess mode
  keeps every worker's counters in files there and a scrape, answered by any worker, adds them
  up. Without it (the laptop's single runserver process) they stay in memory.
- Everything else is read at scrape time, from the database and the broker, so it is the same
  whichever process answers and needs nothing from the Celery worker: orders, hosts and
  training tasks by state, Celery queue lengths, provisioning durations (from the audit
  trail's transitions) and metering lag. A handful of aggregate queries, whatever the data size.

Who may scrape: a client presenting `Authorization: Bearer <METRICS_TOKEN>`, or one connecting
from an address in `METRICS_ALLOWED_IPS` (loopback by default) and not through a proxy; to
anyone else `/metrics` is any page that does not exist (a 404; a 400 for a Host the site does not
serve). An allowed scrape is answered before Django checks the Host header or redirects to HTTPS,
because a scraper addresses a process by its IP and port over the private network (a pod's
address in Kubernetes, which no ALLOWED_HOSTS could list).

Under gunicorn, deploy/gunicorn.conf.py takes the hooks of portal/metrics_workers.py: they empty
PROMETHEUS_MULTIPROC_DIR when the server starts and keep one pair of files per worker however
often gunicorn replaces its workers.
"""

import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Mapping
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.db.models import Count, DurationField, ExpressionWrapper, F, OuterRef, Q, Subquery, Sum
from django.http import HttpResponse
from django.utils import timezone
from kombu.exceptions import OperationalError
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from apps.billing.selectors import metering_lag_seconds
from apps.core.models import AuditEvent
from apps.orchestration.models import Task, TaskState
from apps.orders.models import Instance, InstanceState, Order, OrderState
from portal.celery import app as celery_app

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"

# --- Requests ---------------------------------------------------------------------------------

# Label values come from a fixed set, never from the client: a path that resolves to no view and
# a method Django does not route by would otherwise grow a series per probe.
UNRESOLVED_VIEW = "<unresolved>"
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# Created unregistered: each scrape builds its own registry (see scrape_registry).
HTTP_REQUESTS = Counter(
    "loam_http_requests",
    "HTTP requests answered, by view, method and status.",
    ["view", "method", "status"],
    registry=None,
)
HTTP_REQUEST_DURATION = Histogram(
    "loam_http_request_duration_seconds",
    "Time from the request reaching Django to its response, by view and method.",
    ["view", "method"],
    registry=None,
)


def multiprocess_dir() -> str:
    """prometheus_client's own setting, read by the library when it is imported."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


class RequestMetricsMiddleware:
    """Counts and times every request (first in MIDDLEWARE, so it sees redirects and errors)."""

    def __init__(self, get_response):
        directory = multiprocess_dir()
        # Checked when the worker starts: a missing directory would fail every request later.
        if directory and not os.path.isdir(directory):
            raise ImproperlyConfigured(
                f"PROMETHEUS_MULTIPROC_DIR={directory} is not a directory; create it (empty) "
                "before starting the web processes."
            )
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        match = request.resolver_match
        view = match.view_name if match else UNRESOLVED_VIEW
        method = request.method if request.method in HTTP_METHODS else "other"
        HTTP_REQUESTS.labels(view, method, str(response.status_code)).inc()
        HTTP_REQUEST_DURATION.labels(view, method).observe(elapsed)
        return response


# --- Who may scrape ---------------------------------------------------------------------------

# A proxy (nginx) sets these; a request carrying one came through it, so its REMOTE_ADDR is the
# proxy's own loopback address and says nothing about the client.
PROXY_HEADERS = ("X-Forwarded-For", "X-Real-IP", "Forwarded")


def scraper_allowed(request) -> bool:
    token = settings.METRICS_TOKEN
    if token:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), token.encode()
        ):
            return True
    if any(header in request.headers for header in PROXY_HEADERS):
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    # A dual-stack socket reports IPv4 clients as ::ffff:a.b.c.d.
    if address.version == 6 and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(address in network for network in settings.METRICS_ALLOWED_NETWORKS)


class MetricsEndpointMiddleware:
    """Answers an allowed scrape of /metrics; hands every other request on, so to a client not
    allowed /metrics is like any page that does not exist."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if (
            request.path_info == METRICS_PATH
            and request.method == "GET"
            and scraper_allowed(request)
        ):
            return HttpResponse(
                generate_latest(scrape_registry()), content_type=CONTENT_TYPE_LATEST
            )
        return self.get_response(request)


def scrape_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    if multiprocess_dir():
        MultiProcessCollector(registry)  # every worker's request metrics, added up
    else:
        registry.register(HTTP_REQUESTS)
        registry.register(HTTP_REQUEST_DURATION)
    registry.register(ParkCollector())
    return registry


# --- The park's work, read at scrape time -----------------------------------------------------


class ParkCollector:
    """The gauges read from the database and the broker when Prometheus scrapes."""

    def collect(self):
        yield from _celery_queues()
        # A scrape during a database outage still answers (request metrics, the broker) and
        # says the database is down, rather than failing as a whole.
        try:
            read = [
                _by_state("loam_orders", "Orders in each state.", Order, OrderState),
                _by_state(
                    "loam_instances", "GPU cloud hosts in each state.", Instance, InstanceState
                ),
                _by_state("loam_training_tasks", "Training tasks in each state.", Task, TaskState),
                _provisioning_durations(),
                GaugeMetricFamily(
                    "loam_metering_lag_seconds",
                    "Seconds since the least recently metered meter that is still owed was metered "
                    "(about one metering interval at most when metering keeps up).",
                    value=metering_lag_seconds(),
                ),
            ]
        except DatabaseError:
            logger.exception("metrics: the database could not be read")
            read = []
        yield GaugeMetricFamily(
            "loam_database_up", "1 when the database answered this scrape.", value=int(bool(read))
        )
        yield from read


def _by_state(name: str, documentation: str, model, states) -> GaugeMetricFamily:
    counts = dict(model.objects.order_by().values_list("state").annotate(count=Count("pk")))
    family = GaugeMetricFamily(name, documentation, labels=["state"])
    for state in states.values:  # every state, 0 included, so that no series disappears
        family.add_metric([state], counts.get(state, 0))
    return family


# Brokers whose queue lengths kombu can read: RabbitMQ (amqp), and its virtual transports Redis,
# the filesystem broker of the embedded default, and memory (tests). Any other broker's queues
# are left out of the scrape.
QUEUE_LENGTH_TRANSPORTS = frozenset({"amqp", "redis", "filesystem", "memory"})
BROKER_TIMEOUT_S = 2.0


def celery_queue_names() -> list[str]:
    """The default queue, the declared ones and those named by a routing table."""
    conf = celery_app.conf
    names = {conf.task_default_queue}
    names.update(queue.name for queue in conf.task_queues or ())
    routes = conf.task_routes or ()
    for table in [routes] if isinstance(routes, Mapping) else routes:
        if isinstance(table, Mapping):  # a router function's queues cannot be known ahead
            for route in table.values():
                names.add(route if isinstance(route, str) else route.get("queue"))
    return sorted(name for name in names if name)


def celery_queue_lengths(connection, names) -> dict[str, int]:
    """{queue: messages waiting} for each of `names` the broker knows."""
    # RabbitMQ is asked passively: a plain declare would create a missing queue, with arguments
    # that may not be the worker's. Kombu's virtual transports keep an empty queue as nothing at
    # all (no Redis key, no file), so there a plain declare, which creates nothing on the
    # broker, is what answers 0 for it.
    passive = connection.transport.driver_type == "amqp"
    lengths = {}
    for name in names:
        channel = connection.channel()
        try:
            lengths[name] = channel.queue_declare(queue=name, passive=passive).message_count
        except connection.channel_errors:  # NOT_FOUND: no worker has declared it yet
            continue
        finally:
            channel.close()
    return lengths


def _celery_queues():
    connection = celery_app.connection_for_read()
    if connection.transport.driver_type not in QUEUE_LENGTH_TRANSPORTS:
        return
    up = GaugeMetricFamily(
        "loam_celery_broker_up", "1 when the broker answered this scrape (else no queue lengths)."
    )
    queues = GaugeMetricFamily(
        "loam_celery_queue_length", "Messages waiting in each Celery queue.", labels=["queue"]
    )
    try:
        with connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT_S
            )
            lengths = celery_queue_lengths(connection, celery_queue_names())
    except (OperationalError, *connection.connection_errors):  # kombu's, and the transport's
        up.add_metric([], 0)
        yield up
        return
    up.add_metric([], 1)
    for name, length in lengths.items():
        queues.add_metric([name], length)
    yield up
    yield queues


# Seconds; the target is a p95 of 5 s from an order to a running host.
PROVISIONING_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


def _provisioning_durations() -> GaugeHistogramMetricFamily:
    """How long the hosts that came up within the window took, from leaving `pending` (placed,
    job dispatched; an order held for approval waits before this) to `running`: the two
    transitions' audit events. A gauge histogram, since hosts leave the window as it moves."""
    window = timedelta(seconds=settings.METRICS_PROVISIONING_WINDOW_S)
    instance_type = Instance._meta.label_lower
    provisioning_started = AuditEvent.objects.filter(
        action=f"instance.{InstanceState.PROVISIONING}",
        object_type=instance_type,
        object_id=OuterRef("object_id"),
    ).order_by("created_at")
    came_up = (
        AuditEvent.objects.filter(
            action=f"instance.{InstanceState.RUNNING}",
            object_type=instance_type,
            data__from=InstanceState.PROVISIONING,
            created_at__gte=timezone.now() - window,
        )
        .annotate(
            took=ExpressionWrapper(
                F("created_at") - Subquery(provisioning_started.values("created_at")[:1]),
                output_field=DurationField(),
            )
        )
        .filter(took__isnull=False)
    )
    figures = came_up.aggregate(
        count=Count("pk"),
        total=Sum("took"),
        **{
            f"le_{bound}": Count("pk", filter=Q(took__lte=timedelta(seconds=bound)))
            for bound in PROVISIONING_BUCKETS
        },
    )
    buckets = [(str(float(bound)), figures[f"le_{bound}"]) for bound in PROVISIONING_BUCKETS]
    buckets.append(("+Inf", figures["count"]))
    total = figures["total"] or timedelta(0)
    return GaugeHistogramMetricFamily(
        "loam_provisioning_duration_seconds",
        f"Seconds from provisioning to running of the hosts that came up in the last "
        f"{settings.METRICS_PROVISIONING_WINDOW_S} s.",
        buckets=buckets,
        gsum_value=total.total_seconds(),
    )
