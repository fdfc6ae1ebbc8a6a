from datetime import timedelta

import pytest
from django.utils import timezone

from apps.catalog.models import PriceKind
from apps.catalog.selectors import catalog_flavors, catalog_summary, current_flavor_prices
from apps.orchestration.models import NodeHealth
from apps.orchestration.services import register_node
from tests.factories import (
    AllocationFactory,
    FlavorFactory,
    InstanceFactory,
    NodeFactory,
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


def test_available_hosts_count_what_fits_on_one_node():
    """Two nodes with 3 free cards each hold no 4-card host, though 6 cards are free."""
    four = FlavorFactory(accelerator_count=4)
    one = FlavorFactory(family=four.family, accelerator_count=1, code="one")
    pool = PoolFactory(accelerator_model=four.family.accelerator_model)
    for name in ("a", "b"):
        register_node(pool=pool, hostname=name, accelerators=3, vcpu=64, ram_gb=512)
    cards = {card.flavor.pk: card for card in catalog_flavors()}
    assert cards[four.pk].available_now == 0
    assert cards[one.pk].available_now == 6


def test_allocated_drained_and_unhealthy_capacity_is_not_free():
    flavor = FlavorFactory(accelerator_count=1)
    pool = PoolFactory(accelerator_model=flavor.family.accelerator_model)
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
    assert [c.flavor for c in catalog_flavors(vendor="huawei")] == [ascend]
    assert [c.flavor for c in catalog_flavors(domestic_only=True)] == [ascend]
    assert {c.flavor for c in catalog_flavors()} == {nvidia, ascend}


def test_inactive_flavors_are_not_listed():
    FlavorFactory(is_active=False)
    assert catalog_flavors() == []


def test_per_second_price_is_the_hourly_price_over_3600():
    flavor = FlavorFactory()
    PriceFactory(flavor=flavor, kind=PriceKind.FLAVOR_HOUR, amount_minor=3600)
    NodeFactory(pool__accelerator_model=flavor.family.accelerator_model)
    [card] = catalog_flavors()
    assert card.cheapest_per_second_minor == 1
