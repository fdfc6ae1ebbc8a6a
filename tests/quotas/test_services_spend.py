"""The monthly spend quota (issue 18): checked when an order is placed (the month's spend so far,
from the usage records, plus the order's first hour) and, as spend accrues, announced once at
80 % and once at 100 % after metering; from 100 % on new orders are refused, while running hosts
keep running.

The world (tests/orders/conftest.py): a 1-accelerator host costs 1000 fen an hour.
"""

from datetime import timedelta

import pytest
from django.db import transaction

from apps.billing.selectors import month_spend
from apps.core.models import AuditEvent
from apps.orders.models import Instance, InstanceState
from apps.quotas.models import QuotaResource
from apps.quotas.selectors import quota_rows
from apps.quotas.services import QuotaExceeded, Usage, committed_spend, demand_for, reserve
from apps.tenants.models import Organization
from tests.billing.conftest import local

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

HOUR = 3600


def spent(world) -> int:
    return month_spend(Organization.objects.filter(pk=world.organization.pk))


def committed(world) -> int:
    return committed_spend(Organization.objects.filter(pk=world.organization.pk))


def test_the_month_spend_is_read_from_the_usage_records(clock, world, running_host, meter):
    running_host(1)
    clock.shift(2 * HOUR)
    assert spent(world) == 0  # nothing metered yet
    meter()
    assert spent(world) == 2000


def test_an_order_whose_first_hour_passes_the_limit_is_refused(
    clock, world, running_host, order_hosts, meter
):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 3000)
    running_host(1)  # ¥0 committed + ¥10.00 an hour: within ¥30.00
    clock.shift(HOUR)
    meter()  # ¥10.00 spent, the first hour's hold drawn down
    running_host(1)  # ¥10.00 committed + ¥10.00: within
    clock.shift(HOUR // 2)
    meter()  # ¥20.00 spent, ¥5.00 of the second host's first hour still held
    assert committed(world) == 2500
    with pytest.raises(QuotaExceeded) as refused:
        order_hosts(1)
    message = refused.value.message
    assert refused.value.code == "quota_exceeded"
    assert "Monthly spend" in message
    assert "¥25.00 in use + ¥10.00 asked exceeds the limit of ¥30.00" in message
    assert Instance.objects.count() == 2


def test_at_the_limit_every_new_order_is_refused_and_hosts_keep_running(
    clock, world, running_host, order_hosts, meter
):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 2000)
    host = running_host(1)
    clock.shift(2 * HOUR)
    meter()
    assert spent(world) == 2000
    with pytest.raises(QuotaExceeded):
        order_hosts(1)
    # Even a demand that costs nothing an hour is refused now.
    with transaction.atomic(), pytest.raises(QuotaExceeded):
        reserve(organization=world.organization, demand=Usage(disk_gb=10))
    clock.shift(HOUR)
    meter()
    host.refresh_from_db()
    assert host.state == InstanceState.RUNNING
    assert spent(world) == 3000  # still charged


def test_orders_not_yet_metered_count_their_first_hour(world, order_hosts):
    # Before any metering pass, each order's first hour is committed (held on the wallet): a
    # limit of three first hours takes three orders, not every order placed before metering.
    world.set_limit(QuotaResource.MONTHLY_SPEND, 3000)
    for _ in range(3):
        order_hosts(1)
    assert spent(world) == 0 and committed(world) == 3000
    with pytest.raises(QuotaExceeded) as refused:
        order_hosts(1)
    assert "¥30.00 in use + ¥10.00 asked" in refused.value.message
    assert Instance.objects.count() == 3


def test_a_released_hosts_first_hour_no_longer_counts(world, order_hosts, operate):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 1000)
    (order,) = order_hosts(1)
    with pytest.raises(QuotaExceeded):
        order_hosts(1)
    operate(Instance.objects.get(pk=order.instance_id), "release")
    assert committed(world) == 0  # released before any usage was metered: nothing committed
    order_hosts(1)


def test_last_months_spend_does_not_count(travel, world, running_host, order_hosts, meter):
    clock = travel(local(2026, 3, 31, 20))
    world.set_limit(QuotaResource.MONTHLY_SPEND, 5000)
    running_host(2)  # 2000 an hour
    clock.move_to(local(2026, 4, 1, 0, 30))
    meter()  # 8000 in March, 1000 in April
    assert spent(world) == 1000
    (order,) = order_hosts(1)
    assert order.instance_id


def test_a_park_wide_spend_limit_counts_every_organization(
    clock, world, running_host, order_hosts, meter
):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 1500, organization=False)
    running_host(1)
    clock.shift(HOUR)
    meter()
    with pytest.raises(QuotaExceeded) as refused:
        order_hosts(1)
    assert "park's capacity limit" in refused.value.message


def test_the_demand_is_priced_by_the_quote_when_given(world, meter):
    flavor = world.flavors[1]
    by_flavor = demand_for(flavor=flavor, system_disk_gb=100, data_disk_gb=0, count=3)
    assert by_flavor.spend_minor() == 3000  # the flavor's lowest hourly price × hosts
    quoted = demand_for(flavor=flavor, system_disk_gb=100, data_disk_gb=0, hourly_minor=1234)
    assert quoted.spend_minor() == 1234
    assert quoted == demand_for(flavor=flavor, system_disk_gb=100, data_disk_gb=0)  # same hold
    grow = demand_for(flavor=world.flavors[4], system_disk_gb=0, data_disk_gb=0) - demand_for(
        flavor=flavor, system_disk_gb=0, data_disk_gb=0
    )
    assert grow.positive().spend_minor() == 3000  # a resize adds the difference
    assert (Usage() - grow).positive().spend_minor() == 0  # a shrink adds nothing
    world.set_limit(QuotaResource.MONTHLY_SPEND, 1000)
    with transaction.atomic():
        reserve(organization=world.organization, demand=quoted - Usage(hourly_minor=234))
        with pytest.raises(QuotaExceeded):
            reserve(organization=world.organization, demand=quoted)


# --- Announced as spend accrues -----------------------------------------------------------------


def spend_events(world):
    return list(
        AuditEvent.objects.filter(
            organization_id=world.organization.pk, action="billing.spend_quota"
        )
        .order_by("pk")
        .values_list("data__level", flat=True)
    )


def test_80_and_100_percent_are_announced_once_each(
    clock, world, running_host, meter, owner, billing, mailoutbox
):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 10_000)
    host = running_host(1)
    clock.shift(7 * HOUR)
    meter()  # 70 %
    assert spend_events(world) == [] and mailoutbox == []
    clock.shift(HOUR)
    meter()  # 80 %
    assert spend_events(world) == [80]
    (warning,) = mailoutbox
    assert sorted(warning.to) == sorted([owner.email, billing.email])
    assert "80 %" in warning.subject
    assert "¥80.00" in warning.body and "¥100.00" in warning.body
    clock.shift(HOUR)
    meter()  # 90 %: nothing new
    assert spend_events(world) == [80] and len(mailoutbox) == 1
    clock.shift(HOUR)
    meter()  # 100 %
    assert spend_events(world) == [80, 100]
    assert len(mailoutbox) == 2 and "reached" in mailoutbox[1].subject
    assert "running hosts keep running" in mailoutbox[1].body
    clock.shift(HOUR)
    meter()
    assert spend_events(world) == [80, 100] and len(mailoutbox) == 2
    host.refresh_from_db()
    assert host.state == InstanceState.RUNNING


def test_a_jump_past_the_limit_is_announced_once(clock, world, running_host, meter, mailoutbox):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 1000)
    running_host(1)
    clock.shift(2 * HOUR)
    meter()
    meter()
    assert spend_events(world) == [100]
    assert len(mailoutbox) == 1


def test_a_raised_limit_is_announced_again(clock, world, running_host, meter, mailoutbox):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 1000)
    running_host(1)
    clock.shift(HOUR)
    meter()
    world.set_limit(QuotaResource.MONTHLY_SPEND, 2400)
    clock.shift(timedelta(minutes=60))
    meter()  # 2000 of 2400: 83 %
    assert spend_events(world) == [100, 80]


def test_the_quota_page_shows_the_month_spend(clock, world, running_host, meter):
    world.set_limit(QuotaResource.MONTHLY_SPEND, 10_000)
    running_host(1)
    clock.shift(5 * HOUR)
    meter()
    (row,) = [r for r in quota_rows(world.organization) if "spend" in r.label.lower()]
    assert (row.used, row.limit, row.percent) == (5000, 10_000, 50)
