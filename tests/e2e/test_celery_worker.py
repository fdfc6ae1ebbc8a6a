"""A real Celery worker (not eager mode) against the configured broker takes an order to
running: the on-commit dispatch, the broker, the task and the state reports all for real."""

import time

import pytest
from celery.contrib.testing.worker import start_worker

from apps.orders.models import Instance, InstanceState, OrderState
from apps.orders.services import submit_create
from portal.celery import app
from tests.worlds import sellable_world


@pytest.fixture
def worker(monkeypatch):
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
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
