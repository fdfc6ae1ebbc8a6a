"""The catalog pages: /catalog/ with its filters (a filtered list is a link; HTMX swaps only the
list) and /catalog/flavors/<code>/ with the family's sizes, compatible images and prices.

Most tests read the demo park (`seed_demo`): 6 families of 1/2/4/8 accelerators in 4 regions.
Flavor-hour prices there are the list price per card × count × the region level's factor
(center 1.0, province 0.92, edge 1.15), so e.g. l40s.1x is ¥8.28 in Nanjing, ¥10.35 at the edge.
"""

import io
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone
from django.utils.html import escape

from apps.catalog.forms import CatalogFilterForm
from apps.catalog.models import AcceleratorModel, Flavor, Region, ResourceType
from apps.catalog.selectors import CatalogFilters, catalog_flavors
from apps.operations import demo
from apps.orchestration.models import Node
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import organization_usage
from apps.tenants.models import Membership, Park
from tests.factories import (
    AllocationFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    PriceFactory,
    RegionFactory,
)

pytestmark = pytest.mark.django_db

FAMILIES = {
    "h200": "H200 SXM",
    "a100": "A100 SXM 80GB",
    "l40s": "L40S",
    "ascend910b": "Ascend 910B",
    "k100ai": "DCU K100-AI",
    "mlu370x8": "MLU370-X8",
}
SIZES = (1, 2, 4, 8)


def family(*prefixes, sizes=SIZES):
    return {f"{prefix}.{size}x" for prefix in prefixes for size in sizes}


ALL = family(*FAMILIES)


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def demo_park(db, settings):
    # A fast hasher: seeding hashes three demo passwords.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", "--no-life", stdout=io.StringIO())
    return Park.objects.get(slug=demo.PARK["slug"])


def html_of(response) -> str:
    return response.content.decode()


def card_codes(response) -> list[str]:
    """The flavor codes of the cards, in page order."""
    return re.findall(r'data-flavor="([^"]+)"', html_of(response))


def result_count(response) -> int:
    """The number the list's heading states."""
    match = re.search(r'id="result-count">\D*(\d+)', html_of(response))
    assert match, "no result count"
    return int(match.group(1))


def errors_shown(response, field: str) -> list[str]:
    """The form's errors for `field`, each checked to be on the page, with the input marked."""
    errors = response.context["form"].errors.get(field, [])
    html = html_of(response)
    for error in errors:
        assert escape(error) in html, error
    if errors:
        tag = re.search(rf'<(?:input|select)[^>]*name="{field}"[^>]*>', html)
        assert tag and "is-invalid" in tag.group(0), field
    return errors


def catalog(client, **query):
    response = client.get("/catalog/", query)
    assert response.status_code == 200
    return response


# --- The list and its filters ----------------------------------------------------------------


def test_unfiltered_catalog_shows_every_demo_flavor(client, demo_park):
    response = catalog(client)

    codes = card_codes(response)
    assert len(codes) == len(set(codes)) == 24
    assert set(codes) == ALL
    assert result_count(response) == 24
    # The full page: layout, the filter form and the list container.
    html = html_of(response)
    assert "<html" in html
    assert 'id="catalog-filters"' in html
    assert 'id="flavor-list"' in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"vendor": "huawei"}, family("ascend910b")),
        ({"vendor": "nvidia"}, family("h200", "a100", "l40s")),
        ({"vendor": "cambricon"}, family("mlu370x8")),
        ({"accelerator_count": "8"}, family(*FAMILIES, sizes=[8])),
        ({"accelerator_count": "2"}, family(*FAMILIES, sizes=[2])),
        # H200 has 141 GB, A100 80 GB; the rest 64 GB or less.
        ({"min_accelerator_memory_gb": "80"}, family("h200", "a100")),
        ({"min_accelerator_memory_gb": "64"}, family("h200", "a100", "ascend910b", "k100ai")),
        # vCPU per card: h200 24, a100 16, l40s 12, ascend 24, k100ai 16, mlu 12.
        ({"min_vcpu": "128"}, {"h200.8x", "a100.8x", "ascend910b.8x", "k100ai.8x"}),
        (
            {"min_vcpu": "96"},
            {"h200.4x", "h200.8x", "a100.8x", "ascend910b.4x"}
            | {"ascend910b.8x", "k100ai.8x", "l40s.8x", "mlu370x8.8x"},
        ),
        # RAM per card: h200 240, a100 128, l40s 96, ascend 192, k100ai 128, mlu 96.
        ({"min_ram_gb": "900"}, {"h200.4x", "h200.8x", "a100.8x", "ascend910b.8x", "k100ai.8x"}),
        ({"region_level": "center"}, family("h200", "a100")),
        ({"region_level": "edge"}, family("l40s")),
        ({"region_level": "province"}, family("l40s", "ascend910b", "k100ai", "mlu370x8")),
        # Prices are typed in yuan and compared in fen, bounds included.
        ({"max_price": "9.20"}, {"mlu370x8.1x", "l40s.1x", "k100ai.1x"}),
        ({"max_price": "9.19"}, {"mlu370x8.1x", "l40s.1x"}),
        (
            {"min_price": "100"},
            {"ascend910b.8x", "a100.8x", "h200.4x", "h200.8x"},
        ),
        ({"min_price": "110.40", "max_price": "144"}, {"ascend910b.8x", "a100.8x"}),
        ({"domestic": "on"}, family("ascend910b", "k100ai", "mlu370x8")),
        ({"resource_type": "cloud_host"}, ALL),
        ({"vendor": "nvidia", "accelerator_count": "1", "max_price": "20"}, {"l40s.1x", "a100.1x"}),
    ],
    ids=lambda value: (
        "&".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else None
    ),
)
def test_a_filter_narrows_the_cards(client, demo_park, query, expected):
    response = catalog(client, **query)

    assert set(card_codes(response)) == expected
    assert result_count(response) == len(expected)


def test_filter_by_accelerator_model(client, demo_park):
    model = AcceleratorModel.objects.get(name="L40S")

    response = catalog(client, accelerator_model=model.pk)

    assert set(card_codes(response)) == family("l40s")


def test_filter_by_region_shows_that_regions_price(client, demo_park):
    edge = Region.objects.get(park=demo_park, code="js-suzhou-edge")

    response = catalog(client, region=edge.pk)

    assert set(card_codes(response)) == family("l40s")
    html = html_of(response)
    # 900 fen × 1.15 at the edge; the cheaper Nanjing price (¥8.28) is not the one offered here.
    assert "¥10.35" in html
    assert "¥8.28" not in html


def test_without_a_region_a_card_shows_its_cheapest_price(client, demo_park):
    html = html_of(catalog(client, vendor="nvidia", accelerator_count="1"))

    assert "¥8.28" in html  # l40s.1x in Nanjing
    assert "¥10.35" not in html


def test_filter_by_resource_type(client, demo_park):
    h200 = AcceleratorModel.objects.get(name="H200 SXM")
    bare = FlavorFamilyFactory(
        park=demo_park,
        code="bm-h200",
        resource_type=ResourceType.BARE_METAL,
        accelerator_model=h200,
    )
    FlavorFactory(family=bare, code="bm-h200.8x", accelerator_count=8, vcpu=192, ram_gb=2048)

    assert card_codes(catalog(client, resource_type="bare_metal")) == ["bm-h200.8x"]
    assert set(card_codes(catalog(client, resource_type="cloud_host"))) == ALL
    # Nothing of a type is on sale: it is not offered, and asking for it says so.
    response = catalog(client, resource_type="container")
    assert 'value="container"' not in html_of(response)
    assert 'id="filter-errors"' in html_of(response)


def test_available_now_hides_flavors_without_free_capacity(client, demo_park):
    # The operators drain both H200 nodes: nothing of that family fits right now.
    drained = Node.objects.filter(pool__accelerator_model__name="H200 SXM").update(is_drained=True)
    assert drained == 2

    available = set(card_codes(catalog(client, available="on")))
    everything = set(card_codes(catalog(client)))

    assert available == ALL - family("h200")
    assert everything == ALL  # without the filter the drained family is still listed


def test_available_now_counts_what_one_node_still_fits(client, demo_park):
    # Another tenant holds 5 of the 8 cards of the single MLU370 node: a 4-card host no longer
    # fits anywhere, a 2-card one still does.
    node = Node.objects.get(pool__accelerator_model__name="MLU370-X8")
    held = Flavor.objects.get(code="mlu370x8.4x")
    allocation = AllocationFactory(node=node, instance__flavor=held, vcpu=60, ram_gb=480)
    taken = list(node.accelerators.values_list("pk", flat=True)[:5])
    node.accelerators.filter(pk__in=taken).update(allocation=allocation)

    codes = set(card_codes(catalog(client, vendor="cambricon", available="on")))

    assert codes == {"mlu370x8.1x", "mlu370x8.2x"}
    assert set(card_codes(catalog(client, vendor="cambricon"))) == family("mlu370x8")


@pytest.mark.parametrize(
    ("sort", "expected_start"),
    [
        ("price", ["mlu370x8.1x", "l40s.1x", "k100ai.1x", "mlu370x8.2x", "ascend910b.1x"]),
        ("performance", ["h200.8x"]),
    ],
)
def test_sort(client, demo_park, sort, expected_start):
    codes = card_codes(catalog(client, sort=sort))

    assert codes[: len(expected_start)] == expected_start
    assert set(codes) == ALL


def test_sort_by_price_is_ascending_and_by_performance_descending(client, demo_park):
    flavors = {f.code: f for f in Flavor.objects.select_related("family__accelerator_model")}
    prices = {
        # The cheapest price in force of each flavor, as the cards compute it.
        code: min(p.amount_minor for p in flavor.prices.all())
        for code, flavor in flavors.items()
    }

    by_price = card_codes(catalog(client, sort="price"))
    by_performance = card_codes(catalog(client, sort="performance"))

    assert [prices[c] for c in by_price] == sorted(prices[c] for c in by_price)
    tflops = [
        flavors[c].family.accelerator_model.fp16_tflops * flavors[c].accelerator_count
        for c in by_performance
    ]
    assert tflops == sorted(tflops, reverse=True)


def test_sort_by_price_per_tflops(client, demo_park):
    codes = card_codes(catalog(client, sort="price_per_tflops", accelerator_count="1"))

    # Fen per card-hour over dense FP16 TFLOPS: L40S 828/362 ≈ 2.29 (Nanjing), H200 3800/989
    # ≈ 3.84, K100-AI 920/196 ≈ 4.69, Ascend 1380/280 ≈ 4.93, A100 1800/312 ≈ 5.77, MLU370
    # 644/96 ≈ 6.71.
    assert codes == [
        "l40s.1x",
        "h200.1x",
        "k100ai.1x",
        "ascend910b.1x",
        "a100.1x",
        "mlu370x8.1x",
    ]


def test_default_order_is_vendor_family_size(client, demo_park):
    codes = card_codes(catalog(client))

    assert codes[:4] == ["mlu370x8.1x", "mlu370x8.2x", "mlu370x8.4x", "mlu370x8.8x"]
    assert codes[-4:] == ["l40s.1x", "l40s.2x", "l40s.4x", "l40s.8x"]


def test_htmx_request_gets_only_the_list_fragment(client, demo_park):
    response = client.get("/catalog/", {"vendor": "huawei"}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    html = html_of(response)
    assert "<html" not in html
    assert "<nav" not in html
    assert 'id="catalog-filters"' not in html
    assert 'id="result-count"' in html
    assert set(card_codes(response)) == family("ascend910b")


def test_a_filtered_list_is_a_link_the_form_keeps_the_values(client, demo_park):
    html = html_of(catalog(client, vendor="hygon", domestic="on", min_vcpu="32"))

    assert re.search(r'<option value="hygon" selected>', html)
    assert re.search(r'name="domestic"[^>]*checked', html)
    assert re.search(r'name="min_vcpu" value="32"', html)


# --- Invalid filters -------------------------------------------------------------------------


def test_a_price_that_is_not_a_number_shows_the_error(client, demo_park):
    response = catalog(client, min_price="abc")

    assert errors_shown(response, "min_price") == ["Enter a number."]
    assert len(card_codes(response)) == 24  # the list is still there


def test_a_lower_price_above_the_upper_one_shows_the_error(client, demo_park):
    response = catalog(client, min_price="50", max_price="10")

    assert len(errors_shown(response, "max_price")) == 1
    assert len(card_codes(response)) == 24


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"min_vcpu": "-1"}, "min_vcpu"),
        ({"min_ram_gb": "lots"}, "min_ram_gb"),
        ({"min_accelerator_memory_gb": "1.5"}, "min_accelerator_memory_gb"),
        ({"accelerator_count": "3"}, "accelerator_count"),
        ({"vendor": "intel"}, "vendor"),
        ({"resource_type": "quantum"}, "resource_type"),
        ({"region_level": "moon"}, "region_level"),
        ({"region": "999999"}, "region"),
        ({"region": "not-a-pk"}, "region"),
        ({"accelerator_model": "x"}, "accelerator_model"),
        ({"sort": "random"}, "sort"),
        ({"min_price": "0.001"}, "min_price"),
        ({"max_price": "-5"}, "max_price"),
    ],
    ids=lambda v: "&".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else "",
)
def test_other_invalid_filters_are_form_errors_not_500(client, demo_park, query, field):
    response = catalog(client, **query)

    assert len(errors_shown(response, field)) == 1
    assert len(card_codes(response)) == 24


def test_another_parks_region_is_not_a_choice_for_a_tenant(client, demo_park, owner):
    client.force_login(owner)  # an organization of another park
    center = Region.objects.get(park=demo_park, code="sh-center")

    response = catalog(client, region=center.pk)

    assert len(errors_shown(response, "region")) == 1


def test_one_invalid_filter_keeps_the_valid_ones(client, demo_park):
    response = catalog(client, vendor="huawei", min_price="abc")

    assert errors_shown(response, "min_price")
    assert set(card_codes(response)) == family("ascend910b")


def test_htmx_filtering_with_an_invalid_price_says_why(client, demo_park):
    response = client.get(
        "/catalog/", {"min_price": "50", "max_price": "10"}, HTTP_HX_REQUEST="true"
    )

    assert response.status_code == 200
    (error,) = response.context["form"].errors["max_price"]
    assert escape(error) in html_of(response)


# --- Who sees which park ---------------------------------------------------------------------


def test_a_tenant_sees_only_their_parks_flavors(client, demo_park, owner, organization):
    # `owner` belongs to an organization of another park, which sells one flavor.
    region = RegionFactory(park=organization.park)
    PriceFactory(region=region, flavor__code="elsewhere.1x")
    client.force_login(owner)

    assert card_codes(catalog(client)) == ["elsewhere.1x"]

    demo_owner = Membership.objects.get(organization__slug=demo.ENTERPRISE["slug"]).user
    client.force_login(demo_owner)
    assert set(card_codes(catalog(client))) == ALL


def test_a_visitor_sees_every_parks_flavors(client, demo_park, organization):
    region = RegionFactory(park=organization.park)
    PriceFactory(region=region, flavor__code="elsewhere.1x")

    assert set(card_codes(catalog(client))) == ALL | {"elsewhere.1x"}


def card_of(html: str, code: str) -> str:
    start = html.index(f'data-flavor="{code}"')
    return html[start : html.index("</div></div>", start)]


def test_a_card_the_tenants_quota_would_refuse_says_so_instead_of_order_now(client, demo_park):
    """The demo enterprise may hold 60 compute units more than it holds: an h200.8x (8 × 9.89)
    would pass that, an h200.4x would not; the card says it in the words the order would be
    refused with."""
    membership = Membership.objects.select_related("organization").get(
        organization__slug=demo.ENTERPRISE["slug"]
    )
    held = organization_usage(membership.organization).compute_units
    QuotaLimit.objects.filter(organization=membership.organization).delete()
    QuotaLimit.objects.create(
        park=demo_park,
        organization=membership.organization,
        resource=QuotaResource.COMPUTE_UNITS,
        limit=int(held) + 60,
    )
    client.force_login(membership.user)

    html = html_of(catalog(client))

    over, within = card_of(html, "h200.8x"), card_of(html, "h200.4x")
    assert "quota-refusal" in over and "Normalized compute units" in over
    assert "Order now" not in over
    assert "quota-refusal" not in within and "Order now" in within
    table = html_of(catalog(client, view="table"))
    row = table[table.index('data-flavor="h200.8x"') :].split("</tr>")[0]
    assert "Over your quota" in row and "Order now" not in row


def test_a_visitor_sees_no_quota_on_the_cards(client, demo_park):
    assert "quota-refusal" not in html_of(catalog(client))


# --- The flavor page -------------------------------------------------------------------------


def section(html: str, element_id: str) -> str:
    """The markup of the element with this id (up to its closing tag of the same name)."""
    match = re.search(rf'<(\w+)[^>]*id="{element_id}"[^>]*>(.*?)</\1>', html, re.S)
    assert match, element_id
    return match.group(2)


def test_flavor_page_shows_family_images_and_prices(client, demo_park):
    response = client.get("/catalog/flavors/l40s.2x/")

    assert response.status_code == 200
    html = html_of(response)
    family_table = section(html, "family")
    assert re.findall(r">(l40s\.\dx)</a>", family_table) == [
        "l40s.1x",
        "l40s.2x",
        "l40s.4x",
        "l40s.8x",
    ]
    assert 'class="table-success"' in family_table  # the current size is marked
    assert "h200" not in family_table
    images = section(html, "images")
    assert "Ubuntu 22.04 · CUDA 12.4 · PyTorch 2.5" in images
    for other_stack in ("CANN 8.0", "DTK 24.04", "Neuware 3.10"):
        assert other_stack not in images
    prices = section(html, "prices")
    # Both regions with L40S capacity, cheapest first: 2 × 900 × 0.92 and 2 × 900 × 1.15.
    assert prices.index("江苏省节点 · 南京") < prices.index("苏州工业园边缘站")
    assert "¥16.56" in prices and "¥20.70" in prices
    assert "上海算力中心" not in prices
    assert 'href="/instances/new/?flavor=l40s.2x"' in html


@pytest.mark.parametrize(
    ("code", "stack", "not_stacks"),
    [
        ("ascend910b.1x", "openEuler 22.03 · CANN 8.0", ["CUDA 12.4", "DTK", "Neuware"]),
        ("k100ai.8x", "Kylin V10 · DTK 24.04", ["CUDA 12.4", "CANN", "Neuware"]),
        ("mlu370x8.4x", "Ubuntu 20.04 · Neuware 3.x", ["CUDA 12.4", "CANN", "DTK"]),
        ("h200.1x", "Ubuntu 22.04 · CUDA 12.4", ["CANN", "DTK", "Neuware"]),
    ],
)
def test_flavor_page_offers_only_images_of_its_stack(client, demo_park, code, stack, not_stacks):
    images = section(html_of(client.get(f"/catalog/flavors/{code}/")), "images")

    assert stack in images
    for other in not_stacks:
        assert other not in images


def test_flavor_page_leaves_out_inactive_and_other_park_images(client, demo_park, park):
    h200 = AcceleratorModel.objects.get(name="H200 SXM")
    ImageFactory(
        park=demo_park, name="Retired CUDA image", is_active=False, compatible_accelerators=[h200]
    )
    ImageFactory(park=park, name="Other park CUDA image", compatible_accelerators=[h200])

    images = section(html_of(client.get("/catalog/flavors/h200.1x/")), "images")

    assert "Retired CUDA image" not in images
    assert "Other park CUDA image" not in images
    assert "Ubuntu 22.04 · CUDA 12.4" in images


def test_flavor_page_without_images_or_prices_says_so(client, park):
    flavor = FlavorFactory(family__park=park, code="bare.1x")

    html = html_of(client.get(f"/catalog/flavors/{flavor.code}/"))

    assert section(html, "images").count("<li") == 1  # the "none yet" line
    assert "list-group-item text-secondary" in section(html, "images")
    assert "¥" not in section(html, "prices")
    assert section(html, "prices").count("<tr") == 2  # the heading and the "no price" row


def test_unknown_flavor_is_404(client, demo_park):
    assert client.get("/catalog/flavors/no-such-flavor/").status_code == 404


@pytest.mark.parametrize("path", ["/catalog/flavors/%00/", "/catalog/flavors/h200%00.1x/"])
def test_a_nul_in_a_flavor_code_is_404_not_a_database_error(client, demo_park, path):
    # PostgreSQL cannot hold NUL in text: the code never reaches a query.
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("name", ["accelerator_model", "region", "vendor", "sort", "min_vcpu"])
def test_a_nul_in_a_catalog_filter_is_a_bad_request_page(client, demo_park, name):
    """The site's one rule for a NUL in a query (apps.core.nul_input): a 400 page saying so."""
    response = client.get("/catalog/", {name: "1\x00"}, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 400
    assert "null character" in response.content.decode()


def test_inactive_flavor_is_404(client, demo_park):
    Flavor.objects.filter(code="h200.8x").update(is_active=False)

    assert client.get("/catalog/flavors/h200.8x/").status_code == 404
    assert "h200.8x" not in card_codes(catalog(client))
    # The family table of its siblings no longer lists it either.
    assert "h200.8x" not in section(html_of(client.get("/catalog/flavors/h200.1x/")), "family")


def test_another_parks_flavor_is_404_for_a_tenant(client, demo_park, owner):
    client.force_login(owner)  # an organization of another park

    assert client.get("/catalog/flavors/h200.1x/").status_code == 404


def test_a_code_sold_in_two_parks_does_not_break_the_visitors_flavor_page(client, demo_park, park):
    FlavorFactory(family__park=park, code="h200.1x")

    response = client.get("/catalog/flavors/h200.1x/")

    assert response.status_code == 200


# --- The comparison table -------------------------------------------------------------------


def table_codes(response) -> list[str]:
    return re.findall(r'<tr class="flavor-row" data-flavor="([^"]+)"', html_of(response))


def test_the_table_view_lists_every_flavor_with_its_per_card_price(client, demo_park):
    response = catalog(client, view="table")

    assert set(table_codes(response)) == ALL
    assert 'id="flavor-table"' in html_of(response)
    row = re.search(r'data-flavor="h200.2x">(.*?)</tr>', html_of(response), re.S).group(1)
    per_card = re.search(r'class="text-end num price-per-card">(.*?)</td>', row).group(1)
    hourly = re.search(r'class="text-end num price-hourly">(.*?)</td>', row).group(1)
    assert Decimal(hourly.strip("¥").replace(",", "")) == 2 * Decimal(
        per_card.strip("¥").replace(",", "")
    )


@pytest.mark.parametrize(
    ("sort", "key"),
    [
        ("price_per_accelerator", lambda c: c.price_per_accelerator_minor),
        ("price_per_compute_unit", lambda c: c.price_per_compute_unit_minor),
        ("accelerator_memory", lambda c: -c.flavor.family.accelerator_model.memory_gb),
    ],
)
def test_the_new_sorts_order_the_rows(client, demo_park, sort, key):
    cards = {card.flavor.code: card for card in catalog_flavors(CatalogFilters())}

    codes = table_codes(catalog(client, view="table", sort=sort))

    figures = [key(cards[code]) for code in codes]
    assert figures == sorted(figures)


def test_sorting_and_the_view_are_not_filters(demo_park):
    assert not CatalogFilterForm({"sort": "price", "view": "table"}, park=demo_park).has_filters
    assert CatalogFilterForm({"vendor": "nvidia"}, park=demo_park).has_filters


# --- /pricing/: the public price list ----------------------------------------------------------


def test_the_price_list_shows_every_flavor_in_every_region_and_disk_and_bandwidth(
    client, demo_park, django_assert_max_num_queries
):
    with django_assert_max_num_queries(4):  # the session, the user, the prices
        html = html_of(client.get("/pricing/"))

    rows = dict(re.findall(r'<tr data-flavor="([^"]+)">(.*?)</tr>', html, re.S))
    assert set(rows) == ALL
    # l40s.1x: ¥9.00 a card-hour at list price, ×0.92 in the province, ×1.15 at the edge.
    assert "¥8.28" in rows["l40s.1x"] and "¥10.35" in rows["l40s.1x"]
    assert re.search(r'id="prices-[^"]+-disk">.*?¥0\.35', html, re.S)
    assert re.search(r'id="prices-[^"]+-bandwidth">.*?¥23\.00', html, re.S)
    assert 'id="nav-pricing"' in html


def test_a_flavor_taken_off_sale_or_a_price_not_yet_in_force_is_not_listed(client, demo_park):
    Flavor.objects.filter(code="l40s.8x").update(is_active=False)
    region = Region.objects.filter(park=demo_park).first()
    later = FlavorFactory(
        family=Flavor.objects.get(code="l40s.1x").family, code="l40s.16x", accelerator_count=16
    )
    PriceFactory(flavor=later, region=region, effective_from=timezone.now() + timedelta(days=1))

    rows = re.findall(r'<tr data-flavor="([^"]+)">', html_of(client.get("/pricing/")))

    assert "l40s.8x" not in rows and "l40s.16x" not in rows and "l40s.4x" in rows


def test_a_tenant_sees_its_own_parks_prices(client, demo_park, park):
    other = RegionFactory(park=park, name="Elsewhere")
    PriceFactory(region=other, flavor=FlavorFactory(family__park=park, code="x.1x"))
    owner = Membership.objects.filter(organization__park=demo_park, role="owner").first().user
    client.force_login(owner)

    html = html_of(client.get("/pricing/"))

    assert "x.1x" not in html and "Elsewhere" not in html and "l40s.1x" in html
