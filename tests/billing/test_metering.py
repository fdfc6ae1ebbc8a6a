"""Metering with a frozen clock: what each meter counts across a host's life, priced by the
rounding rule of apps/billing/metering.py (rate × whole seconds ÷ 3600, rounded half up once
per meter; the records of a meter add up to exactly that).

World prices: 1000 fen an hour per accelerator, 36 fen a GB-month of cloud disk (so 100 GB is
5 an hour, 7 GB 0.35), 720 fen a Mbps-month (so 3 Mbps is 3 an hour); 3.12 compute units per
accelerator.
"""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from apps.billing import metering
from apps.billing.models import EntryKind, LedgerEntry, Meter, MeterKind, UsageRecord
from apps.orchestration.meters import follow_task
from apps.orders.models import Instance, InstanceState, OrderKind
from apps.orders.tasks import fulfil_order
from tests.billing.conftest import local
from tests.factories import FUNDED_BALANCE_MINOR, InvoiceFactory, PriceFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

COMPUTE, DISK, BANDWIDTH = MeterKind.COMPUTE, MeterKind.DISK, MeterKind.BANDWIDTH


@pytest.fixture
def finish(django_capture_on_commit_callbacks):
    """finish(order): the backend reports the operation done (the task a worker would run)."""

    def run(order):
        with django_capture_on_commit_callbacks(execute=True):
            fulfil_order.delay(order.pk)
        return Instance.objects.get(pk=order.instance_id)

    return run


def meters(instance, kind):
    return list(
        Meter.objects.filter(workload__instance=instance, kind=kind).order_by("started_at", "pk")
    )


def seconds_of(instance, kind) -> int:
    return UsageRecord.objects.filter(workload__instance=instance, kind=kind).aggregate(
        s=Sum("seconds")
    )["s"]


def recorded(meter_row) -> tuple[int, int]:
    """(seconds, amount) its records add up to."""
    totals = meter_row.records.aggregate(s=Sum("seconds"), a=Sum("amount_minor"))
    return totals["s"] or 0, totals["a"] or 0


def test_amount_for_rounds_half_up():
    assert metering.amount_for(Decimal(1000), 9) == 3  # 2.5 -> 3, not banker's 2
    assert metering.amount_for(Decimal(1000), 1) == 0  # 0.28
    assert metering.amount_for(Decimal(1000), 2) == 1  # 0.56
    assert metering.amount_for(Decimal(3), 600) == 1  # 0.5 -> 1
    assert metering.amount_for(Decimal("0.35"), 3600) == 0  # 0.35
    assert metering.amount_for(Decimal("0.35"), 5143) == 1  # 0.50001


def test_a_host_life_metered_per_kind(clock, world, running_host, operate, meter, finish):
    """Compute and bandwidth count only while running, the disk from the first start until the
    host is released (through stopping, stopped, starting and releasing)."""
    host = running_host(1, data_disk_gb=100, bandwidth_mbps=3)
    assert {m.kind: m.hourly_minor for m in Meter.objects.filter(workload__instance=host)} == {
        COMPUTE: 1000,
        DISK: 5,
        BANDWIDTH: 3,
    }
    clock.shift(500)
    meter()  # metering in between changes no total
    clock.shift(500)  # 1000 s running
    stopping = operate(host, OrderKind.STOP, run_tasks=False)
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPING
    clock.shift(20)
    meter()
    assert finish(stopping).state == InstanceState.STOPPED  # at 1020 s
    clock.shift(2000)
    starting = operate(host, OrderKind.START, run_tasks=False)  # at 3020 s
    clock.shift(5)
    assert finish(starting).state == InstanceState.RUNNING  # at 3025 s
    clock.shift(1200)
    operate(host, OrderKind.RESIZE, flavor=world.flavors[2])  # at 4225 s, done at once
    clock.shift(300)
    meter()
    clock.shift(300)
    releasing = operate(host, OrderKind.RELEASE, run_tasks=False)  # at 4825 s
    clock.shift(30)
    assert finish(releasing).state == InstanceState.RELEASED  # at 4855 s
    meter()

    compute = meters(host, COMPUTE)
    assert [(m.hourly_minor, m.compute_units) for m in compute] == [
        (1000, Decimal("3.12")),
        (1000, Decimal("3.12")),
        (2000, Decimal("6.24")),
    ]
    assert [recorded(m) for m in compute] == [(1000, 278), (1200, 333), (600, 333)]
    bandwidth = meters(host, BANDWIDTH)
    assert [recorded(m) for m in bandwidth] == [(1000, 1), (1200, 1), (600, 1)]  # 0.5 -> 1
    (disk,) = meters(host, DISK)  # one meter: nothing about the disk changed
    assert recorded(disk) == (4855, 7)  # 6.74
    assert (seconds_of(host, COMPUTE), seconds_of(host, BANDWIDTH)) == (2800, 2800)
    assert all(m.ended_at is not None for m in Meter.objects.filter(workload__instance=host))
    for m in Meter.objects.filter(workload__instance=host):
        assert (m.metered_seconds, m.metered_minor) == recorded(m)
        assert m.metered_until == m.ended_at

    total = 278 + 333 + 333 + 1 + 1 + 1 + 7
    assert (
        UsageRecord.objects.filter(workload__instance=host).aggregate(a=Sum("amount_minor"))["a"]
        == total
    )
    charges = LedgerEntry.objects.filter(kind=EntryKind.CHARGE)
    assert charges.aggregate(a=Sum("amount_minor"))["a"] == -total
    host.organization.wallet.refresh_from_db()
    assert host.organization.wallet.balance_minor == FUNDED_BALANCE_MINOR - total
    assert host.organization.wallet.held_minor == 0  # the hold was used, the rest given back


def test_compute_unit_milliseconds(clock, world, running_host, operate, meter):
    host = running_host(1)
    clock.shift(1000)
    operate(host, OrderKind.RESIZE, flavor=world.flavors[4])
    clock.shift(600)
    meter()
    units = dict(
        UsageRecord.objects.filter(workload__instance=host)
        .values_list("meter__compute_units")
        .annotate(s=Sum("compute_unit_milliseconds"))
    )
    assert units == {Decimal("3.12"): 3_120_000, Decimal("12.48"): 7_488_000}


def test_records_of_a_meter_add_up_to_its_rounded_total(clock, world, running_host, meter):
    """Metering every second: each second is 0.28 fen, so rounding each pass would charge
    nothing; the running total (0, 1, 1, 1, 1, 2, 2, 2, 3: 2.5 rounds up) charges its steps,
    each pass adding its step to the day's record."""
    host = running_host(1)
    day = []
    for _second in range(9):
        clock.shift(1)
        meter()
        (record,) = UsageRecord.objects.filter(workload__instance=host)
        day.append((record.seconds, record.amount_minor))
    assert day == [(n, metering.amount_for(Decimal(1000), n)) for n in range(1, 10)]
    assert [amount for _seconds, amount in day] == [0, 1, 1, 1, 1, 2, 2, 2, 3]
    assert [e.amount_minor for e in LedgerEntry.objects.order_by("pk")] == [-1] * 3


def test_the_rate_is_rounded_once_per_meter_not_per_kind(clock, world, running_host, meter):
    """7 GB of disk is 0.35 an hour: 1.5 hours cost 0.525 -> 1 (0.26 after the first pass rounds
    to 0), metered in two passes into the day's record."""
    host = running_host(1, data_disk_gb=7)
    clock.shift(2700)
    meter()
    clock.shift(2700)
    meter()
    (disk,) = meters(host, DISK)
    assert [(r.seconds, r.amount_minor) for r in disk.records.all()] == [(5400, 1)]


def test_a_stopped_host_pays_only_its_disk(clock, world, running_host, operate, meter):
    host = running_host(1, data_disk_gb=100, bandwidth_mbps=3)
    operate(host, OrderKind.STOP)
    clock.shift(7200)
    meter()
    assert set(
        UsageRecord.objects.filter(workload__instance=host).values_list("kind", flat=True)
    ) == {DISK}
    assert recorded(meters(host, DISK)[0]) == (7200, 10)


def test_the_flavor_system_disk_is_included_and_extra_system_disk_billed(
    clock, world, running_host, meter
):
    """The flavor's price includes its 100 GB system disk; 150 GB bills 50 GB (2.5 an hour)."""
    host = running_host(1, system_disk_gb=150)
    (disk,) = meters(host, DISK)
    assert (disk.quantity, disk.hourly_minor) == (50, Decimal("2.5"))
    assert not Meter.objects.filter(workload__instance=running_host(1), kind=DISK).exists()


def test_expand_disk_and_bandwidth_reprice_from_the_change(clock, world, running_host, operate):
    host = running_host(1, data_disk_gb=100, bandwidth_mbps=3)
    clock.shift(60)
    operate(host, OrderKind.EXPAND_DISK, data_disk_gb=200)
    clock.shift(60)
    operate(host, OrderKind.SET_BANDWIDTH, bandwidth_mbps=0)
    assert [(m.quantity, m.hourly_minor, m.ended_at is None) for m in meters(host, DISK)] == [
        (100, 5, False),
        (200, 10, True),
    ]
    assert meters(host, DISK)[0].ended_at - meters(host, DISK)[0].started_at == (
        timezone.timedelta(seconds=60)
    )
    (bandwidth,) = meters(host, BANDWIDTH)  # no bandwidth: no meter
    assert bandwidth.ended_at - bandwidth.started_at == timezone.timedelta(seconds=120)


def test_resize_runs_at_the_price_in_force_when_it_was_ordered(
    clock, world, running_host, operate, meter, finish
):
    host = running_host(1)
    clock.shift(600)
    resize = operate(host, OrderKind.RESIZE, flavor=world.flavors[2], run_tasks=False)
    assert resize.parameters["flavor_hourly_minor"] == 2000
    clock.shift(10)
    # A new price for the size ordered takes effect while the resize is under way.
    PriceFactory(
        region=world.region,
        flavor=world.flavors[2],
        amount_minor=7777,
        effective_from=timezone.now(),
    )
    assert finish(resize).rates["flavor_hour"] == 2000
    clock.shift(1800)
    meter()
    compute = meters(host, COMPUTE)
    assert [(m.hourly_minor, recorded(m)) for m in compute] == [
        (1000, (600, 167)),
        (2000, (1800, 1000)),
    ]


def test_a_later_price_change_does_not_reprice_a_running_host(
    clock, world, running_host, operate, meter
):
    host = running_host(1, data_disk_gb=100, bandwidth_mbps=3)
    clock.shift(60)
    for kind, amount in (("flavor", 5000), ("disk", 72), ("bandwidth", 1440)):
        extra = {"flavor": world.flavors[1]} if kind == "flavor" else {kind: True}
        PriceFactory(
            region=world.region, amount_minor=amount, effective_from=timezone.now(), **extra
        )
    clock.shift(3540)
    meter()
    # Nor does a stop and start: the rates were fixed when the host was ordered.
    operate(host, OrderKind.STOP)
    operate(host, OrderKind.START)
    clock.shift(3600)
    meter()
    assert set(
        Meter.objects.filter(workload__instance=host, kind=COMPUTE).values_list("hourly_minor")
    ) == {(Decimal(1000),)}
    by_kind = dict(
        UsageRecord.objects.filter(workload__instance=host)
        .values_list("kind")
        .annotate(a=Sum("amount_minor"))
    )
    assert by_kind == {COMPUTE: 2000, DISK: 10, BANDWIDTH: 6}
    # A host ordered now pays the new prices.
    assert running_host(1).rates["flavor_hour"] == 5000


def test_records_split_at_local_midnight_on_the_first(travel, world, running_host, meter):
    """Asia/Shanghai: the April invoice starts at 2026-04-01 00:00 +08:00 (31 March 16:00 UTC).
    The second record continues the meter's running total: 1808 s are 502.2 -> 502, so it
    charges 2, not the 3 that its own 9 s (2.5) would round to."""
    clock = travel(local(2026, 3, 31, 23, 30, 1))
    host = running_host(1, data_disk_gb=100)
    clock.move_to(local(2026, 4, 1, 0, 0, 9))
    meter()
    midnight = local(2026, 4, 1)
    compute = UsageRecord.objects.filter(workload__instance=host, kind=COMPUTE).order_by(
        "started_at"
    )
    assert [(r.started_at, r.ended_at, r.seconds, r.amount_minor) for r in compute] == [
        (local(2026, 3, 31, 23, 30, 1), midnight, 1799, 500),
        (midnight, local(2026, 4, 1, 0, 0, 9), 9, 2),
    ]
    disk = UsageRecord.objects.filter(workload__instance=host, kind=DISK).order_by("started_at")
    assert [(r.ended_at, r.seconds) for r in disk] == [(midnight, 1799), (compute[1].ended_at, 9)]
    assert midnight.isoformat() == "2026-04-01T00:00:00+08:00"
    assert metering.month_start(local(2026, 4, 1, 0, 0, 9)) == midnight


def test_a_long_gap_is_split_at_every_midnight(travel, world, running_host, meter):
    """A record a day (the park's), so each month's records are the invoice's."""
    clock = travel(local(2026, 3, 31, 12))
    host = running_host(1)
    clock.move_to(local(2026, 5, 1, 6))
    meter()
    records = UsageRecord.objects.filter(workload__instance=host).order_by("started_at")
    assert [(r.day, r.started_at, r.seconds, r.amount_minor) for r in records] == [
        (date(2026, 3, 31), local(2026, 3, 31, 12), 12 * 3600, 12_000),
        *[(date(2026, 4, d), local(2026, 4, d), 24 * 3600, 24_000) for d in range(1, 31)],
        (date(2026, 5, 1), local(2026, 5, 1), 6 * 3600, 6000),
    ]


def test_a_sub_second_interval_waits_for_the_next_run(clock, world, running_host, meter):
    host = running_host(1)
    clock.shift(0.4)
    meter()
    assert not UsageRecord.objects.filter(workload__instance=host).exists()
    clock.shift(0.7)  # 1.1 s since the start
    meter()
    (record,) = UsageRecord.objects.filter(workload__instance=host)
    assert record.seconds == 1


def test_a_rate_with_many_decimals_keeps_its_meter_when_nothing_changes(
    clock, world, running_host, operate
):
    """Stopping changes nothing about the disk, so its meter stays open (one meter per
    rate-and-size interval, rounded once)."""
    host = running_host(1, data_disk_gb=100)
    operate(host, OrderKind.STOP)
    operate(host, OrderKind.START)
    assert len(meters(host, DISK)) == 1


def test_a_rate_with_more_than_six_decimals_keeps_its_meter(clock, world, running_host, operate):
    PriceFactory(region=world.region, disk=True, amount_minor=35, effective_from=timezone.now())
    host = running_host(1, data_disk_gb=1)
    clock.shift(10)
    operate(host, OrderKind.STOP)
    clock.shift(10)
    operate(host, OrderKind.START)
    assert len(meters(host, DISK)) == 1


def test_a_task_is_metered_while_running(clock, world, meter):
    from tests.factories import TaskFactory

    task = TaskFactory(
        organization=world.organization,
        image=world.image,
        pool=world.pool,
        accelerator_milli=500,
        hourly_minor=600,
        state="running",
    )
    follow_task(task)
    clock.shift(90)
    metering.known_to_run(task.workload_id, until=timezone.now())  # its backend says it runs
    meter()
    (record,) = UsageRecord.objects.filter(workload__task=task)
    assert (record.kind, record.seconds, record.amount_minor) == (MeterKind.TASK, 90, 15)
    assert record.compute_unit_milliseconds == 140_400  # 3.12 × 0.5 × 90 s × 1000


def test_a_task_is_billed_no_further_than_its_backend_said_it_ran(clock, world, meter):
    """Its backend's answers, not the portal's clock, say how long a task ran: while the backend
    is silent (an outage, a poll not yet made) the meter waits at the last time it said the task
    ran, and the end it reports later is what is billed, not when the portal learned of it."""
    from tests.factories import TaskFactory

    task = TaskFactory(
        organization=world.organization,
        image=world.image,
        pool=world.pool,
        accelerator_milli=1000,
        hourly_minor=3600,  # 1 fen a second
        state="running",
    )
    started = timezone.now()
    follow_task(task, at=started)
    clock.shift(30)
    metering.known_to_run(task.workload_id, until=timezone.now())
    clock.shift(90)  # the backend is silent: the task ended 10 s after it last answered
    meter()
    assert recorded(Meter.objects.get(workload__task=task)) == (30, 30)
    metering.known_to_run(task.workload_id, until=started)  # an older answer moves nothing
    task.state = "succeeded"
    task.save(update_fields=["state"])
    follow_task(task, at=started + timezone.timedelta(seconds=40))  # the end it reports
    meter()
    assert recorded(Meter.objects.get(workload__task=task)) == (40, 40)


def test_a_days_record_is_extended_by_each_pass_until_it_is_invoiced(
    clock, world, running_host, meter
):
    """Use of a day learned after its record was invoiced is a record of its own, for the
    next invoice: an invoice's total never changes under it."""
    host = running_host(1)
    clock.shift(1800)
    meter()
    clock.shift(1800)
    meter()
    (record,) = UsageRecord.objects.filter(workload__instance=host)
    assert (record.seconds, record.amount_minor) == (3600, 1000)
    invoice = InvoiceFactory(organization=host.organization)
    UsageRecord.objects.filter(pk=record.pk).update(invoice=invoice)
    clock.shift(60)
    meter()
    records = UsageRecord.objects.filter(workload__instance=host).order_by("started_at")
    assert [(r.invoice_id, r.day, r.seconds, r.amount_minor) for r in records] == [
        (invoice.pk, record.day, 3600, 1000),
        (None, record.day, 60, 17),
    ]


def test_fold_usage_writes_each_value_as_given_and_folds_a_meters_day(world):
    """Times to the microsecond and rates to six places, as the records read them back, on
    either database (SQLite takes them as Django writes them)."""
    from tests.factories import MeterFactory

    start = local(2026, 3, 10, 10)
    meter = MeterFactory(organization=world.organization, started_at=start)

    def row(n, *, day):
        return metering.UsageRow(
            organization_id=meter.organization_id,
            meter_id=meter.pk,
            kind=meter.kind,
            workload_id=meter.workload_id,
            started_at=start + timedelta(days=n, microseconds=n),
            ended_at=start + timedelta(days=n, minutes=1, microseconds=5),
            seconds=60,
            compute_unit_milliseconds=60_000 * n,
            hourly_minor=Decimal("2500.123456"),
            amount_minor=n,
            currency="CNY",
            day=day,
        )

    metering.fold_usage([row(0, day=date(2026, 3, 10)), row(1, day=date(2026, 3, 11))])
    fields = [*metering.UsageRow._fields]
    written = UsageRecord.objects.order_by("started_at").values_list(*fields)
    assert [metering.UsageRow(*r) for r in written] == [
        row(0, day=date(2026, 3, 10)),
        row(1, day=date(2026, 3, 11)),
    ]
    later = row(1, day=date(2026, 3, 11))._replace(
        started_at=start + timedelta(days=1, minutes=1, microseconds=5),
        ended_at=start + timedelta(days=1, minutes=2),
    )
    metering.fold_usage([later])
    second = UsageRecord.objects.get(day=date(2026, 3, 11))
    assert (second.started_at, second.ended_at, second.seconds, second.amount_minor) == (
        start + timedelta(days=1, microseconds=1),
        start + timedelta(days=1, minutes=2),
        120,
        2,
    )
    assert second.compute_unit_milliseconds == 120_000
