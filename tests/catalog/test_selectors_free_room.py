"""Free room in the catalog: counted in a fixed number of queries however many nodes the park
has, kept in the cache for every catalog (a visitor's, a tenant's, the API's), and counted again
as soon as an allocation is made, resized or released or a node is drained: no reader sees the
count from before a change once it is committed."""

import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.catalog.selectors import FREE_ROOM, free_room, free_room_changed
from apps.orchestration.reservations import release
from apps.orchestration.services import (
    Shape,
    drain_node,
    place,
    register_node,
    resize_capacity,
    shape_of,
    undrain_node,
)
from apps.tenants.services import create_api_key
from tests.factories import (
    AllocationFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    InstanceFactory,
    OrderFactory,
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
    """The hosts of `flavor` free now, as the catalog page shows them on its card."""
    response = client.get("/catalog/", **headers)
    assert response.status_code == 200
    (free,) = re.findall(
        rf'data-flavor="{re.escape(flavor.code)}".*?class="col-6 free-now">(\d+)',
        response.content.decode(),
        flags=re.S,
    )
    return int(free)


def test_free_room_takes_the_same_queries_for_3_nodes_as_for_60(park, sold):
    pool, _flavor = sold
    add_nodes(pool, 3)
    with CaptureQueriesContext(connection) as few:
        rooms = free_room(park)
    assert sum(r.accelerators * r.nodes for r in rooms[pool.accelerator_model_id]) == 6

    add_nodes(pool, 57, start=3)
    AllocationFactory(node=pool.nodes.first(), vcpu=4, ram_gb=16)
    free_room_changed()  # the factory wrote the allocation past the services
    with CaptureQueriesContext(connection) as many:
        rooms = free_room(park)
    assert len(many) == len(few)
    # Alike nodes are counted together: 59 untouched, and the one holding 4 vCPU and 16 GB.
    assert sorted(
        (r.vcpu, r.ram_gb, r.accelerators, r.nodes) for r in rooms[pool.accelerator_model_id]
    ) == [
        (60, 240, 2, 1),
        (64, 256, 2, 59),
    ]


def test_a_second_read_takes_free_room_from_the_cache(client, park, sold):
    pool, flavor = sold
    add_nodes(pool, 1)
    assert free_hosts(client, flavor) == 2

    with CaptureQueriesContext(connection) as cached:
        assert free_hosts(client, flavor) == 2
    counted = ("orchestration_node", "orchestration_accelerator", "orchestration_allocation")
    assert not any(table in q["sql"] for q in cached.captured_queries for table in counted)


@pytest.fixture
def place_host(organization, sold):
    """place_host() -> a host of the sold flavor placed through orchestration's services."""
    _pool, flavor = sold

    def place_one():
        instance = InstanceFactory(organization=organization, flavor=flavor)
        OrderFactory(organization=organization, instance=instance)
        place(instance=instance, shape=shape_of(flavor))
        return instance

    return place_one


@pytest.fixture(params=["visitor", "tenant", "api"])
def free_hosts_seen(request, client, owner, organization, sold):
    """free_hosts_seen() -> the hosts of the sold flavor free now, as a visitor's catalog page,
    the tenant's, or the API's flavor list says."""
    _pool, flavor = sold
    if request.param == "tenant":
        client.force_login(owner)
    if request.param != "api":
        return lambda: free_hosts(client, flavor)
    _key, secret = create_api_key(organization=organization, actor=owner, name="r", scope="read")

    def by_api():
        response = client.get("/api/v1/flavors/", HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert response.status_code == 200, response.content
        (card,) = [c for c in response.json() if c["flavor"]["code"] == flavor.code]
        return card["available_now"]

    return by_api


def test_a_placement_and_a_release_show_at_once(
    sold, place_host, free_hosts_seen, django_capture_on_commit_callbacks
):
    pool, _flavor = sold
    add_nodes(pool, 1)
    assert free_hosts_seen() == 2
    assert free_hosts_seen() == 2  # from the cache

    with django_capture_on_commit_callbacks(execute=True):
        instance = place_host()
    assert free_hosts_seen() == 1

    with django_capture_on_commit_callbacks(execute=True):
        release(instance)
    assert free_hosts_seen() == 2


@pytest.mark.django_db(transaction=True)
def test_committed_placements_and_releases_show_at_once(client, sold, place_host):
    """Real commits, whose on-commit work runs as in production."""
    pool, flavor = sold
    add_nodes(pool, 1)
    assert free_hosts(client, flavor) == 2

    with transaction.atomic():
        instance = place_host()
    assert free_hosts(client, flavor) == 1

    with transaction.atomic():
        release(instance)
    assert free_hosts(client, flavor) == 2


def test_a_resize_shows_at_once(client, park, sold, place_host):
    pool, flavor = sold
    add_nodes(pool, 1)
    instance = place_host()
    assert free_hosts(client, flavor) == 1

    shape = Shape(accelerator_model_id=pool.accelerator_model_id, accelerators=2, vcpu=2, ram_gb=2)
    resize_capacity(instance, shape)
    assert free_hosts(client, flavor) == 0


def test_a_drained_node_leaves_the_count_at_once(client, park, sold, operator):
    pool, flavor = sold
    node, _other = add_nodes(pool, 2)
    assert free_hosts(client, flavor) == 4

    drain_node(node=node, operator=operator)
    assert free_hosts(client, flavor) == 2
    undrain_node(node=node, operator=operator)
    assert free_hosts(client, flavor) == 4


def test_a_count_read_before_the_commit_is_not_kept_after_it(
    park, sold, place_host, monkeypatch, django_capture_on_commit_callbacks
):
    """Another connection reading while the placement's transaction is open counts without it
    and caches what it counted; the commit moves the cache past that count."""
    pool, flavor = sold
    add_nodes(pool, 1)
    before = free_room(park)
    model = pool.accelerator_model_id

    with django_capture_on_commit_callbacks(execute=True):
        place_host()
        # A reader that cannot see the uncommitted allocation yet, counting meanwhile.
        monkeypatch.setattr(FREE_ROOM, "one", lambda: lambda _park: before)
        assert free_room(park)[model][0].accelerators == 2
        monkeypatch.undo()

    assert [r.accelerators for r in free_room(park)[model]] == [1]


def test_each_catalog_takes_the_same_queries_for_1_node_as_for_40(sold, free_hosts_seen):
    pool, _flavor = sold
    assert free_hosts_seen() == 0  # the first read of a key or a session may write to them
    add_nodes(pool, 1)
    with CaptureQueriesContext(connection) as few:
        assert free_hosts_seen() == 2
    add_nodes(pool, 39, start=1)
    with CaptureQueriesContext(connection) as many:
        assert free_hosts_seen() == 80
    assert len(many) == len(few)
