"""The catalog endpoints: regions, accelerator models, flavors (with the catalog page's filters),
images and prices of the caller's park; another park's objects are not found."""

import pytest

from apps.catalog.models import PriceKind
from tests.api.conftest import assert_problem, bearer, results
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    ProvinceRegionFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(world, other_family, elsewhere):
    """The world's park sells g1.{1,2,4,8}x and g2.2x in `center` and a Huawei bare-metal
    bm1-8x in the province `east`; `elsewhere` sells a1-1x. Cards come vendor first."""
    province = ProvinceRegionFactory(park=world.park, code="east", parent=world.region)
    ascend = AcceleratorModelFactory(ascend=True, slug="ascend-x")
    family = FlavorFamilyFactory(
        park=world.park, accelerator_model=ascend, code="bm1", resource_type="bare_metal"
    )
    domestic = FlavorFactory(family=family, code="bm1-8x", accelerator_count=8)
    from tests.factories import PriceFactory

    PriceFactory(region=province, flavor=domestic, amount_minor=5000)
    cann = ImageFactory(
        park=world.park, code="euler-cann", software_stack="cann", compatible_accelerators=[ascend]
    )
    return {"province": province, "ascend": ascend, "domestic": domestic, "cann": cann}


# --- Regions ---------------------------------------------------------------------------------


def test_regions_of_the_park(api, catalog, world):
    rows = results(api.get("/api/v1/regions/"), 2)
    assert rows == [
        {"code": "center", "name": "Center", "level": "center", "parent": None, "latency_ms": 0},
        {
            "code": "east",
            "name": catalog["province"].name,
            "level": "province",
            "parent": "center",
            "latency_ms": catalog["province"].latency_ms,
        },
    ]
    one = api.get("/api/v1/regions/east/")
    assert one.status_code == 200
    assert one.json()["parent"] == "center"


def test_another_parks_region_is_404(api, catalog, elsewhere):
    assert_problem(api.get(f"/api/v1/regions/{elsewhere.region.code}/"), 404, "not_found")
    codes = {row["code"] for row in results(api.get("/api/v1/regions/"))}
    assert elsewhere.region.code not in codes


# --- Accelerator models ----------------------------------------------------------------------


def test_accelerator_models(api, catalog, world):
    rows = results(api.get("/api/v1/accelerator-models/"))
    slugs = {row["slug"] for row in rows}
    assert {world.model.slug, "ascend-x"} <= slugs
    one = api.get(f"/api/v1/accelerator-models/{world.model.slug}/")
    assert one.status_code == 200
    body = one.json()
    assert body["vendor"] == "nvidia"
    assert body["software_stack"] == "cuda"
    assert body["compute_units"] == "3.120"
    assert body["domestic"] is False
    assert_problem(api.get("/api/v1/accelerator-models/no-such-gpu/"), 404, "not_found")


# --- Flavors ---------------------------------------------------------------------------------


def codes_of(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [card["flavor"]["code"] for card in response.json()]


def test_flavors_are_the_parks_catalog_cards(api, catalog, elsewhere):
    elsewhere_code = elsewhere.flavor.code
    response = api.get("/api/v1/flavors/")
    assert codes_of(response) == ["bm1-8x", "g1.1x", "g1.2x", "g1.4x", "g1.8x", "g2.2x"]
    cards = {card["flavor"]["code"]: card for card in response.json()}
    one = cards["g1.2x"]
    assert one["cheapest_hourly_minor"] == 2000
    assert one["currency"] == "CNY"
    assert one["available_now"] == 8  # two free nodes of eight accelerators, two each
    assert one["flavor"] == {
        "code": "g1.2x",
        "family": "g1",
        "resource_type": "cloud_host",
        "accelerator_model": one["flavor"]["accelerator_model"],
        "accelerator_count": 2,
        "vcpu": 32,
        "ram_gb": 256,
        "system_disk_gb": 100,
        "compute_units": "6.240",
    }
    assert cards["bm1-8x"]["available_now"] == 0  # no pool of that model
    assert elsewhere_code not in cards


def test_each_park_gets_its_own_kept_list_of_flavors(api, client, catalog, elsewhere, make_key):
    """The list is kept per park (and filters): another park's organization, asking between
    two reads of this one, gets its own park's flavors, and this one still its own."""
    ours = codes_of(api.get("/api/v1/flavors/"))
    theirs = make_key("read", org=elsewhere.organization, actor=elsewhere.owner)

    response = client.get("/api/v1/flavors/", **bearer(theirs))
    assert codes_of(response) == [elsewhere.flavor.code]
    assert response.json()[0]["cheapest_hourly_minor"] == 777
    assert codes_of(api.get("/api/v1/flavors/")) == ours
    assert codes_of(api.get("/api/v1/flavors/", {"accelerator_count": "8"})) == ["bm1-8x", "g1.8x"]
    assert codes_of(api.get("/api/v1/flavors/")) == ours


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"accelerator_count": "2"}, ["g1.2x", "g2.2x"]),
        ({"resource_type": "bare_metal"}, ["bm1-8x"]),
        ({"vendor": "huawei"}, ["bm1-8x"]),
        ({"domestic": "true"}, ["bm1-8x"]),
        ({"region_level": "province"}, ["bm1-8x"]),
        ({"min_vcpu": "64"}, ["bm1-8x", "g1.4x", "g1.8x"]),
        ({"min_ram_gb": "1024"}, ["bm1-8x", "g1.8x"]),
        ({"max_price": "20"}, ["g1.1x", "g1.2x"]),
        ({"min_price": "40", "max_price": "50"}, ["bm1-8x", "g1.4x"]),
        ({"available": "true", "accelerator_count": "8"}, ["g1.8x"]),
        ({"sort": "price", "accelerator_count": "2"}, ["g1.2x", "g2.2x"]),
    ],
)
def test_flavor_filters(api, catalog, query, expected):
    assert codes_of(api.get("/api/v1/flavors/", query)) == expected


def test_flavor_filter_by_region_and_model(api, catalog, world):
    assert codes_of(api.get("/api/v1/flavors/", {"region": catalog["province"].pk})) == ["bm1-8x"]
    by_model = api.get("/api/v1/flavors/", {"accelerator_model": world.model.pk})
    assert codes_of(by_model) == ["g1.1x", "g1.2x", "g1.4x", "g1.8x", "g2.2x"]
    # The filter offers only models with pools; another is an invalid filter, ignored.
    unpooled = api.get("/api/v1/flavors/", {"accelerator_model": catalog["ascend"].pk})
    assert len(codes_of(unpooled)) == 6


def test_sort_by_price_puts_the_cheapest_first(api, catalog):
    codes = codes_of(api.get("/api/v1/flavors/", {"sort": "price"}))
    assert codes[:2] == ["g1.1x", "g1.2x"]
    assert codes.index("g2.2x") > codes.index("g1.2x")


def test_an_invalid_filter_is_ignored(api, catalog):
    everything = codes_of(api.get("/api/v1/flavors/"))
    assert codes_of(api.get("/api/v1/flavors/", {"accelerator_count": "3"})) == everything
    assert codes_of(api.get("/api/v1/flavors/", {"vendor": "acme"})) == everything


def test_another_parks_region_as_filter_is_ignored(api, catalog, elsewhere):
    everything = codes_of(api.get("/api/v1/flavors/"))
    assert codes_of(api.get("/api/v1/flavors/", {"region": elsewhere.region.pk})) == everything


def test_flavor_detail_by_code(api, catalog):
    response = api.get("/api/v1/flavors/bm1-8x/")
    assert response.status_code == 200
    body = response.json()
    assert body["code"] == "bm1-8x"
    assert body["resource_type"] == "bare_metal"
    assert body["accelerator_model"] == "ascend-x"


def test_flavor_detail_by_a_dotted_code(api, catalog):
    response = api.get("/api/v1/flavors/g1.4x/")
    assert response.status_code == 200
    body = response.json()
    assert body["code"] == "g1.4x"
    assert body["accelerator_count"] == 4
    assert body["family"] == "g1"


def test_another_parks_flavor_is_404(api, catalog, elsewhere):
    assert_problem(api.get(f"/api/v1/flavors/{elsewhere.flavor.code}/"), 404, "not_found")


def test_an_inactive_flavor_is_404(api, catalog):
    catalog["domestic"].is_active = False
    catalog["domestic"].save(update_fields=["is_active"])
    assert_problem(api.get("/api/v1/flavors/bm1-8x/"), 404, "not_found")
    assert "bm1-8x" not in codes_of(api.get("/api/v1/flavors/"))


# --- Images ----------------------------------------------------------------------------------


def test_images_of_the_park(api, catalog, world):
    rows = results(api.get("/api/v1/images/"), 2)
    by_code = {row["code"]: row for row in rows}
    assert set(by_code) == {"ubuntu-cuda", "euler-cann"}
    assert by_code["ubuntu-cuda"]["compatible_accelerators"] == [world.model.slug]
    assert by_code["euler-cann"]["software_stack"] == "cann"


@pytest.mark.parametrize(("stack", "codes"), [("cuda", {"ubuntu-cuda"}), ("cann", {"euler-cann"})])
def test_images_by_software_stack(api, catalog, stack, codes):
    rows = results(api.get("/api/v1/images/", {"software_stack": stack}))
    assert {row["code"] for row in rows} == codes


def test_image_detail_and_another_parks_image(api, catalog, elsewhere):
    response = api.get("/api/v1/images/euler-cann/")
    assert response.status_code == 200
    assert response.json()["compatible_accelerators"] == ["ascend-x"]
    assert_problem(api.get(f"/api/v1/images/{elsewhere.image.code}/"), 404, "not_found")


# --- Prices ----------------------------------------------------------------------------------


def test_prices_of_the_park(api, catalog, elsewhere):
    rows = results(api.get("/api/v1/prices/"))
    assert len(rows) == 4 + 1 + 2 + 1  # g1 flavors, g2.2x, disk and bandwidth, bm1-8x
    assert all(row["region"] in {"center", "east"} for row in rows)
    assert elsewhere.price.amount_minor not in {row["amount_minor"] for row in rows}


def test_prices_by_kind(api, catalog):
    disk = results(api.get("/api/v1/prices/", {"kind": PriceKind.DISK_GB_MONTH}), 1)
    assert disk[0]["amount_minor"] == 36
    assert disk[0]["flavor"] is None
    bandwidth = results(api.get("/api/v1/prices/", {"kind": PriceKind.BANDWIDTH_MBPS_MONTH}), 1)
    assert bandwidth[0]["amount_minor"] == 720
    flavors = results(api.get("/api/v1/prices/", {"kind": PriceKind.FLAVOR_HOUR}), 6)
    assert {row["flavor"] for row in flavors} == {
        "g1.1x",
        "g1.2x",
        "g1.4x",
        "g1.8x",
        "g2.2x",
        "bm1-8x",
    }


def test_another_parks_price_is_404(api, catalog, elsewhere):
    assert_problem(api.get(f"/api/v1/prices/{elsewhere.price.pk}/"), 404, "not_found")


# --- Credentials -----------------------------------------------------------------------------

CATALOG_PATHS = [
    "/api/v1/regions/",
    "/api/v1/accelerator-models/",
    "/api/v1/flavors/",
    "/api/v1/images/",
    "/api/v1/prices/",
]


@pytest.mark.parametrize("path", CATALOG_PATHS)
def test_a_read_key_reads_the_catalog(client, catalog, read_key, path):
    assert client.get(path, **bearer(read_key)).status_code == 200


def test_a_read_key_gets_details(client, catalog, read_key):
    for path in (
        "/api/v1/regions/center/",
        "/api/v1/flavors/bm1-8x/",
        "/api/v1/images/ubuntu-cuda/",
    ):
        assert client.get(path, **bearer(read_key)).status_code == 200, path


@pytest.mark.parametrize("path", [*CATALOG_PATHS, "/api/v1/flavors/bm1-8x/"])
def test_no_credentials_is_401(client, catalog, path):
    response = client.get(path)
    assert_problem(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_viewer_session_reads_the_catalog(client, catalog, viewer):
    client.force_login(viewer)
    assert codes_of(client.get("/api/v1/flavors/", {"accelerator_count": "1"})) == ["g1.1x"]


def test_the_catalog_is_read_only(api, catalog):
    assert_problem(api.post("/api/v1/regions/", {"code": "x"}), 405, "method_not_allowed")
    assert_problem(api.post("/api/v1/flavors/", {}), 405, "method_not_allowed")
