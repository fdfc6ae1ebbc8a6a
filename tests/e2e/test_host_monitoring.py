"""A tenant watches a host (issue 35), in Chinese, in Chromium: the page's seven monitoring charts
drawn from a week of samples, the range buttons (1 h / 24 h / 7 d), and time axes labelled with
times and dates (never a bare "4", "5"); then a stopped host that says why it shows nothing new.
Screenshots are kept in test-artifacts/screenshots/<test>/."""

import math
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.orders.models import HostSample, InstanceState
from tests.e2e.browser import LAYOUT_PROBLEMS_JS, TIMEOUT_MS, WIDTHS, log_in
from tests.factories import InstanceFactory, MembershipFactory, PoolFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

SPAN_HOURS = {"24h": 24, "7d": 7 * 24}
CHARTS = ("gpu-utilization", "gpu-memory", "power", "cpu", "memory", "disk", "network")
# The labels of one chart's time axis, as ECharts laid them out.
AXIS_LABELS_JS = """
(id) => {
  const chart = echarts.getInstanceByDom(document.getElementById(id));
  const axis = chart.getModel().getComponent("xAxis").axis;
  return axis.getViewLabels().map((label) => label.formattedLabel);
}
"""


def a_week_of_samples(instance) -> None:
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(days=7)
    HostSample.objects.bulk_create(
        HostSample(
            instance=instance,
            at=start + timedelta(minutes=n),
            gpu_count=1,
            gpu_utilization_pct=50 + 40 * math.sin(n / 90),
            gpu_memory_used_mib=40_000,
            gpu_memory_total_mib=81_920,
            power_w=300 + 200 * math.sin(n / 90),
            cpu_pct=20 + 10 * math.sin(n / 45),
            memory_used_mib=30_000,
            memory_limit_mib=131_072,
            disk_used_mib=50_000,
            disk_size_mib=512_000,
            net_rx_bytes_per_s=2_000_000,
            net_tx_bytes_per_s=400_000,
            simulated=True,
        )
        for n in range(7 * 24 * 60)
        if not 3000 <= n < 3600  # ten hours stopped: a gap
    )


@pytest.fixture
def tenant(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = UserFactory(password="")
    user.set_password("a-long-journey-password-42")
    user.save()
    membership = MembershipFactory(user=user, role="owner")
    return {"email": user.email, "password": "a-long-journey-password-42"}, membership.organization


def test_a_tenant_watches_a_host_over_an_hour_a_day_and_a_week(
    page, live_server, screenshot, tenant
):
    account, organization = tenant
    pool = PoolFactory(backend__park=organization.park)
    instance = InstanceFactory(organization=organization, running=True, pool=pool)
    a_week_of_samples(instance)
    page.context.add_cookies(
        [{"name": "django_language", "value": "zh-hans", "url": live_server.url}]
    )
    page.context.set_extra_http_headers({"Accept-Language": "zh-CN"})
    page.set_default_timeout(TIMEOUT_MS)
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["desktop"], strict=True)))
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, live_server.url, account)

    page.goto(f"{live_server.url}/instances/{instance.pk}/")
    for chart in CHARTS:
        expect(page.locator(f"#host-chart-{chart} canvas")).to_have_count(1)
    expect(page.locator("#host-monitoring-status")).to_contain_text("更新于")
    hour = page.evaluate(AXIS_LABELS_JS, "host-chart-cpu")
    assert hour and all(re.fullmatch(r"\d\d:\d\d|\d+月\d+日", label) for label in hour), hour
    screenshot("monitoring-1h")

    for label, name in (("24 小时", "24h"), ("7 天", "7d")):
        page.locator("#host-monitoring-ranges button", has_text=label).click()
        expect(
            page.locator(f'#host-monitoring-ranges button[data-range="{name}"]')
        ).to_have_attribute("aria-pressed", "true")
        # Drawn for that range: its axis spans the range (less one bucket at most).
        page.wait_for_function(
            "([id, hours]) => { const x = echarts.getInstanceByDom(document.getElementById(id))"
            ".getOption().xAxis[0]; return x.max - x.min > (hours - 1) * 3600 * 1000; }",
            arg=["host-chart-gpu-utilization", SPAN_HOURS[name]],
        )
        labels = page.evaluate(AXIS_LABELS_JS, "host-chart-gpu-utilization")
        assert labels and not any(re.fullmatch(r"\d{1,2}", label) for label in labels), labels
        if name == "7d":  # days, as dates
            assert all(re.fullmatch(r"\d+月\d+日", label) for label in labels), labels
        screenshot(f"monitoring-{name}")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(LAYOUT_PROBLEMS_JS) == []

    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["phone"], strict=True)))
    page.reload()
    expect(page.locator("#host-chart-network canvas")).to_have_count(1)
    page.wait_for_load_state("networkidle")
    assert page.evaluate(LAYOUT_PROBLEMS_JS) == []
    screenshot("monitoring-phone")

    # Stopped: it says why nothing new comes, and still shows when it ran.
    type(instance).objects.filter(pk=instance.pk).update(state=InstanceState.STOPPED)
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["desktop"], strict=True)))
    page.reload()
    expect(page.locator("#host-monitoring-status")).to_contain_text("该主机已停止")
    expect(page.locator("#host-monitoring-charts")).to_be_visible()
    screenshot("monitoring-stopped")
    assert errors == [], errors
