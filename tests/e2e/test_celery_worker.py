"""A real Celery worker (not eager mode) against the configured broker takes an order to
running: the on-commit dispatch, the broker, the task and the state reports all for real."""

import time

import pytest
from celery.contrib.testing.worker import start_worker

from apps.orders.models import Instance, InstanceState, OrderState
from apps.orders.services import submit_create
from portal.celery import app
from tests.e2e.queues import empty_queue
from tests.worlds import sellable_world

# A queue of its own, emptied first: the worker takes this test's jobs only, not what other
# runs on the same broker left in the default queue.
QUEUE = "loam-test-real-worker"


@pytest.fixture
def worker(monkeypatch):
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    monkeypatch.setitem(app.conf, "task_default_queue", QUEUE)
    empty_queue(QUEUE)
    # The worker stops after the job in hand; a slow machine may be inside a backend call.
    with start_worker(
        app, pool="solo", queues=[QUEUE], perform_ping_check=False, shutdown_timeout=30
    ):
        yield


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_takes_an_order_to_running(worker):
    world = sellable_world(accelerators=2, backend_config={"latency_seconds": [0.2, 0.5]})
    [order] = submit_create(
        organization=world.organization, actor=world.owner, request=world.request
    )
    deadline = time.monotonic() + 30
    instance = Instance.objects.get(pk=order.instance_id)
    while instance.state != InstanceState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
        instance.refresh_from_db()
    assert instance.state == InstanceState.RUNNING, instance.error_message
    assert instance.access["address"] and instance.backend_handle.startswith("sim-")
    order.refresh_from_db()
    assert order.state == OrderState.DONE
