"""Vendors by their Chinese names in zh-hans (英伟达, 华为昇腾, 海光, 寒武纪), wherever a family
or a card names its vendor; their brands stay as written in English (issue 35)."""

import pytest
from django.urls import reverse
from django.utils import translation

from apps.catalog.models import Vendor
from tests.factories import AcceleratorModelFactory, FlavorFactory, FlavorFamilyFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("vendor", "model_name", "chinese"),
    [
        (Vendor.NVIDIA, "H200 SXM", "英伟达 H200 SXM"),
        (Vendor.HUAWEI, "Ascend 910B", "华为昇腾 Ascend 910B"),
        (Vendor.HYGON, "DCU K100-AI", "海光 DCU K100-AI"),
        (Vendor.CAMBRICON, "MLU370-X8", "寒武纪 MLU370-X8"),
    ],
)
def test_a_family_named_by_its_brand_reads_the_vendors_chinese_name(vendor, model_name, chinese):
    model = AcceleratorModelFactory(vendor=vendor, name=model_name)
    name = f"{model.vendor_name} {model_name} · x"
    family = FlavorFamilyFactory(accelerator_model=model, name=name)
    with translation.override("zh-hans"):
        assert family.display_name == f"{chinese} · x"
        assert str(model) == chinese
    with translation.override("en"):
        assert family.display_name == family.name


def test_a_family_with_a_name_of_its_own_keeps_it():
    family = FlavorFamilyFactory(name="推理专用 · 通用型")
    with translation.override("zh-hans"):
        assert family.display_name == "推理专用 · 通用型"


def test_the_flavor_page_names_the_vendor_in_chinese(client):
    model = AcceleratorModelFactory(vendor=Vendor.NVIDIA, name="H200 SXM")
    family = FlavorFamilyFactory(accelerator_model=model, name="NVIDIA H200 SXM · h200")
    flavor = FlavorFactory(family=family, code="h200.1x")
    html = client.get(
        reverse("catalog:flavor_detail", args=[flavor.code]), HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).content.decode()
    assert "英伟达 H200 SXM · h200" in html
    assert "NVIDIA H200" not in html
