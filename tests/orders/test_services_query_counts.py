"""How many queries a quote and an order take does not grow with the park: not with its nodes
(scored in a fixed number of reads), nor with the organization's quota limits (usage counted
once, whatever the number of limits)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.orchestration.services import plan_placement
from apps.orders.services import quote, submit_create
from apps.quotas.models import QuotaResource
from apps.tenants.models import Organization
from tests.factories import PoolFactory, RegionFactory

pytestmark = pytest.mark.django_db


def grow_park(world, *, regions: int, pools_per_region: int, nodes_per_pool: int) -> None:
    """More priced regions, each with pools of nodes of the world's accelerator model."""
    first = world.park.regions.count()
    for r in range(first, first + regions):
        region = RegionFactory(park=world.park, code=f"grown-{r}", name=f"Grown {r}")
        world.price_flavors(region)
        for p in range(pools_per_region):
            pool = PoolFactory(
                backend=world.backend,
                region=region,
                accelerator_model=world.model,
                name=f"grown-{r}-{p}",
            )
            for n in range(nodes_per_pool):
                world.add_node(f"grown-{r}-{p}-{n}", pool=pool, accelerators=4)


def queries_of(call) -> int:
    with CaptureQueriesContext(connection) as captured:
        call()
    return len(captured.captured_queries)


def organization_of(world):
    """As the API has it: with its park loaded."""
    return Organization.objects.select_related("park").get(pk=world.organization.pk)


def quote_queries(world) -> int:
    request, organization = world.request(1, region=None), organization_of(world)
    return queries_of(lambda: quote(organization=organization, request=request))


def order_queries(world, owner, capture, *, name: str) -> int:
    request, organization = world.request(1, region=None, name=name), organization_of(world)

    def order():
        with capture(execute=False):
            submit_create(organization=organization, actor=owner, request=request)

    return queries_of(order)


def test_a_quote_without_a_region_takes_as_many_queries_at_12_as_at_100_nodes(world):
    grow_park(world, regions=1, pools_per_region=2, nodes_per_pool=5)  # 2 + 10 nodes
    at_12 = quote_queries(world)
    grow_park(world, regions=4, pools_per_region=2, nodes_per_pool=11)  # + 88 nodes
    assert quote_queries(world) == at_12


def test_an_order_takes_as_many_queries_with_more_nodes_and_limits(
    world, owner, django_capture_on_commit_callbacks
):
    first = order_queries(world, owner, django_capture_on_commit_callbacks, name="first")
    grow_park(world, regions=3, pools_per_region=2, nodes_per_pool=8)
    for resource, limit in (
        (QuotaResource.VCPU, 10_000),
        (QuotaResource.RAM_GB, 100_000),
        (QuotaResource.DISK_GB, 100_000),
        (QuotaResource.COMPUTE_UNITS, 1_000),
    ):
        world.set_limit(resource, limit)
    world.set_limit(QuotaResource.MODEL_ACCELERATORS, 100, model=world.model)
    second = order_queries(world, owner, django_capture_on_commit_callbacks, name="second")
    assert second == first


def test_an_order_sets_no_savepoint_of_its_own_steps_and_writes_its_events_at_once(
    world, owner, django_capture_on_commit_callbacks
):
    """Its steps (state moves, webhook events, meters) join its transaction; its four audit
    events are one INSERT; the host it has just created is not read back, nor are its meters
    (it has none yet); its prices and webhook endpoints are read once."""
    request, organization = world.request(1, region=None), organization_of(world)
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks(execute=False),
    ):
        submit_create(organization=organization, actor=owner, request=request)
    statements = [query["sql"] for query in captured.captured_queries]
    # One savepoint: the order's own transaction, nested in the test's.
    assert sum(sql.startswith("SAVEPOINT") for sql in statements) == 1
    assert sum(sql.startswith('INSERT INTO "operations_auditevent"') for sql in statements) == 1
    assert not any(sql.startswith('SELECT "orders_instance"') for sql in statements)
    assert not any(sql.startswith('SELECT "billing_meter"') for sql in statements)
    # Its prices are read once, for the scoring and the quote; so are its webhook endpoints.
    assert sum('FROM "catalog_price"' in sql for sql in statements) == 1
    assert sum('FROM "webhooks_webhookendpoint"' in sql for sql in statements) == 1


@pytest.mark.postgres
def test_an_order_writes_its_rows_in_few_statements(
    world, owner, django_capture_on_commit_callbacks
):
    """On PostgreSQL what the organizations' rows hold is one read; the host's workload,
    instance and order one INSERT; its hold with the wallet's figure one statement; its
    allocation with its cards, the node's room and the placement one; its moves one UPDATE."""
    world.set_limit(QuotaResource.ACCELERATORS, 100)  # so that what is held is counted
    request, organization = world.request(1, region=None), organization_of(world)
    with (
        CaptureQueriesContext(connection) as captured,
        django_capture_on_commit_callbacks(execute=False),
    ):
        submit_create(organization=organization, actor=owner, request=request)
    statements = [query["sql"] for query in captured.captured_queries]

    def count(*parts):
        return sum(all(part in sql for part in parts) for sql in statements)

    assert count("json_agg", "orders_instance", "orders_task", "storage_volume") == 1
    assert count('INSERT INTO "orders_instance"') == 1
    assert count('INSERT INTO "orders_instance"', "workloads_workload", "orders_order") == 1
    assert count('INSERT INTO "billing_hold"', "UPDATE billing_wallet") == 1
    assert count('INSERT INTO "orchestration_allocation"') == 1
    assert (
        count(
            'INSERT INTO "orchestration_allocation"',
            "orchestration_placement",
            "UPDATE orchestration_accelerator",
            "UPDATE orchestration_node",
        )
        == 1
    )
    assert count('UPDATE "orders_order"') == count('UPDATE "orders_instance"') == 1
    assert count('UPDATE "orders_order"', 'UPDATE "orders_instance"') == 1


def test_placing_on_pools_no_server_joins_reads_no_servers_nor_saved_images(world):
    """Only an agent pool's nodes are servers that hold images of their own (and get copies of
    saved ones): scoring the simulator's nodes for an image asks the agents app nothing."""
    with CaptureQueriesContext(connection) as captured:
        plan = plan_placement(park=world.park, flavor=world.flavors[1], image_code=world.image.code)
    assert plan.ranked
    statements = [query["sql"] for query in captured.captured_queries]
    assert not any("agents_" in sql for sql in statements), statements
