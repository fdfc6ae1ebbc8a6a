"""The console's scheduled stop (the instance page's HTMX form, the list's badge) and the notice
of a stopped host's coming release, in English and in Chinese."""

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.urls import reverse

from apps.orders import expiry
from apps.orders.models import OrderKind

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}
CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
HTMX = {"HTTP_HX_REQUEST": "true", **ENGLISH}
SHANGHAI = ZoneInfo("Asia/Shanghai")  # settings.TIME_ZONE: how pages show times
# 10:00 in Shanghai: a scheduled stop 13 h later is 23:00.
T0 = datetime(2026, 3, 10, 2, 0, tzinfo=UTC)


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def browser(client, owner):
    client.force_login(owner)
    return client


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def detail(browser, host, **headers) -> str:
    response = browser.get(reverse("orders:instance_detail", args=[host.pk]), **headers)
    assert response.status_code == 200
    return response.content.decode()


def schedule_url(host) -> str:
    return reverse("orders:instance_stop_schedule", args=[host.pk])


def test_the_page_schedules_a_stop_at_a_local_time_and_clears_it(
    clock, world, browser, running_host
):
    host = running_host()
    html = detail(browser, host, **ENGLISH)
    assert 'id="stop-schedule-form"' in html and "No stop scheduled." in text(html)

    response = browser.post(schedule_url(host), {"at": "2026-03-10T23:00"}, **HTMX)

    assert response.status_code == 200
    section = response.content.decode()
    assert "<html" not in section  # the section alone
    assert "Stops at 2026-03-10 23:00" in text(section)
    assert 'id="stop-schedule-clear"' in section
    host.refresh_from_db()
    assert host.stop_at == datetime(2026, 3, 10, 23, 0, tzinfo=SHANGHAI)

    cleared = browser.post(schedule_url(host), {"clear": "1"}, **HTMX)
    assert cleared.status_code == 200 and "No stop scheduled." in text(cleared.content.decode())
    host.refresh_from_db()
    assert host.stop_at is None


def test_hours_from_now_and_the_list_badge(clock, world, browser, running_host):
    host = running_host()
    response = browser.post(schedule_url(host), {"after_hours": "13"}, **ENGLISH)
    assert response.status_code == 302  # without HTMX: back to the page with a message
    rows = browser.get(reverse("orders:instance_list"), **ENGLISH).content.decode()
    assert "stops at 23:00" in text(rows)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"at": "2026-03-10T09:00"}, "Choose a time in the future."),
        ({"at": "2026-05-10T09:00"}, "at most 30 days ahead"),
        ({"after_hours": "0"}, "greater than or equal to 1"),
        ({"at": "tomorrow"}, "Enter a valid date/time."),
        ({}, "Give a time to stop at, or a number of hours."),
    ],
)
def test_bad_input_is_422_with_the_reason(clock, world, browser, running_host, data, error):
    host = running_host()
    response = browser.post(schedule_url(host), data, **HTMX)
    assert response.status_code == 422
    assert error in text(response.content.decode())
    host.refresh_from_db()
    assert host.stop_at is None


def test_a_stopped_host_is_refused_and_a_viewer_forbidden(
    clock, world, browser, running_host, operate, client, viewer
):
    host = running_host()
    operate(host, OrderKind.STOP)
    refused = browser.post(schedule_url(host), {"after_hours": "2"}, **HTMX)
    assert refused.status_code == 422 and "only a running host" in text(refused.content.decode())
    client.force_login(viewer)
    assert client.post(schedule_url(running_host()), {"after_hours": "2"}).status_code == 403


def test_another_organizations_host_is_404(clock, world, running_host, client, other_owner):
    host = running_host()
    client.force_login(other_owner)
    assert client.post(schedule_url(host), {"after_hours": "2"}, **HTMX).status_code == 404


def test_the_page_says_when_a_stopped_host_is_released(
    clock, world, browser, running_host, operate
):
    host = running_host()
    operate(host, OrderKind.STOP)
    html = text(detail(browser, host, **ENGLISH))
    assert "the park releases this host on 2026-03-25 10:00 unless it is started" in html
    assert "the data disk included" in html


def test_the_chinese_page_shows_the_schedule_and_the_release_in_chinese(
    clock, world, browser, running_host, operate, owner
):
    host = running_host()
    expiry.schedule_stop(instance=host, actor=owner, after_hours=13)
    html = text(detail(browser, host, **CHINESE))
    assert "定时关机" in html and "2026-03-10 23:00" in html
    rows = text(browser.get(reverse("orders:instance_list"), **CHINESE).content.decode())
    assert "23:00 关机" in rows
    operate(host, OrderKind.STOP)
    html = text(detail(browser, host, **CHINESE))
    assert "2026-03-25 10:00" in html and "释放" in html
