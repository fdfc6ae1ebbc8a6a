"""The catalog's comparison table (/catalog/?view=table), its new sorts (per card, per compute
unit, memory per card), the resource types offered as filters (only those on sale) and which
query parameters count as filters."""

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.catalog.forms import CatalogFilterForm
from apps.catalog.models import ResourceType
from apps.catalog.selectors import CatalogFilters, catalog_flavors, resource_types_on_sale
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ParkFactory,
    PriceFactory,
    RegionFactory,
)

pytestmark = pytest.mark.django_db

TABLE = "catalog/partials/_flavor_table.html"


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def shelf(park):
    """Four flavors whose sorts all differ (fen an hour; compute units = TFLOPS / 100):

    code  cards  memory  price  per card  per compute unit
    a1    1      80 GB   2000   2000      2000 / 9.895  ≈ 202
    b2    2      141 GB  5000   2500      5000 / 19.79  ≈ 253
    c4    4      64 GB   6000   1500      6000 / 12.8   ≈ 469
    d1    1      40 GB   —      —         —  (not priced: last in every price sort)
    """
    region = RegionFactory(park=park)
    fast = AcceleratorModelFactory(memory_gb=80, fp16_tflops=Decimal("989.5"))
    big = AcceleratorModelFactory(memory_gb=141, fp16_tflops=Decimal("989.5"))
    domestic = AcceleratorModelFactory(ascend=True, memory_gb=64, fp16_tflops=Decimal("320.0"))
    small = AcceleratorModelFactory(memory_gb=40, fp16_tflops=Decimal("312.0"))
    for code, model, count, price in [
        ("a1", fast, 1, 2000),
        ("b2", big, 2, 5000),
        ("c4", domestic, 4, 6000),
        ("d1", small, 1, None),
    ]:
        family = FlavorFamilyFactory(park=park, accelerator_model=model, code=f"fam-{code}")
        flavor = FlavorFactory(family=family, code=code, accelerator_count=count)
        if price is not None:
            PriceFactory(region=region, flavor=flavor, amount_minor=price)
    return park


def get(client, **params):
    response = client.get(reverse("catalog:flavor_list"), params)
    assert response.status_code == 200
    return response


def template_names(response) -> list[str]:
    return [template.name for template in response.templates]


def table_codes(response) -> list[str]:
    return re.findall(r'<tr class="flavor-row" data-flavor="([^"]+)"', response.content.decode())


def row(response, code) -> str:
    found = re.search(rf'data-flavor="{code}">(.*?)</tr>', response.content.decode(), re.S)
    assert found, response.content.decode()
    return found.group(1)


def cell(row_html: str, css: str) -> str:
    return re.search(rf'class="text-end num {css}">(.*?)</td>', row_html, re.S).group(1).strip()


# --- The table --------------------------------------------------------------------------------


@pytest.mark.usefixtures("shelf")
def test_the_table_view_renders_the_table_partial(client):
    response = get(client, view="table")

    assert TABLE in template_names(response)
    html = response.content.decode()
    assert 'id="flavor-table"' in html and 'class="card h-100 shadow-sm flavor-card"' not in html
    assert sorted(table_codes(response)) == ["a1", "b2", "c4", "d1"]


@pytest.mark.usefixtures("shelf")
def test_the_cards_stay_the_default_view(client):
    response = get(client)

    assert TABLE not in template_names(response)
    assert 'id="flavor-table"' not in response.content.decode()


@pytest.mark.usefixtures("shelf")
def test_the_htmx_list_brings_the_table_too(client):
    response = client.get(reverse("catalog:flavor_list"), {"view": "table"}, HTTP_HX_REQUEST="true")

    assert "catalog/partials/_flavor_list.html" in template_names(response)
    assert TABLE in template_names(response)
    assert "<html" not in response.content.decode()


@pytest.mark.usefixtures("shelf")
def test_a_row_shows_the_price_per_card_and_per_compute_unit(client):
    response = get(client, view="table")

    b2 = row(response, "b2")
    assert cell(b2, "price-hourly") == "¥50.00"
    assert cell(b2, "price-per-card") == "¥25.00"
    assert cell(b2, "price-per-unit") == "¥2.53"  # 5000 / 19.79 fen
    d1 = row(response, "d1")
    assert "No price set" in d1 and cell(d1, "price-per-card") == "—"


# --- The new sorts ----------------------------------------------------------------------------


@pytest.mark.usefixtures("shelf")
@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("price_per_accelerator", ["c4", "a1", "b2", "d1"]),
        ("price_per_compute_unit", ["a1", "b2", "c4", "d1"]),
        ("accelerator_memory", ["b2", "a1", "c4", "d1"]),
        ("price", ["a1", "b2", "c4", "d1"]),
    ],
)
def test_the_table_follows_the_sort(client, sort, expected):
    assert table_codes(get(client, view="table", sort=sort)) == expected


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("price_per_accelerator", ["c4", "a1", "b2", "d1"]),
        ("price_per_compute_unit", ["a1", "b2", "c4", "d1"]),
        ("accelerator_memory", ["b2", "a1", "c4", "d1"]),
    ],
)
def test_the_selector_sorts_the_same_way(shelf, sort, expected):
    cards = catalog_flavors(CatalogFilters(sort=sort, park=shelf))

    assert [card.flavor.code for card in cards] == expected


@pytest.mark.usefixtures("shelf")
@pytest.mark.parametrize(
    ("sort", "direction"),
    [("price_per_accelerator", "ascending"), ("accelerator_memory", "descending")],
)
def test_the_sorted_column_says_which_way_it_sorts(client, sort, direction):
    html = get(client, view="table", sort=sort).content.decode()

    sorted_headers = re.findall(r'<th[^>]*aria-sort="([^"]+)"[^>]*>\s*<a[^>]*sort=(\w+)', html)
    assert sorted_headers == [(direction, sort)]


# --- Resource types offered -------------------------------------------------------------------


def offered_types(response) -> list[str]:
    select = re.search(
        r'<select name="resource_type"[^>]*>(.*?)</select>', response.content.decode(), re.S
    )
    assert select, response.content.decode()
    return [value for value in re.findall(r'<option value="([^"]*)"', select.group(1)) if value]


def family_of(park, resource_type, *, active=True):
    family = FlavorFamilyFactory(park=park, resource_type=resource_type)
    FlavorFactory(family=family, is_active=active)
    return family


def test_only_types_with_a_flavor_on_sale_are_offered(client, park):
    family_of(park, ResourceType.CLOUD_HOST)
    family_of(park, ResourceType.CONTAINER)
    family_of(park, ResourceType.BARE_METAL, active=False)  # withdrawn from sale

    assert resource_types_on_sale(park) == ["cloud_host", "container"]
    assert offered_types(get(client)) == ["cloud_host", "container"]


def test_a_member_is_offered_the_types_of_their_park_a_visitor_those_of_every_park(
    client, park, member
):
    family_of(park, ResourceType.CLOUD_HOST)
    family_of(ParkFactory(), ResourceType.BARE_METAL)

    assert offered_types(get(client)) == ["cloud_host", "bare_metal"]
    client.force_login(member)
    assert offered_types(get(client)) == ["cloud_host"]


def test_a_type_not_on_sale_is_not_a_valid_filter(park):
    family_of(park, ResourceType.CLOUD_HOST)

    form = CatalogFilterForm({"resource_type": ResourceType.TRAINING_TASK}, park=park)

    assert not form.is_valid() and "resource_type" in form.errors
    assert form.filters().resource_type == ""  # the invalid filter filters nothing


# --- has_filters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [{}, {"sort": "price_per_compute_unit"}, {"view": "table"}, {"sort": "", "vendor": ""}],
)
def test_sorting_and_the_view_are_not_filters(park, params):
    assert not CatalogFilterForm(params, park=park).has_filters


@pytest.mark.parametrize("params", [{"min_vcpu": "8"}, {"view": "table", "domestic": "on"}])
def test_a_value_in_any_other_field_is_a_filter(park, params):
    assert CatalogFilterForm(params, park=park).has_filters


@pytest.mark.usefixtures("shelf")
def test_the_filters_badge_stays_off_for_a_sorted_table(client):
    badge = '<span class="badge text-bg-primary">on</span>'

    assert badge not in get(client, view="table", sort="accelerator_memory").content.decode()
    assert badge in get(client, view="table", domestic="on").content.decode()
