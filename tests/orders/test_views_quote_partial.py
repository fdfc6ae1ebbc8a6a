"""The live quote beside the order form (orders:instance_quote, HTMX): from the first flavor
chosen, itemised, with the balance for those who may see it, the first hour held, a warning
with a way to top up when the wallet cannot pay it, and the quota left; and Quote.hold_minor.

Prices are the `world`'s (tests/orders/conftest.py): 1000 fen an hour per accelerator, a GB of
cloud disk 36 fen a month (1/20 an hour), a Mbps 720 fen a month (1 an hour)."""

import re
import uuid
from dataclasses import replace

import pytest
from django.urls import reverse

from apps.billing.models import Wallet
from apps.orders.services import quote
from apps.tenants.models import Role
from apps.tenants.roles import Action, can
from tests.factories import InstanceFactory, PriceFactory
from tests.orders.conftest import SSH_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

ORDERING_ROLES = [role for role in Role.values if can(role, Action.ORDER)]


@pytest.fixture(autouse=True)
def english_pages(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def as_role(client, world, member_of):
    """as_role(role) -> the client, signed in as a new member with that role."""

    def sign_in(role=Role.OWNER):
        client.force_login(member_of(world.organization, role))
        return client

    return sign_in


def order_data(**fields) -> dict:
    """The order form as the browser posts it; a field given as None is left out."""
    values = {
        "flavor": "g1.1x",
        "image": "ubuntu-cuda",
        "region": "center",
        "name": "gpu-host",
        "system_disk_gb": 100,
        "data_disk_gb": 0,
        "bandwidth_mbps": 0,
        "count": 1,
        "ssh_public_key": SSH_KEY,
        "idempotency_key": uuid.uuid4().hex,
        **fields,
    }
    return {k: v for k, v in values.items() if v is not None}


def quote_html(client, **fields) -> str:
    response = client.post(reverse("orders:instance_quote"), order_data(**fields))
    assert response.status_code == 200
    assert [t.name for t in response.templates][0] == "orders/partials/_quote.html"
    return response.content.decode()


def figure(html: str, id_: str) -> str:
    found = re.search(rf'id="{id_}">(.*?)</', html, re.S)
    assert found, f"no #{id_} in {html}"
    return re.sub(r"\s+", " ", found.group(1)).strip()


def problems(html: str) -> list[str]:
    block = re.search(r'<ul[^>]*id="quote-problems"[^>]*>(.*?)</ul>', html, re.S)
    return re.findall(r"<li>(.*?)</li>", block.group(1)) if block else []


def set_wallet(organization, *, balance, held=0):
    Wallet.objects.filter(organization=organization).update(
        balance_minor=balance, held_minor=held, credit_limit_minor=0
    )


# --- From the first flavor --------------------------------------------------------------------


def test_a_quote_comes_with_the_flavor_before_the_name_and_key(as_role):
    html = quote_html(as_role(), name=None, ssh_public_key=None)

    assert figure(html, "quote-hourly") == "¥10.00"
    # The key is the order's own question (a host the web terminal reaches needs none): asked
    # once the form's fields are right (test_views: the quote names it then).
    assert problems(html) == ["Name: This field is required."]


def test_a_complete_form_has_no_problems(as_role):
    html = quote_html(as_role())

    assert 'id="quote-items"' in html
    assert problems(html) == []


def test_no_price_until_the_fields_that_set_it_are_right(as_role):
    """The disk size changes the price: while it is missing there is no quote, only why."""
    html = quote_html(as_role(), system_disk_gb=None)

    assert 'id="quote-items"' not in html and 'id="quote-hold"' not in html
    assert problems(html) == ["System disk (GB): This field is required."]


def test_the_quote_itemises_compute_disk_and_bandwidth(as_role):
    html = quote_html(as_role(), flavor="g1.2x", data_disk_gb=200, bandwidth_mbps=50)

    assert figure(html, "quote-compute") == "¥20.00"
    assert figure(html, "quote-disk") == "¥0.10"  # 200 GB × 36 fen / 720 h
    assert figure(html, "quote-bandwidth") == "¥0.50"  # 50 Mbps × 720 fen / 720 h
    assert figure(html, "quote-hourly") == "¥20.60"
    assert "(g1.2x)" in html and "(200 GB)" in html and "(50 Mbps)" in html


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN])
def test_billing_readers_see_the_balance_available(as_role, world, role):
    set_wallet(world.organization, balance=500_000, held=100_000)

    html = quote_html(as_role(role))

    assert figure(html, "quote-balance") == "¥4,000.00"


def test_a_member_without_billing_rights_sees_no_balance(as_role, world):
    set_wallet(world.organization, balance=500_000)

    html = quote_html(as_role(Role.MEMBER))

    assert 'id="quote-balance"' not in html and "¥5,000.00" not in html
    assert figure(html, "quote-hold") == "¥10.00"


@pytest.mark.parametrize("role", sorted(set(Role.values) - set(ORDERING_ROLES)))
def test_roles_that_cannot_order_get_no_quote(as_role, role):
    response = as_role(role).post(reverse("orders:instance_quote"), order_data())

    assert response.status_code == 403


# --- Whether the wallet pays the first hour ---------------------------------------------------


def test_a_wallet_short_of_the_first_hour_offers_a_top_up(as_role, world):
    set_wallet(world.organization, balance=999)  # the first hour is 1000

    html = quote_html(as_role(Role.OWNER))

    short = re.search(r'id="quote-short">(.*?)</div>', html, re.S).group(1)
    assert "Not enough balance to order this." in short
    assert f'href="{reverse("billing:overview")}#top-up"' in short


def test_a_member_who_cannot_top_up_is_told_whom_to_ask(as_role, world):
    set_wallet(world.organization, balance=999)

    html = quote_html(as_role(Role.MEMBER))

    short = re.search(r'id="quote-short">(.*?)</div>', html, re.S).group(1)
    assert "Ask your organization's billing contact to top up." in short
    assert "#top-up" not in short


def test_what_is_held_already_is_not_available_for_the_first_hour(as_role, world):
    set_wallet(world.organization, balance=5_000, held=4_500)

    assert 'id="quote-short"' in quote_html(as_role())


@pytest.mark.parametrize("balance", [1_000, 50_000])
def test_a_wallet_that_pays_the_first_hour_has_no_warning(as_role, world, balance):
    set_wallet(world.organization, balance=balance)

    html = quote_html(as_role())

    assert 'id="quote-short"' not in html
    assert figure(html, "quote-hold") == "¥10.00"


def test_the_hold_covers_every_host_ordered(as_role, world):
    set_wallet(world.organization, balance=2_500)  # two hours' worth, three hosts

    html = quote_html(as_role(), count=3)

    assert figure(html, "quote-hold") == "¥30.00"
    assert 'id="quote-short"' in html


# --- Quota left -------------------------------------------------------------------------------


@pytest.fixture
def two_cards_held(world):
    """A running two-card host of the organization's: 2 of its 16 cards, 1 of its 10 hosts."""
    return InstanceFactory(
        organization=world.organization,
        flavor=world.flavors[2],
        image=world.image,
        region=world.region,
        running=True,
    )


@pytest.mark.usefixtures("two_cards_held")
def test_the_quote_shows_the_quota_left_of_each_limit(as_role):

    html = quote_html(as_role())

    quotas = re.search(r'<details[^>]*id="quote-quotas"[^>]*>(.*?)</details>', html, re.S)
    assert quotas, html
    left = dict(
        re.findall(r'data-quota="([^"]+)"><span>[^<]*</span><span[^>]*>([^<]*)</span>', html)
    )
    assert left == {"accelerators": "14 (16)", "instances": "9 (10)"}


@pytest.mark.usefixtures("two_cards_held")
def test_the_quote_says_when_the_order_would_pass_a_quota(as_role):
    client = as_role()

    assert problems(quote_html(client, flavor="g1.8x")) == []  # 2 + 8 of 16
    (warning,) = problems(quote_html(client, flavor="g1.8x", count=2))  # 2 + 16 of 16

    assert warning == (
        "Over your organization&#x27;s quota for Accelerators (all models): 2 in use + 16 asked "
        "exceeds the limit of 16. Release something or ask the park for more."
    )
    response = client.post(reverse("orders:instance_create"), order_data(flavor="g1.8x", count=2))
    assert warning in response.content.decode()  # what the order is refused with


def test_no_limits_no_quota_list(as_role, world):
    world.organization.quota_limits.all().delete()

    assert 'id="quote-quotas"' not in quote_html(as_role())


# --- Quote.hold_minor -------------------------------------------------------------------------


def test_the_hold_is_each_hosts_rounded_first_hour_times_the_count(world, host_request):
    """10 GB of cloud disk adds half a fen an hour: one host is 1000.5 fen, rounded to 1001;
    three hold 3003, not the 3002 that rounding their sum would give."""
    three = quote(organization=world.organization, request=host_request(data_disk_gb=10, count=3))
    one = replace(three, count=1)

    assert one.hourly_minor_rounded == 1001
    assert three.hold_minor == 3 * one.hourly_minor_rounded == 3003
    assert three.hourly_minor_rounded == 3002


def test_the_hold_of_one_host_is_its_rounded_hour(world, host_request):
    one = quote(organization=world.organization, request=host_request(2, bandwidth_mbps=5))

    assert one.hold_minor == one.hourly_minor_rounded == 2005


def test_the_quote_and_the_order_agree_on_a_free_host_with_an_empty_wallet(as_role, world):
    PriceFactory(region=world.region, flavor=world.flavors[1], amount_minor=0)
    set_wallet(world.organization, balance=0)
    client = as_role()

    warned = 'id="quote-short"' in quote_html(client)
    ordering = client.post(reverse("orders:instance_create"), order_data())
    refused_for_funds = "Not enough balance" in ordering.content.decode()

    assert ordering.status_code == 302 or refused_for_funds, "refused for another reason"
    assert warned == refused_for_funds
