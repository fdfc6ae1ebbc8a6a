"""The catalog's reads kept whole (apps/catalog/kept_reads.py): the API's list of flavors and a
visitor's catalog page are built once, then taken from the cache until something they show
changes. Every change shows on the next request: a new price in force, a scheduled one coming
into force, a flavor taken off sale, an allocation taking the last card, a catalog row edited.
Nothing of one visitor (CSRF token, messages, account) reaches another."""

import re
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
import time_machine
from django.contrib.messages import constants
from django.contrib.messages.storage.base import Message
from django.contrib.messages.storage.cookie import CookieStorage
from django.db import connection
from django.http import HttpRequest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.catalog import views
from apps.catalog.kept_reads import CSRF_TOKEN_HOLE
from apps.catalog.models import PriceKind
from apps.catalog.selectors import catalog_changed
from apps.catalog.services import schedule_price, set_flavor_on_sale
from apps.orchestration.reservations import release
from apps.orchestration.services import place, register_node, shape_of
from apps.tenants.services import create_api_key
from tests.factories import (
    FlavorFactory,
    FlavorFamilyFactory,
    InstanceFactory,
    OrderFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)

pytestmark = pytest.mark.django_db

CODE = "k1.1x"


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def sold(park):
    """k1.1x (one card) on sale at ¥25.00 an hour in one region, and one node of two cards."""
    region = RegionFactory(park=park)
    pool = PoolFactory(backend__park=park, backend__driver="simulator", region=region)
    family = FlavorFamilyFactory(park=park, accelerator_model=pool.accelerator_model)
    flavor = FlavorFactory(family=family, code=CODE, accelerator_count=1, vcpu=1, ram_gb=1)
    PriceFactory(region=region, flavor=flavor, amount_minor=2500)
    register_node(pool=pool, hostname="node-0", accelerators=2, vcpu=64, ram_gb=256)
    return SimpleNamespace(region=region, pool=pool, flavor=flavor, family=family)


def visitor_page(client, query=None, **headers) -> str:
    response = client.get("/catalog/", query or {}, **headers)
    assert response.status_code == 200
    html = response.content.decode()
    assert CSRF_TOKEN_HOLE not in html
    return html


def cards_on(html: str) -> dict[str, tuple[int, int | None]]:
    """{flavor code: (hosts free now, hourly price in fen or None)} as the page's cards say."""
    cards = {}
    for card in html.split('data-flavor="')[1:]:
        code = card.split('"', 1)[0]
        free = int(re.search(r'class="col-6 free-now">(\d+)', card).group(1))
        price = re.search(r'<strong class="num">¥([\d,.]+)</strong>', card)
        cards[code] = (free, int(Decimal(price.group(1).replace(",", "")) * 100) if price else None)
    return cards


@pytest.fixture(params=["visitor", "visitor htmx", "api"])
def seen(request, client, organization, owner):
    """seen() -> {flavor code: (hosts free now, hourly price in fen)}, as the visitor's page,
    its list alone (HTMX) or the API's list of flavors (an organization's key) says."""
    if request.param == "api":
        _key, secret = create_api_key(
            organization=organization, actor=owner, name="reader", scope="read"
        )

        def by_api():
            response = client.get("/api/v1/flavors/", HTTP_AUTHORIZATION=f"Bearer {secret}")
            assert response.status_code == 200, response.content
            return {
                card["flavor"]["code"]: (card["available_now"], card["cheapest_hourly_minor"])
                for card in response.json()
            }

        return by_api
    headers = {"HTTP_HX_REQUEST": "true"} if request.param == "visitor htmx" else {}
    return lambda: cards_on(visitor_page(client, **headers))


def catalog_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "catalog_" in q["sql"]]


# --- Kept, and changed at once ---------------------------------------------------------------


def test_a_second_read_reads_no_catalog_row(sold, seen):
    assert seen() == {CODE: (2, 2500)}
    with CaptureQueriesContext(connection) as second:
        assert seen() == {CODE: (2, 2500)}
    assert catalog_queries(second) == []


def test_a_new_price_in_force_shows_at_once(sold, seen, operator):
    assert seen() == {CODE: (2, 2500)}
    schedule_price(
        region=sold.region,
        operator=operator,
        kind=PriceKind.FLAVOR_HOUR,
        flavor=sold.flavor,
        amount_minor=3100,
    )
    assert seen() == {CODE: (2, 3100)}


def test_a_scheduled_price_shows_when_it_comes_into_force(sold, seen, operator):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        schedule_price(
            region=sold.region,
            operator=operator,
            kind=PriceKind.FLAVOR_HOUR,
            flavor=sold.flavor,
            amount_minor=3100,
            effective_from=timezone.now() + timedelta(seconds=5),
        )
        assert seen() == {CODE: (2, 2500)}
        clock.shift(4)
        assert seen() == {CODE: (2, 2500)}
        # No write marks the moment: the kept read knew when it would be out of date.
        clock.shift(2)
        assert seen() == {CODE: (2, 3100)}


def test_a_flavor_taken_off_sale_leaves_at_once(sold, seen, operator):
    assert CODE in seen()
    set_flavor_on_sale(flavor=sold.flavor, operator=operator, on_sale=False)
    assert seen() == {}
    set_flavor_on_sale(flavor=sold.flavor, operator=operator, on_sale=True)
    assert seen() == {CODE: (2, 2500)}


def test_allocations_taking_the_last_card_show_at_once(sold, seen, organization):
    assert seen() == {CODE: (2, 2500)}
    hosts = []
    for free_after in (1, 0):
        instance = InstanceFactory(organization=organization, flavor=sold.flavor)
        OrderFactory(organization=organization, instance=instance)
        place(instance=instance, shape=shape_of(sold.flavor))
        hosts.append(instance)
        assert seen() == {CODE: (free_after, 2500)}
    release(hosts[0])
    assert seen() == {CODE: (1, 2500)}


def test_the_last_card_taken_hides_order_now_from_visitors(client, sold, organization):
    assert "Order now" in visitor_page(client)
    for _ in range(2):
        instance = InstanceFactory(organization=organization, flavor=sold.flavor)
        OrderFactory(organization=organization, instance=instance)
        place(instance=instance, shape=shape_of(sold.flavor))
    assert "Order now" not in visitor_page(client)


def rename_model(sold):
    sold.pool.accelerator_model.name = "Renamed-GPU"
    sold.pool.accelerator_model.save()


def rename_family(sold):
    sold.family.name = "Renamed family"
    sold.family.save()


def drop_region(sold):
    sold.region.prices.all().delete()
    sold.pool.delete()
    sold.region.delete()


@pytest.mark.parametrize(
    ("edit", "shown"),
    [
        (rename_model, "Renamed-GPU"),
        (rename_family, "Renamed family"),
        (drop_region, "No price set"),
    ],
)
def test_a_catalog_row_edited_past_the_services_shows_at_once(client, sold, edit, shown):
    """The admin and the host agents' proposals write these rows too: every save or delete
    counts, not only the catalog editor's."""
    assert shown not in visitor_page(client)
    edit(sold)
    assert shown in visitor_page(client)


def test_a_page_built_while_a_change_commits_is_not_kept_past_it(client, sold, monkeypatch):
    """A reader builds the page while another process's change commits: what it built is
    kept under the version from before the change, which no later reader takes."""
    built = views.catalog_flavors

    def built_during_a_change(filters):
        cards = built(filters)
        catalog_changed()
        return cards

    monkeypatch.setattr(views, "catalog_flavors", built_during_a_change)
    visitor_page(client)
    monkeypatch.undo()

    with CaptureQueriesContext(connection) as next_read:
        visitor_page(client)
    assert catalog_queries(next_read)


# --- One page per language, address and HTMX; nothing of one visitor for another ------------


def test_each_language_filter_and_fragment_gets_its_own_page(sold):
    english, chinese = Client(), Client()
    english.cookies["django_language"] = "en"
    chinese.cookies["django_language"] = "zh-hans"

    assert '<html lang="en">' in visitor_page(english)
    assert '<html lang="zh-hans">' in visitor_page(chinese)
    assert '<html lang="en">' in visitor_page(english)
    assert cards_on(visitor_page(english, {"accelerator_count": "8"})) == {}
    assert cards_on(visitor_page(english)) == {CODE: (2, 2500)}
    fragment = visitor_page(english, HTTP_HX_REQUEST="true")
    assert "<html" not in fragment and CODE in fragment


def tokens_on(html: str) -> set[str]:
    """The CSRF tokens the page holds: its forms' and its HTMX headers'."""
    return set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)) | set(
        re.findall(r'"X-CSRFToken": "([^"]+)"', html)
    )


def switch_language(client, token) -> int:
    response = client.post("/i18n/setlang/", {"language": "en", "csrfmiddlewaretoken": token})
    return response.status_code


def test_each_visitor_gets_a_csrf_token_of_their_own(sold):
    first, second = Client(enforce_csrf_checks=True), Client(enforce_csrf_checks=True)
    (first_token,) = tokens_on(visitor_page(first))
    (second_token,) = tokens_on(visitor_page(second))  # the kept page

    assert first_token != second_token
    assert switch_language(second, first_token) == 403
    assert switch_language(first, second_token) == 403
    assert switch_language(first, first_token) == 302
    assert switch_language(second, second_token) == 302


def test_a_message_waiting_for_a_visitor_is_theirs_alone(client, sold):
    visitor_page(client)  # kept without it
    told = Client()
    told.cookies["messages"] = CookieStorage(HttpRequest())._encode(
        [Message(constants.INFO, "You have signed out.")]
    )

    assert "You have signed out." in visitor_page(told)
    assert "You have signed out." not in visitor_page(client)
    assert "You have signed out." not in visitor_page(told)  # shown once


def test_a_signed_in_page_is_neither_kept_nor_given_to_visitors(client, sold, owner):
    visitor_page(client)
    member = Client()
    member.cookies["django_language"] = "en"
    member.force_login(owner)

    assert owner.email in visitor_page(member)
    assert "Log out" in visitor_page(member)
    assert owner.email not in visitor_page(client)
    assert "Log out" not in visitor_page(client)
