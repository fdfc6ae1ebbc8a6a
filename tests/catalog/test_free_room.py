"""Free room in the catalog: counted in a fixed number of queries however many nodes the park
has, and, in every park's catalog (a visitor's), read from the cache for at most
FREE_ROOM_CACHED_FOR seconds, which the page states; a tenant's catalog counts it now."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.catalog import selectors
from apps.catalog.selectors import FREE_ROOM_CACHED_FOR, free_room
from apps.orchestration.services import register_node
from tests.factories import (
    AllocationFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def sold(park):
    """One 1-card flavor on sale in one region, and the pool its hosts run in."""
    region = RegionFactory(park=park)
    pool = PoolFactory(backend__park=park, backend__driver="simulator", region=region)
    family = FlavorFamilyFactory(park=park, accelerator_model=pool.accelerator_model)
    flavor = FlavorFactory(family=family, accelerator_count=1, vcpu=1, ram_gb=1)
    PriceFactory(region=region, flavor=flavor)
    return pool, flavor


def add_nodes(pool, n, start=0):
    return [
        register_node(pool=pool, hostname=f"node-{i}", accelerators=2, vcpu=64, ram_gb=256)
        for i in range(start, start + n)
    ]


def free_hosts(client, flavor, **headers) -> int:
    response = client.get("/catalog/", **headers)
    assert response.status_code == 200
    (card,) = [c for c in response.context["cards"] if c.flavor == flavor]
    return card.available_now


def test_free_room_takes_the_same_queries_for_3_nodes_as_for_60(park, sold):
    pool, _flavor = sold
    add_nodes(pool, 3)
    with CaptureQueriesContext(connection) as few:
        rooms = free_room(park).by_model
    assert sum(r.accelerators for r in rooms[pool.accelerator_model_id]) == 6

    add_nodes(pool, 57, start=3)
    AllocationFactory(node=pool.nodes.first(), vcpu=4, ram_gb=16)
    with CaptureQueriesContext(connection) as many:
        rooms = free_room(park).by_model
    assert len(many) == len(few)
    assert len(rooms[pool.accelerator_model_id]) == 60
    held = [r for r in rooms[pool.accelerator_model_id] if r.vcpu == 60]
    assert [(r.ram_gb, r.accelerators) for r in held] == [(240, 2)]


def test_a_visitor_reads_free_room_from_the_cache_and_is_told_when_it_was_counted(
    client, park, sold
):
    pool, flavor = sold
    (node,) = add_nodes(pool, 1)
    assert free_hosts(client, flavor) == 2

    allocation = AllocationFactory(node=node, instance__flavor=flavor, vcpu=1, ram_gb=1)
    node.accelerators.filter(index=0).update(allocation=allocation)

    with CaptureQueriesContext(connection) as cached:
        response = client.get("/catalog/")
    assert response.context["cards"][0].available_now == 2  # as counted a moment ago
    assert response.context["room"].cached_for == FREE_ROOM_CACHED_FOR
    assert "counted again every 30 seconds" in response.content.decode()
    assert not any("orchestration_accelerator" in q["sql"] for q in cached.captured_queries)


def test_a_visitor_counts_again_once_the_cached_count_expires(client, park, sold, monkeypatch):
    pool, flavor = sold
    (node,) = add_nodes(pool, 1)
    monkeypatch.setattr(selectors, "FREE_ROOM_CACHED_FOR", 0)  # expired as soon as stored
    assert free_hosts(client, flavor) == 2

    allocation = AllocationFactory(node=node, instance__flavor=flavor, vcpu=1, ram_gb=1)
    node.accelerators.filter(index=0).update(allocation=allocation)

    assert free_hosts(client, flavor) == 1


def test_a_tenants_catalog_counts_free_room_now(client, park, sold, owner):
    pool, flavor = sold
    (node,) = add_nodes(pool, 1)
    client.force_login(owner)
    assert free_hosts(client, flavor) == 2

    allocation = AllocationFactory(node=node, instance__flavor=flavor, vcpu=1, ram_gb=1)
    node.accelerators.filter(index=0).update(allocation=allocation)

    response = client.get("/catalog/")
    assert response.context["cards"][0].available_now == 1
    assert 'id="free-room-age"' not in response.content.decode()
