"""A partner's floor price holds wherever the park prices a flavor that runs on its pools:
the price list (catalog.services.schedule_price) and a proposed catalog accepted."""

import pytest
from django.core.exceptions import ValidationError

from apps.catalog import services as catalog
from apps.catalog.models import Flavor, PriceKind
from tests.factories import FlavorFactory, ParkOperatorFactory, UserFactory
from tests.partners.factories import PoolTermsFactory

pytestmark = pytest.mark.django_db


def test_schedule_price_keeps_the_partners_floor():
    pool = PoolTermsFactory(floor_price_minor_per_card_hour=1000).pool
    operator = UserFactory()
    ParkOperatorFactory(park=pool.backend.park, user=operator)
    flavor = FlavorFactory(
        family__park=pool.backend.park,
        family__accelerator_model=pool.accelerator_model,
        accelerator_count=2,
    )
    with pytest.raises(ValidationError):
        catalog.schedule_price(
            region=pool.region,
            operator=operator,
            kind=PriceKind.FLAVOR_HOUR,
            flavor=flavor,
            amount_minor=1999,
        )
    catalog.schedule_price(
        region=pool.region,
        operator=operator,
        kind=PriceKind.FLAVOR_HOUR,
        flavor=flavor,
        amount_minor=2000,
    )


def test_a_proposed_catalog_keeps_the_partners_floor_and_writes_nothing_below_it():
    pool = PoolTermsFactory(floor_price_minor_per_card_hour=1000).pool
    park = pool.backend.park
    operator = UserFactory()
    ParkOperatorFactory(park=park, user=operator)

    def accept(hourly_minor: int):
        return catalog.accept_catalog_proposal(
            park=park,
            operator=operator,
            region=pool.region,
            accelerator_model=pool.accelerator_model,
            family_code="partner",
            family_name="Partner",
            room=catalog.ServerRoom(accelerators=2, vcpu=8, ram_gb=32),
            flavors=[
                catalog.FlavorToSell(
                    code="partner.2x",
                    accelerator_count=2,
                    vcpu=4,
                    ram_gb=16,
                    system_disk_gb=100,
                    hourly_minor=hourly_minor,
                )
            ],
            images=[],
        )

    with pytest.raises(ValidationError) as refused:
        accept(1999)
    assert list(refused.value.message_dict) == ["flavor-0-price"]
    assert not Flavor.objects.filter(code="partner.2x").exists()
    assert accept(2000).prices[0].amount_minor == 2000
