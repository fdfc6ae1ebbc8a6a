"""The console's GPU-less start (无卡模式开机): the button beside 开机 with its price, the mode on
the host's page and in the list, and a refusal as a message."""

import re

import pytest
from django.urls import reverse

from apps.core.money import format_money
from apps.orders.models import Instance, InstanceState
from tests.factories import PriceFactory

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}
CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


@pytest.fixture
def browser(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def stopped_host(running_host, operate):
    host = running_host(2)
    operate(host, "stop")
    return host


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def detail(browser, host, **headers) -> str:
    response = browser.get(reverse("orders:instance_detail", args=[host.pk]), **headers)
    assert response.status_code == 200
    return response.content.decode()


def start(browser, host, django_capture_on_commit_callbacks, **data):
    url = reverse("orders:instance_operation", args=[host.pk, "start"])
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(url, data, **ENGLISH)
    assert response.status_code == 302
    return browser.get(response["Location"], **ENGLISH).content.decode()


def test_a_stopped_host_offers_it_with_its_price_and_runs_without_cards(
    world, browser, stopped_host, django_capture_on_commit_callbacks
):
    price = PriceFactory(region=world.region, no_card=True, amount_minor=80)
    html = detail(browser, stopped_host, **ENGLISH)
    assert 'id="start-without-cards"' in html
    assert f"Start without cards · {format_money(80, price.currency)}/h" in text(html)

    page = start(browser, stopped_host, django_capture_on_commit_callbacks, without_cards="on")

    host = Instance.objects.get(pk=stopped_host.pk)
    assert host.state == InstanceState.RUNNING and host.without_cards
    assert 'id="without-cards-badge"' in page
    rows = browser.get(reverse("orders:instance_list"), **ENGLISH).content.decode()
    assert "data-without-cards" in rows


def test_in_chinese(world, browser, stopped_host):
    PriceFactory(region=world.region, no_card=True, amount_minor=80)
    assert "无卡模式开机" in text(detail(browser, stopped_host, **CHINESE))


def test_no_button_where_the_region_sets_no_price(world, browser, stopped_host):
    assert 'id="start-without-cards"' not in detail(browser, stopped_host, **ENGLISH)


def test_a_refusal_is_a_message(world, browser, stopped_host, django_capture_on_commit_callbacks):
    # The page offered it, and the price was withdrawn before the click.
    page = start(browser, stopped_host, django_capture_on_commit_callbacks, without_cards="on")

    assert "sets no price for hosts without cards" in text(page)
    assert Instance.objects.get(pk=stopped_host.pk).state == InstanceState.STOPPED
