"""A real Celery worker (not eager mode) against the configured broker takes an order to
running: the on-commit dispatch, the broker, the task and the state reports all for real."""

import time

import pytest
from celery.contrib.testing.worker import start_worker

from apps.orchestration.services import register_node
from apps.orders.models import Instance, InstanceState, OrderState
from apps.orders.services import HostRequest, submit_create
from portal.celery import app
from tests.factories import (
    BackendFactory,
    FlavorFactory,
    ImageFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
    UserFactory,
)

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0bbMkVQzCQ0yt4WzQp2jr0+Ir3ZXD9gDQsG2dLR5N ci@loam"


@pytest.fixture
def worker(monkeypatch):
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_takes_an_order_to_running(worker):
    organization = OrganizationFactory(verification_state="verified")
    owner = UserFactory()
    MembershipFactory(organization=organization, user=owner, role="owner")
    park = organization.park
    region = RegionFactory(park=park)
    flavor = FlavorFactory(family__park=park, accelerator_count=2, vcpu=8, ram_gb=32)
    image = ImageFactory(park=park)
    image.compatible_accelerators.add(flavor.family.accelerator_model)
    PriceFactory(flavor=flavor, region=region, amount_minor=1000)
    pool = PoolFactory(
        backend=BackendFactory(park=park, config={"latency_seconds": [0.2, 0.5]}),
        region=region,
        accelerator_model=flavor.family.accelerator_model,
    )
    register_node(pool=pool, hostname="n1", accelerators=8, vcpu=64, ram_gb=512)

    [order] = submit_create(
        organization=organization,
        actor=owner,
        request=HostRequest(
            flavor=flavor,
            image=image,
            region=region,
            system_disk_gb=100,
            ssh_public_key=SSH_KEY,
            name="worker-test",
        ),
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
