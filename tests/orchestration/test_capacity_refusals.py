"""A host refused for want of room names the resource that is short: the cards, the vCPU or
the RAM, from why the scheduler rejected each node (place, region_of), or from the node's
own free capacity (allocate_again, resize_capacity)."""

import pytest
from django.db import transaction

from apps.orchestration.reservations import release
from apps.orchestration.services import (
    NoCapacity,
    allocate_again,
    plan_placement,
    region_of,
    resize_capacity,
)
from apps.orders.models import Instance
from tests.orchestration.test_services_placement import add_node, new_instance, put, shape

pytestmark = pytest.mark.django_db


CARDS = "free NVIDIA H100 accelerators"


@pytest.mark.parametrize(
    ("node_size", "short", "not_named"),
    [
        ({"vcpu": 8}, "No host has 16 free vCPU right now.", (CARDS, "RAM")),
        ({"ram_gb": 64}, "No host has 128 GB of free RAM right now.", (CARDS, "vCPU")),
        ({"accelerators": 2}, f"No host has 4 {CARDS} right now.", ("vCPU", "RAM")),
    ],
    ids=["vcpu", "ram", "cards"],
)
def test_a_refused_host_names_the_resource_no_node_has(grid, node_size, short, not_named):
    add_node(grid.pool, "n1", **node_size)  # 8 cards, 128 vCPU, 1024 GB but what is given

    with pytest.raises(NoCapacity) as excinfo:
        put(grid, 4, vcpu=16, ram_gb=128)

    assert excinfo.value.message.startswith(short)
    for resource in not_named:
        assert resource not in excinfo.value.message


def test_nodes_short_of_different_resources_are_all_named(grid):
    add_node(grid.pool, "few-cards", accelerators=2)
    add_node(grid.pool, "few-vcpu", vcpu=8)

    with pytest.raises(NoCapacity) as excinfo:
        put(grid, 4, vcpu=16, ram_gb=128)

    assert excinfo.value.message.startswith(f"No host has 4 {CARDS} and 16 free vCPU right now.")


def test_no_region_names_the_short_resource_when_the_scheduler_chooses(grid):
    add_node(grid.pool, "n1", vcpu=8)
    flavor = new_instance(grid).flavor

    plan = plan_placement(park=grid.park, flavor=flavor, shape=shape(grid, 1, vcpu=16))

    with pytest.raises(NoCapacity) as excinfo:
        region_of(plan, flavor)
    assert excinfo.value.message == (
        f"No region has a host with 16 free vCPU for {flavor.code} right now. Try a smaller "
        "flavor or later."
    )


def test_a_start_refused_on_its_node_names_the_vcpu_it_lacks(grid):
    node = add_node(grid.pool, "n1", vcpu=32)
    allocation = put(grid, 1, vcpu=16)
    instance = allocation.workload.instance
    Instance.objects.filter(pk=instance.pk).update(node=node)
    instance.refresh_from_db()
    with transaction.atomic():
        release(instance)  # stopped: its vCPU go back to the node
    put(grid, 1, vcpu=24)  # and to other work; 7 cards stay free

    with pytest.raises(NoCapacity) as excinfo, transaction.atomic():
        allocate_again(instance, shape(grid, 1, vcpu=16))

    assert "it needs 16 free vCPU and 8 are free" in excinfo.value.message
    assert "accelerators" not in excinfo.value.message


def test_a_resize_refused_on_its_node_names_the_ram_it_lacks(grid):
    add_node(grid.pool, "n1", ram_gb=512)
    allocation = put(grid, 2, ram_gb=256)
    put(grid, 1, ram_gb=128)

    with pytest.raises(NoCapacity) as excinfo, transaction.atomic():
        resize_capacity(allocation.workload.instance, shape(grid, 4, vcpu=16, ram_gb=512))

    assert excinfo.value.message == (
        "The host n1 does not have room to grow this instance to 4 accelerators, 16 vCPU and "
        "512 GB of RAM: it needs 256 GB of free RAM and 128 GB are free. Release capacity, or "
        "create a new instance of the larger size."
    )
