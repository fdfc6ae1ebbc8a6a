from datetime import timedelta

import pytest
from django.utils import timezone

from apps.catalog.models import PriceKind
from apps.catalog.selectors import (
    CatalogFilters,
    catalog_flavors,
    catalog_summary,
    current_flavor_prices,
    prices_by_region,
    region_prices_in_force,
)
from apps.orchestration.models import NodeHealth
from apps.orchestration.services import register_node
from tests.factories import (
    AllocationFactory,
    EdgeRegionFactory,
    FlavorFactory,
    InstanceFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)

pytestmark = pytest.mark.django_db


def test_current_price_is_the_latest_that_is_in_force():
    flavor = FlavorFactory()
    region = RegionFactory(park=flavor.family.park)
    now = timezone.now()
    PriceFactory(
        flavor=flavor, region=region, amount_minor=100, effective_from=now - timedelta(days=9)
    )
    PriceFactory(
        flavor=flavor, region=region, amount_minor=120, effective_from=now - timedelta(days=1)
    )
    PriceFactory(
        flavor=flavor, region=region, amount_minor=999, effective_from=now + timedelta(days=1)
    )
    [price] = current_flavor_prices()[flavor.pk]
    assert price.amount_minor == 120


def test_prices_by_region_are_each_region_s_prices_in_force_in_one_query(
    django_assert_num_queries,
):
    flavor = FlavorFactory()
    park = flavor.family.park
    north, south, unpriced = (RegionFactory(park=park) for _ in range(3))
    now = timezone.now()
    for amount, days in ((100, -9), (120, -1), (999, 1)):  # the latest started, not the future
        PriceFactory(
            flavor=flavor, region=north, amount_minor=amount, effective_from=now + timedelta(days)
        )
    PriceFactory(flavor=flavor, region=south, amount_minor=300)
    PriceFactory(flavor=FlavorFactory(family=flavor.family, code="other"), region=south)
    PriceFactory(region=south, disk=True, amount_minor=31)
    PriceFactory(region=north, bandwidth=True, amount_minor=7)
    with django_assert_num_queries(1):
        prices = prices_by_region(region_ids=[north.pk, south.pk, unpriced.pk], flavor=flavor)

    def amounts(region):
        return {kind: p and p.amount_minor for kind, p in prices[region.pk].items()}

    assert amounts(north) == {
        PriceKind.FLAVOR_HOUR: 120,
        PriceKind.DISK_GB_MONTH: None,
        PriceKind.BANDWIDTH_MBPS_MONTH: 7,
    }
    assert amounts(south) == {
        PriceKind.FLAVOR_HOUR: 300,
        PriceKind.DISK_GB_MONTH: 31,
        PriceKind.BANDWIDTH_MBPS_MONTH: None,
    }
    assert set(amounts(unpriced).values()) == {None}
    assert region_prices_in_force(region=south, flavor=flavor) == prices[south.pk]


def sold(flavor, pool, amount=1000):
    """Price `flavor` in the pool's region: capacity counts where a flavor is sold."""
    PriceFactory(flavor=flavor, region=pool.region, amount_minor=amount)


def test_available_hosts_count_what_fits_on_one_node():
    """Two nodes with 3 free cards each hold no 4-card host, though 6 cards are free."""
    four = FlavorFactory(accelerator_count=4, vcpu=8, ram_gb=32)
    one = FlavorFactory(family=four.family, accelerator_count=1, code="one", vcpu=8, ram_gb=32)
    pool = PoolFactory(accelerator_model=four.family.accelerator_model)
    sold(four, pool)
    sold(one, pool)
    for name in ("a", "b"):
        register_node(pool=pool, hostname=name, accelerators=3, vcpu=64, ram_gb=512)
    cards = {card.flavor.pk: card for card in catalog_flavors()}
    assert cards[four.pk].available_now == 0
    assert cards[one.pk].available_now == 6


def test_allocated_drained_and_unhealthy_capacity_is_not_free():
    flavor = FlavorFactory(accelerator_count=1, vcpu=8, ram_gb=32)
    pool = PoolFactory(accelerator_model=flavor.family.accelerator_model)
    sold(flavor, pool)
    busy = register_node(pool=pool, hostname="busy", accelerators=2, vcpu=64, ram_gb=512)
    drained = register_node(pool=pool, hostname="drained", accelerators=2, vcpu=64, ram_gb=512)
    down = register_node(pool=pool, hostname="down", accelerators=2, vcpu=64, ram_gb=512)
    drained.is_drained = True
    drained.save()
    down.health = NodeHealth.DOWN
    down.save()
    instance = InstanceFactory()
    allocation = AllocationFactory(node=busy, instance=instance)
    busy.accelerators.filter(index=0).update(allocation=allocation)
    [card] = [c for c in catalog_flavors() if c.flavor.pk == flavor.pk]
    assert card.available_now == 1
    [row] = [r for r in catalog_summary() if r["model"].pk == flavor.family.accelerator_model_id]
    assert (row["free"], row["total"]) == (1, 6)


def test_filters_by_vendor_and_domestic():
    nvidia = FlavorFactory(family__accelerator_model__vendor="nvidia")
    ascend = FlavorFactory(
        family__accelerator_model__vendor="huawei", family__accelerator_model__domestic=True
    )
    assert [c.flavor for c in catalog_flavors(CatalogFilters(vendor="huawei"))] == [ascend]
    assert [c.flavor for c in catalog_flavors(CatalogFilters(domestic_only=True))] == [ascend]
    assert {c.flavor for c in catalog_flavors()} == {nvidia, ascend}


def test_filters_by_shape():
    small = FlavorFactory(
        accelerator_count=1, vcpu=8, ram_gb=64, family__accelerator_model__memory_gb=48
    )
    big = FlavorFactory(
        accelerator_count=8, vcpu=96, ram_gb=768, family__accelerator_model__memory_gb=141
    )
    assert flavors(CatalogFilters(accelerator_count=8)) == [big]
    assert flavors(CatalogFilters(min_vcpu=16)) == [big]
    assert flavors(CatalogFilters(min_ram_gb=100)) == [big]
    assert flavors(CatalogFilters(min_accelerator_memory_gb=64)) == [big]
    assert flavors(CatalogFilters(accelerator_model=small.family.accelerator_model)) == [small]


def test_filters_by_region_level_price_and_availability():
    center_pool = PoolFactory()
    edge = EdgeRegionFactory(park=center_pool.region.park)
    cheap = FlavorFactory(
        family__park=center_pool.region.park, accelerator_count=1, vcpu=8, ram_gb=32
    )
    dear = FlavorFactory(family__park=center_pool.region.park, vcpu=8, ram_gb=32)
    PriceFactory(flavor=cheap, region=center_pool.region, amount_minor=500)
    PriceFactory(flavor=dear, region=edge, amount_minor=5000)
    pool = PoolFactory(accelerator_model=cheap.family.accelerator_model, region=center_pool.region)
    register_node(pool=pool, hostname="n", accelerators=2, vcpu=64, ram_gb=512)
    assert flavors(CatalogFilters(region=edge)) == [dear]
    assert flavors(CatalogFilters(region_level="edge")) == [dear]
    assert flavors(CatalogFilters(min_hourly_minor=1000)) == [dear]
    assert flavors(CatalogFilters(max_hourly_minor=1000)) == [cheap]
    assert flavors(CatalogFilters(available_only=True)) == [cheap]


def test_sorts():
    slow = FlavorFactory(accelerator_count=1, family__accelerator_model__fp16_tflops=100)
    fast = FlavorFactory(accelerator_count=1, family__accelerator_model__fp16_tflops=1000)
    region = RegionFactory(park=slow.family.park)
    PriceFactory(flavor=slow, region=region, amount_minor=500)  # 5.0 per TFLOPS·h
    PriceFactory(flavor=fast, region=region, amount_minor=2000)  # 2.0 per TFLOPS·h
    assert flavors(CatalogFilters(sort="price")) == [slow, fast]
    assert flavors(CatalogFilters(sort="price_per_tflops")) == [fast, slow]
    assert flavors(CatalogFilters(sort="performance")) == [fast, slow]


def flavors(filters):
    return [card.flavor for card in catalog_flavors(filters)]


def test_inactive_flavors_are_not_listed():
    FlavorFactory(is_active=False)
    assert catalog_flavors() == []
