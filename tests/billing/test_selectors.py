import random
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing import invoicing
from apps.billing.selectors import instance_cost, metering_lag_seconds, usage_series
from apps.orders.models import Instance, InstanceState, OrderKind
from tests.billing.conftest import local
from tests.factories import EPOCH, MeterFactory, UsageRecordFactory

pytestmark = pytest.mark.django_db

NOW = EPOCH + timedelta(days=1)


def test_metering_lag_is_nothing_when_no_meter_is_owed():
    MeterFactory(  # closed and measured to its end
        ended_at=NOW - timedelta(hours=3), metered_until=NOW - timedelta(hours=3)
    )
    assert metering_lag_seconds(now=NOW) == 0


def test_metering_lag_is_the_oldest_measured_moment_of_the_meters_still_owed():
    MeterFactory(metered_until=NOW - timedelta(seconds=30))  # open
    MeterFactory(metered_until=NOW - timedelta(seconds=75))  # open, the oldest owed
    MeterFactory(  # closed, measured to its end long ago: owed nothing
        ended_at=NOW - timedelta(hours=2), metered_until=NOW - timedelta(hours=2)
    )
    assert metering_lag_seconds(now=NOW) == 75


def test_a_closed_meter_not_measured_to_its_end_is_still_owed():
    MeterFactory(metered_until=NOW - timedelta(seconds=30))
    MeterFactory(ended_at=NOW - timedelta(seconds=100), metered_until=NOW - timedelta(seconds=400))
    assert metering_lag_seconds(now=NOW) == 400


# --- A host's cost so far ---------------------------------------------------------------------


def cost_of(host) -> int:
    return instance_cost(Instance.objects.get(pk=host.pk)).so_far_minor


@pytest.mark.usefixtures("english_messages")
@pytest.mark.parametrize("seed", range(8))
def test_a_hosts_cost_so_far_never_runs_backwards_and_ends_at_its_invoice(
    seed, clock, world, running_host, operate, meter
):
    """A random life (stops, starts, resizes, disk and bandwidth changes, metering passes at any
    moment): the figure on the host's page never decreases, not even at the instant an
    operation closes a meter metering has not reached, and once released it is the invoice."""
    rng = random.Random(seed)
    host = running_host(1, data_disk_gb=100, bandwidth_mbps=3)
    figures = [cost_of(host)]
    for _step in range(14):
        clock.shift(rng.randint(1, 3000))
        figures.append(cost_of(host))
        host.refresh_from_db()
        running = host.state == InstanceState.RUNNING
        match rng.choice(["meter", "power", "resize", "disk", "bandwidth"]):
            case "meter":
                meter()
            case "power":
                operate(host, OrderKind.STOP if running else OrderKind.START)
            case "resize" if running:
                sizes = [count for count in (1, 2, 4) if count != host.flavor.accelerator_count]
                operate(host, OrderKind.RESIZE, flavor=world.flavors[rng.choice(sizes)])
            case "disk":
                operate(host, OrderKind.EXPAND_DISK, data_disk_gb=host.data_disk_gb + 50)
            case "bandwidth":
                choices = [mbps for mbps in (0, 3, 10) if mbps != host.bandwidth_mbps]
                operate(host, OrderKind.SET_BANDWIDTH, bandwidth_mbps=rng.choice(choices))
        figures.append(cost_of(host))  # the same instant: nothing was used in between
        assert figures[-1] == figures[-2], figures
    clock.shift(rng.randint(1, 3000))
    operate(host, OrderKind.RELEASE)
    released = cost_of(host)
    assert released >= figures[-1]
    clock.shift(600)
    assert cost_of(host) == released  # nothing runs after release
    meter()
    assert cost_of(host) == released

    invoice = invoicing.issue_invoice(organization=host.organization, period_end=timezone.now())
    assert invoice.total_minor == released > 0
    assert figures == sorted(figures)


@pytest.mark.usefixtures("english_messages")
def test_a_resize_does_not_restart_the_uptime_and_a_stop_does(clock, world, running_host, operate):
    host = running_host(1)
    started = timezone.now()
    clock.shift(1000)
    operate(host, OrderKind.RESIZE, flavor=world.flavors[2])
    clock.shift(100)
    operate(host, OrderKind.RESIZE, flavor=world.flavors[1])
    assert instance_cost(host).running_since == started

    operate(host, OrderKind.STOP)
    assert instance_cost(host).running_since is None
    clock.shift(100)
    operate(host, OrderKind.START)
    assert instance_cost(host).running_since == timezone.now()


# --- The park's revenue -----------------------------------------------------------------------


NAMES = ("alpha", "beta", "gamma")


def test_revenue_by_month_sums_each_month_and_counts_its_tenants_once(park):
    from apps.billing.selectors import month_start, revenue_by_month, top_tenants
    from tests.factories import OrganizationFactory, UsageRecordFactory

    now = timezone.now()
    this_month = month_start(now)
    last_month = month_start(this_month - timedelta(days=1))
    alpha, beta, gamma = [OrganizationFactory(park=park, name=name) for name in NAMES]
    OrganizationFactory(park=park, name="idle")  # spent nothing: not a top tenant
    elsewhere = OrganizationFactory()  # another park's: not counted
    for organization, start, amount in [
        (alpha, last_month + timedelta(days=2), 100),
        (alpha, last_month + timedelta(days=3), 50),
        (beta, last_month + timedelta(days=2), 7),
        (alpha, this_month + timedelta(hours=1), 300),
        (beta, this_month + timedelta(hours=2), 200),
        (beta, this_month + timedelta(hours=3), 100),
        (gamma, this_month + timedelta(hours=4), 300),
        (elsewhere, this_month + timedelta(hours=5), 9999),
    ]:
        UsageRecordFactory(organization=organization, started_at=start, amount_minor=amount)

    rows = revenue_by_month(park, now=now)
    assert [(row["amount"], row["tenants"]) for row in rows] == [(157, 2), (900, 3)]
    assert rows[0]["month"] < rows[1]["month"]
    top = top_tenants(park, month=this_month.date())
    assert [(o.name, o.spent) for o in top] == [("alpha", 300), ("beta", 300), ("gamma", 300)]
    assert [o.name for o in top_tenants(park, month=this_month.date(), limit=1)] == ["alpha"]


# --- A task's cost so far --------------------------------------------------------------------


def test_a_tasks_cost_so_far_goes_no_further_than_its_backend_said_it_ran():
    """What the page shows is what metering will bill: up to the last time the backend said the
    task ran, so the figure never runs ahead and drops back once the real end is learned."""
    from apps.billing.selectors import task_cost_minor
    from tests.factories import TaskFactory

    task = TaskFactory(state="running")
    MeterFactory(
        organization=task.organization,
        instance=None,
        task=task,
        hourly_minor=Decimal(3600),  # 1 a second
        started_at=NOW - timedelta(seconds=120),
        metered_until=NOW - timedelta(seconds=120),
        known_until=NOW - timedelta(seconds=45),
    )
    assert task_cost_minor(task, now=NOW) == 75


def test_the_usage_chart_sums_each_records_day_and_a_record_before_days_on_its_start(
    organization,
):
    """A record holds a meter's use of its `day`; those written a pass each, before days, have
    none and count on the day they started, in the park's time zone (Shanghai)."""
    now = local(2026, 12, 20, 9)
    UsageRecordFactory(  # as metering writes them: a meter's day
        organization=organization, started_at=local(2026, 12, 20), day=date(2026, 12, 20)
    )
    UsageRecordFactory(  # 16:30 UTC on 20 November: 21 November in Shanghai, the chart's first
        organization=organization, started_at=local(2026, 11, 21, 0, 30), amount_minor=20
    )
    UsageRecordFactory(  # the day before the chart's first, in Shanghai
        organization=organization, started_at=local(2026, 11, 20, 23, 30), amount_minor=400
    )
    UsageRecordFactory(
        organization=organization, started_at=local(2026, 11, 20, 8), day=date(2026, 11, 20)
    )
    UsageRecordFactory(started_at=local(2026, 12, 20, 1), day=date(2026, 12, 20))  # another's

    chart = usage_series(organization, group="kind", now=now)

    assert (chart["x"][0], chart["x"][-1]) == ("2026-11-21", "2026-12-20")
    ((compute),) = chart["series"]
    assert compute["data"][0] == 20 and compute["data"][-1] == 2500
    assert sum(compute["data"]) == 2520
