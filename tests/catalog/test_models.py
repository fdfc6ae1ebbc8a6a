"""The catalog tables refuse bad rows themselves: no form or full_clean() runs here."""

from decimal import Decimal

import pytest

from apps.catalog.models import (
    AcceleratorModel,
    Flavor,
    FlavorFamily,
    Image,
    Price,
    PriceKind,
    Region,
    RegionLevel,
)
from tests.factories import (
    EPOCH,
    AcceleratorModelFactory,
    EdgeRegionFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    PriceFactory,
    ProvinceRegionFactory,
    RegionFactory,
    refused,
)

pytestmark = pytest.mark.django_db


class TestRegion:
    def test_center_without_parent_saves(self):
        region = RegionFactory()
        saved = Region.objects.get(pk=region.pk)
        assert saved.level == RegionLevel.CENTER
        assert saved.parent is None

    def test_province_and_edge_hang_under_the_same_park(self):
        edge = EdgeRegionFactory()
        assert edge.parent.level == RegionLevel.PROVINCE
        assert edge.parent.parent.level == RegionLevel.CENTER
        assert edge.park == edge.parent.park == edge.parent.parent.park

    def test_duplicate_code_in_park_refused(self):
        region = RegionFactory()
        with refused("region_code_unique"):
            RegionFactory(park=region.park, code=region.code)

    def test_same_code_in_another_park_accepted(self):
        RegionFactory(code="east")
        RegionFactory(code="east")
        assert Region.objects.filter(code="east").count() == 2

    def test_unknown_level_refused(self):
        with refused("region_level_known"):
            RegionFactory(level="planet")

    @pytest.mark.parametrize("level", [RegionLevel.PROVINCE, RegionLevel.EDGE])
    def test_non_center_without_parent_refused(self, level):
        with refused("region_non_center_has_parent"):
            RegionFactory(level=level, parent=None)

    def test_center_demoted_without_parent_refused(self):
        region = RegionFactory()
        with refused("region_non_center_has_parent"):
            Region.objects.filter(pk=region.pk).update(level=RegionLevel.PROVINCE)
        region.refresh_from_db()
        assert region.level == RegionLevel.CENTER

    def test_detaching_a_province_refused(self):
        province = ProvinceRegionFactory()
        with refused("region_non_center_has_parent"):
            Region.objects.filter(pk=province.pk).update(parent=None)

    def test_own_parent_refused(self):
        province = ProvinceRegionFactory()
        with refused("region_not_its_own_parent"):
            Region.objects.filter(pk=province.pk).update(parent=province)
        province.refresh_from_db()
        assert province.parent_id != province.pk

    def test_own_parent_refused_for_center_too(self):
        center = RegionFactory()
        with refused("region_not_its_own_parent"):
            Region.objects.filter(pk=center.pk).update(parent=center)


class TestAcceleratorModel:
    def test_valid_row_saves_with_derived_compute_units(self):
        model = AcceleratorModelFactory(fp16_tflops=Decimal("989.5"))
        assert AcceleratorModel.objects.get(pk=model.pk).compute_units == Decimal("9.895")

    def test_duplicate_vendor_and_name_refused(self):
        model = AcceleratorModelFactory()
        with refused("accelerator_model_unique"):
            AcceleratorModelFactory(vendor=model.vendor, name=model.name)

    def test_same_name_of_another_vendor_accepted(self):
        AcceleratorModelFactory(name="X1", vendor="nvidia")
        AcceleratorModelFactory(name="X1", vendor="hygon", software_stack="dtk")
        assert AcceleratorModel.objects.filter(name="X1").count() == 2

    def test_duplicate_slug_refused(self):
        model = AcceleratorModelFactory()
        with refused("catalog_acceleratormodel.slug"):
            AcceleratorModelFactory(slug=model.slug)

    def test_unknown_vendor_refused(self):
        with refused("accel_vendor_known"):
            AcceleratorModelFactory(vendor="intel")

    def test_unknown_stack_refused(self):
        with refused("accel_stack_known"):
            AcceleratorModelFactory(software_stack="rocm")

    @pytest.mark.parametrize("tflops", [Decimal("0"), Decimal("-1.0")])
    def test_tflops_not_positive_refused(self, tflops):
        # compute_units given explicitly so only the TFLOPS check can fail.
        with refused("accel_tflops_positive"):
            AcceleratorModelFactory(fp16_tflops=tflops, compute_units=Decimal("1"))

    def test_zero_memory_refused(self):
        with refused("accel_memory_positive"):
            AcceleratorModelFactory(memory_gb=0)

    def test_zero_tdp_refused(self):
        with refused("accel_tdp_positive"):
            AcceleratorModelFactory(tdp_w=0)

    def test_zero_compute_units_refused(self):
        with refused("accel_units_positive"):
            AcceleratorModelFactory(compute_units=Decimal("0"))

    def test_compute_units_zeroed_by_update_refused(self):
        model = AcceleratorModelFactory()
        with refused("accel_units_positive"):
            AcceleratorModel.objects.filter(pk=model.pk).update(compute_units=0)


class TestFlavorFamily:
    def test_valid_row_saves(self):
        family = FlavorFamilyFactory(resource_type="bare_metal")
        assert FlavorFamily.objects.get(pk=family.pk).resource_type == "bare_metal"

    def test_duplicate_code_in_park_refused(self):
        family = FlavorFamilyFactory()
        with refused("flavor_family_code_unique"):
            FlavorFamilyFactory(park=family.park, code=family.code)

    def test_unknown_resource_type_refused(self):
        with refused("flavor_family_resource_type_known"):
            FlavorFamilyFactory(resource_type="vm")


class TestFlavor:
    def test_valid_row_saves(self):
        flavor = FlavorFactory(accelerator_count=8, system_disk_gb=20)
        saved = Flavor.objects.get(pk=flavor.pk)
        assert (saved.accelerator_count, saved.system_disk_gb) == (8, 20)

    def test_several_sizes_in_one_family_accepted(self):
        family = FlavorFamilyFactory()
        for count in (1, 2, 4, 8):
            FlavorFactory(family=family, accelerator_count=count)
        assert family.flavors.count() == 4

    def test_duplicate_code_in_family_refused(self):
        flavor = FlavorFactory()
        with refused("flavor_code_unique"):
            FlavorFactory(family=flavor.family, code=flavor.code)

    def test_duplicate_size_in_family_refused(self):
        flavor = FlavorFactory(accelerator_count=4)
        with refused("flavor_size_unique_in_family"):
            FlavorFactory(family=flavor.family, accelerator_count=4)

    def test_same_size_in_another_family_accepted(self):
        FlavorFactory(accelerator_count=4)
        FlavorFactory(accelerator_count=4)
        assert Flavor.objects.filter(accelerator_count=4).count() == 2

    def test_zero_accelerators_refused(self):
        with refused("flavor_accels_gt_0"):
            FlavorFactory(accelerator_count=0, vcpu=8, ram_gb=64)

    def test_zero_vcpu_refused(self):
        with refused("flavor_vcpu_positive"):
            FlavorFactory(vcpu=0)

    def test_zero_ram_refused(self):
        with refused("flavor_ram_positive"):
            FlavorFactory(ram_gb=0)

    def test_system_disk_below_minimum_refused(self):
        with refused("flavor_system_disk_min"):
            FlavorFactory(system_disk_gb=19)


class TestImage:
    def test_valid_row_saves_with_compatible_models(self):
        model = AcceleratorModelFactory()
        image = ImageFactory(compatible_accelerators=[model])
        assert list(Image.objects.get(pk=image.pk).compatible_accelerators.all()) == [model]

    def test_duplicate_code_in_park_refused(self):
        image = ImageFactory()
        with refused("image_code_unique"):
            ImageFactory(park=image.park, code=image.code)

    def test_unknown_stack_refused(self):
        with refused("image_stack_known"):
            ImageFactory(software_stack="opencl")


class TestPrice:
    def test_flavor_price_saves(self):
        price = PriceFactory()
        saved = Price.objects.get(pk=price.pk)
        assert saved.kind == PriceKind.FLAVOR_HOUR
        assert saved.flavor.family.park == saved.region.park

    def test_resource_prices_save_without_flavor(self):
        disk = PriceFactory(disk=True)
        bandwidth = PriceFactory(bandwidth=True, region=disk.region)
        assert Price.objects.filter(region=disk.region, flavor__isnull=True).count() == 2
        assert bandwidth.kind == PriceKind.BANDWIDTH_MBPS_MONTH

    def test_free_price_accepted(self):
        price = PriceFactory(amount_minor=0)
        assert Price.objects.get(pk=price.pk).amount_minor == 0

    def test_negative_price_refused(self):
        with refused("price_not_negative"):
            PriceFactory(amount_minor=-1)

    def test_price_made_negative_by_update_refused(self):
        price = PriceFactory()
        with refused("price_not_negative"):
            Price.objects.filter(pk=price.pk).update(amount_minor=-100)
        price.refresh_from_db()
        assert price.amount_minor == 2500

    def test_unknown_kind_refused(self):
        with refused("price_kind_known"):
            PriceFactory(kind="gpu_minute", flavor=None)

    def test_unknown_currency_refused(self):
        with refused("price_currency_known"):
            PriceFactory(currency="EUR")

    def test_flavor_hour_without_flavor_refused(self):
        with refused("price_flavor_iff_flavor_kind"):
            PriceFactory(kind=PriceKind.FLAVOR_HOUR, flavor=None)

    @pytest.mark.parametrize("kind", [PriceKind.DISK_GB_MONTH, PriceKind.BANDWIDTH_MBPS_MONTH])
    def test_resource_price_with_flavor_refused(self, kind):
        with refused("price_flavor_iff_flavor_kind"):
            PriceFactory(kind=kind)

    def test_duplicate_flavor_price_at_same_start_refused(self):
        price = PriceFactory()
        with refused("price_flavor_unique_per_start"):
            PriceFactory(
                region=price.region, flavor=price.flavor, effective_from=price.effective_from
            )

    def test_flavor_price_at_a_later_start_accepted(self):
        price = PriceFactory(effective_from=EPOCH)
        PriceFactory(region=price.region, flavor=price.flavor, amount_minor=2000)
        assert Price.objects.filter(flavor=price.flavor).count() == 2

    def test_duplicate_resource_price_at_same_start_refused(self):
        price = PriceFactory(disk=True)
        with refused("price_resource_unique_per_start"):
            PriceFactory(disk=True, region=price.region, effective_from=price.effective_from)

    def test_other_resource_at_same_start_accepted(self):
        price = PriceFactory(disk=True)
        PriceFactory(bandwidth=True, region=price.region, effective_from=price.effective_from)
        assert Price.objects.filter(region=price.region).count() == 2
