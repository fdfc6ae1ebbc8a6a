"""Meters follow what instances and tasks hold; metering turns them into usage records.

Which meters an instance or a task needs in each state is said by the app that owns it
(`apps.orders.meters`, `apps.orchestration.meters`); both keep them with `reconcile`.

Rounding, stated once: a meter's charge up to a moment is its hourly rate × the whole seconds
since it opened ÷ 3600, rounded half up to the minor unit. Each usage record carries the increase
of that running total, so the records of one meter add up to exactly its rounded total however
often metering runs, and an invoice's total (tax included) is the sum of its records.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from typing import NamedTuple

from django.db import connection, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from apps.billing.models import Meter, MonthlySpend, UsageRecord
from apps.core.bulk import update_rows
from apps.core.sql import fetch_all
from apps.core.transactions import in_transaction

HOURS_PER_MONTH = 720  # prices per month are per 30 days, as the catalog states them


def amount_for(hourly_minor: Decimal, seconds: int) -> int:
    exact = Decimal(hourly_minor) * seconds / 3600
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def billed_disk_gb(*, flavor, system_disk_gb: int, data_disk_gb: int) -> int:
    """Cloud disk beyond what the flavor's price includes (its standard system disk)."""
    return data_disk_gb + max(0, system_disk_gb - flavor.system_disk_gb)


RATE_PLACES = Decimal("0.000001")  # Meter.hourly_minor's precision


@dataclass(frozen=True)
class MeterSpec:
    kind: str
    quantity: int
    hourly_minor: Decimal
    compute_units: Decimal = Decimal(0)

    def __post_init__(self):
        # Stored to six places: compare like with like, or every change reopens the meter.
        object.__setattr__(self, "hourly_minor", self.hourly_minor.quantize(RATE_PLACES))

    def matches(self, meter: Meter) -> bool:
        return (meter.quantity, meter.hourly_minor, meter.compute_units) == (
            self.quantity,
            self.hourly_minor,
            self.compute_units,
        )


@in_transaction
def reconcile(meters, *, specs, new, currency, at) -> None:
    """Close the open `meters` (one subject's) that no longer match `specs`, and open the ones
    missing, with `new`'s fields (the organization and the instance or task they measure).
    `meters` None: the subject was created in this transaction and has none (not asked)."""
    wanted = {spec.kind: spec for spec in specs}
    open_meters = (
        []
        if meters is None
        else meters.select_for_update(no_key=True).filter(ended_at__isnull=True)
    )
    for meter in open_meters:
        spec = wanted.get(meter.kind)
        if spec is not None and spec.matches(meter):
            del wanted[meter.kind]
        else:
            meter.ended_at = max(at, meter.metered_until)
            meter.save(update_fields=["ended_at"])
    for spec in wanted.values():
        Meter.objects.create(
            **new,
            kind=spec.kind,
            quantity=spec.quantity,
            hourly_minor=spec.hourly_minor,
            compute_units=spec.compute_units,
            currency=currency,
            started_at=at,
            metered_until=at,
        )


def known_to_run(workload_id: int, *, until: datetime) -> None:
    """The backend has said the workload still ran at `until`: its open meters that follow
    what the backend says (`Meter.known_until`) may be measured up to there."""
    Meter.objects.filter(
        workload_id=workload_id, ended_at__isnull=True, known_until__lt=until
    ).update(known_until=until)


# --- Metering: meters into usage records ----------------------------------------------------


def month_start(moment: datetime) -> datetime:
    local = timezone.localtime(moment)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(moment: datetime) -> datetime:
    start = month_start(moment)
    return month_start(start + timedelta(days=32))


def day_start(moment: datetime) -> datetime:
    """Midnight before `moment` in the current time zone (the park's)."""
    return timezone.localtime(moment).replace(hour=0, minute=0, second=0, microsecond=0)


@lru_cache(maxsize=64)
def _day_after(moment: datetime, zone: tzinfo) -> datetime:
    """The midnight after `moment` in `zone`, remembered: a pass asks it of the same few
    watermarks for every meter."""
    with timezone.override(zone):
        return day_start(day_start(moment) + timedelta(hours=36))


def _slices(start: datetime, end: datetime, zone: tzinfo):
    """[start, end) cut at midnight in `zone`: each record is of one day, so of one invoice."""
    while start < end:
        cut = min(end, _day_after(start, zone))
        yield start, cut
        start = cut


class UsageRow(NamedTuple):
    """A UsageRecord to write, without the cost of a model instance (a pass writes thousands)."""

    organization_id: int
    meter_id: int
    kind: str
    workload_id: int
    started_at: datetime
    ended_at: datetime
    seconds: int
    compute_unit_milliseconds: int
    hourly_minor: Decimal
    amount_minor: int
    currency: str
    day: date


@dataclass(slots=True)
class DueMeter:
    """What metering reads and advances of a Meter: a plain row, as a pass reads thousands and
    a model instance costs more to make than measuring it does."""

    id: int
    organization_id: int
    workload_id: int
    kind: str
    hourly_minor: Decimal
    compute_units: Decimal
    currency: str
    started_at: datetime
    ended_at: datetime | None
    known_until: datetime | None
    metered_until: datetime
    metered_seconds: int
    metered_minor: int


def _measure(meter: DueMeter, until: datetime, zone: tzinfo) -> list[UsageRow]:
    """Advance `meter` to `until` (or its end, or as far as it is known to run), returning the
    records for what it measured, a record a day; days begin in `zone` (the park's, the current
    time zone)."""
    end = min(meter.ended_at or meter.known_until or until, until)
    records = []
    for start, cut in _slices(meter.metered_until, end, zone):
        seconds_total = int((cut - meter.started_at).total_seconds())
        seconds = seconds_total - meter.metered_seconds
        meter.metered_until = cut
        if seconds <= 0:  # a fraction of a second: it counts in the next slice
            continue
        amount_total = amount_for(meter.hourly_minor, seconds_total)
        records.append(
            UsageRow(
                organization_id=meter.organization_id,
                meter_id=meter.id,
                kind=meter.kind,
                workload_id=meter.workload_id,
                started_at=start,
                ended_at=cut,
                seconds=seconds,
                compute_unit_milliseconds=int(meter.compute_units * seconds * 1000),
                hourly_minor=meter.hourly_minor,
                amount_minor=amount_total - meter.metered_minor,
                currency=meter.currency,
                day=timezone.localtime(start, zone).date(),
            )
        )
        meter.metered_seconds, meter.metered_minor = seconds_total, amount_total
    return records


def due(meters):
    """Meters metering still owes: open ones, and closed ones not yet measured to their end (the
    condition of the partial index `meter_due`, which keeps this quick however long the closed
    meters' history grows)."""
    return meters.filter(Q(ended_at__isnull=True) | Q(metered_until__lt=F("ended_at")))


# Meters metered in one transaction: enough that a pass makes few round trips, few enough that
# the wallets it locks are not held from new orders for long.
METERS_PER_TRANSACTION = 1000


def organization_groups_due(*, meters_per_group: int | None = None) -> list[list[int]]:
    """The organizations with meters due, in groups of about `meters_per_group` meters
    (METERS_PER_TRANSACTION) to meter together; an organization is never split, so that each
    pass charges it once."""
    meters_per_group = meters_per_group or METERS_PER_TRANSACTION
    counts = (
        due(Meter.objects.all())
        .values_list("organization_id")
        .annotate(meters=Count("pk"))
        .order_by("organization_id")
    )
    groups, group, in_group = [], [], 0
    for organization_id, meters in counts:
        if group and in_group + meters > meters_per_group:
            groups.append(group)
            group, in_group = [], 0
        group.append(organization_id)
        in_group += meters
    if group:
        groups.append(group)
    return groups


@dataclass(frozen=True)
class Metered:
    charged_minor: int
    records: int
    # The organizations whose balance now calls for a warning, its withdrawal or a stop, and
    # those with a monthly spend limit: what services.enforce_balance and enforce_spend_quota
    # are for.
    balances_to_enforce: list[int]
    spend_limited: list[int]


@dataclass
class Tally:
    """What a pass measured of a group: the amounts to charge by organization and by workload
    (a host's charges use its hold first), the records written, and each organization's
    open meters' hourly rates (the burn rate its balance is judged by)."""

    amounts: defaultdict = field(default_factory=lambda: defaultdict(int))
    by_workload: defaultdict = field(default_factory=lambda: defaultdict(int))
    burn_rates: defaultdict = field(default_factory=lambda: defaultdict(Decimal))
    records: int = 0


def meter_organization(organization_id: int, *, until: datetime) -> int:
    """Record and charge everything `organization_id` used up to `until`; returns the amount."""
    return meter_organizations([organization_id], until=until).charged_minor


@transaction.atomic
def meter_organizations(organization_ids: list[int], *, until: datetime) -> Metered:
    """Record and charge everything the organizations used up to `until`, in one transaction
    and a fixed number of queries however many meters they have.

    Locks their wallets (in organization order) and then their due meters: running it twice,
    concurrently, or again after a crash never records a second of use twice, as the second
    run waits for the first and measures from where it left off.

    On PostgreSQL, once they are locked, one statement measures, advances and records every
    meter whose unmetered use lies within `until`'s day (all of them, but in a day's first
    pass): the pass costs its SQL, not a Python object per meter. The others, and every meter
    on SQLite, are measured one by one, cut at midnight."""
    from apps.billing.services import (
        balance_needs_enforcing,
        charge_wallets,
        locked_holds,
        locked_wallets,
        spend_limited,
    )

    wallets = locked_wallets(organization_ids)
    holds = locked_holds(wallets)
    tally = Tally()
    due_meters = due(Meter.objects.filter(organization_id__in=organization_ids))
    if connection.vendor == "postgresql":
        # Ordered as reconcile locks a subject's meters, so that the two never deadlock.
        locked = due_meters.order_by("started_at", "pk").select_for_update(no_key=True)
        today = day_start(until)
        _measure_in_sql(
            list(locked.values_list("pk", flat=True)), until=until, today=today, tally=tally
        )
        # What is left to measure is owed since before today (locked already).
        earlier = due_meters.filter(metered_until__lt=today)
        _measure_in_python(earlier, until=until, tally=tally, burn_rates=False)
    else:
        _measure_in_python(due_meters, until=until, tally=tally, burn_rates=True)
    charge_wallets(wallets, holds=holds, amounts=tally.amounts, by_workload=tally.by_workload)
    return Metered(
        charged_minor=sum(tally.amounts.values()),
        records=tally.records,
        balances_to_enforce=[
            wallet.organization_id
            for wallet in wallets
            if balance_needs_enforcing(wallet, burn_rate=tally.burn_rates[wallet.organization_id])
        ],
        spend_limited=spend_limited(organization_ids),
    )


def _measure_in_python(due_meters, *, until: datetime, tally: Tally, burn_rates: bool):
    """Measure `due_meters` one by one, and add their open ones' rates to the tally's burn
    rates if `burn_rates` (unless _measure_in_sql counted them)."""
    # Ordered as reconcile locks a subject's meters, so that the two never deadlock.
    meters = [
        DueMeter(*row)
        for row in due_meters.order_by("started_at", "pk")
        .select_for_update(no_key=True)
        .values_list(*DueMeter.__slots__)
    ]
    zone = timezone.get_current_timezone()
    records, advanced = [], []
    for meter in meters:
        watermark = meter.metered_until
        measured = _measure(meter, until, zone)
        if meter.metered_until != watermark:
            advanced.append(meter)
        records.extend(measured)
        for record in measured:
            tally.amounts[meter.organization_id] += record.amount_minor
            tally.by_workload[record.workload_id] += record.amount_minor
        if burn_rates and meter.ended_at is None:
            tally.burn_rates[meter.organization_id] += meter.hourly_minor
    update_rows(Meter, advanced, ["metered_until", "metered_seconds", "metered_minor"])
    fold_usage(records)
    spent = defaultdict(int)
    for record in records:
        spent[record.organization_id, record.day.replace(day=1)] += record.amount_minor
    add_monthly_spend(spent)
    tally.records += len(records)


# A meter's use of a day is one record, which each pass of the day extends: the records of a
# park grow by its meters each day, not each pass (a pass a minute wrote 1,440 a meter a day,
# which every page summing a month of them read). An invoiced record is never extended: use of
# its day learned later (a backend's clock, an outage) is a record of its own, for the next.
FOLD = """
    ON CONFLICT (meter_id, day) WHERE invoice_id IS NULL DO UPDATE SET
        ended_at = excluded.ended_at,
        seconds = billing_usagerecord.seconds + excluded.seconds,
        compute_unit_milliseconds = billing_usagerecord.compute_unit_milliseconds
            + excluded.compute_unit_milliseconds,
        amount_minor = billing_usagerecord.amount_minor + excluded.amount_minor
"""


def fold_usage(records: list[UsageRow]) -> None:
    """Write `records`, each into its meter's record of its day (a new one if none is open)."""
    columns = ", ".join(UsageRow._fields)
    row = f"({', '.join(['%s'] * len(UsageRow._fields))})"
    per_statement = 60_000 // len(UsageRow._fields)  # PostgreSQL takes 65,535 parameters
    values = [value for record in records for value in record]
    if connection.vendor != "postgresql":  # SQLite takes times and decimals as Django wrote them
        fields = [UsageRecord._meta.get_field(name) for name in UsageRow._fields]
        values = [
            field.get_db_prep_save(value, connection)
            for record in records
            for field, value in zip(fields, record, strict=True)
        ]
    width = len(UsageRow._fields)
    with connection.cursor() as cursor:
        for start in range(0, len(records), per_statement):
            batch = values[start * width : (start + per_statement) * width]
            cursor.execute(
                f"INSERT INTO billing_usagerecord ({columns}) "
                f"VALUES {', '.join([row] * (len(batch) // width))} {FOLD}",
                batch,
            )


def add_monthly_spend(amounts: dict[tuple[int, date], int]) -> None:
    """Add `amounts` (minor units by organization id and month's first day) to MonthlySpend, in
    one statement; in order, as two passes over the same organizations lock its rows."""
    if not amounts:
        return
    table = MonthlySpend._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (organization_id, month, amount_minor) "
            f"VALUES {', '.join(['(%s, %s, %s)'] * len(amounts))} "
            "ON CONFLICT (organization_id, month) DO UPDATE "
            f"SET amount_minor = {table}.amount_minor + excluded.amount_minor",
            [
                value
                for (organization_id, month), amount in sorted(amounts.items())
                for value in (organization_id, month, amount)
            ],
        )


# `_measure` in one PostgreSQL statement, over meters already locked (`ids`), of which it
# measures those whose unmetered use lies within today (from midnight, `since`, on): it advances
# them to `until` (or their end, or as far as they are known to run), folds their use into
# their records of today and
# answers, per organization and workload, the amount recorded, the records written and the open
# meters' hourly rates (all of `ids`').
# The arithmetic is _measure's, exact in numeric: whole seconds since the meter opened, its
# running total rounded half up (floor((2 × rate × seconds + 3600) / 7200)), each record the
# increase of that total; a fraction of a second moves the watermark and waits for the next.
# Each organization's MonthlySpend grows by what its records add up to.
MEASURE_SQL = (
    """
WITH due AS MATERIALIZED (
    SELECT id, organization_id, workload_id, kind, hourly_minor, compute_units,
        currency, started_at, ended_at, known_until, metered_until, metered_seconds,
        metered_minor
    FROM billing_meter
    WHERE id = ANY(%(ids)s)
), reached AS (
    SELECT due.*, LEAST(COALESCE(ended_at, known_until, %(until)s), %(until)s) AS reached_at
    FROM due
    WHERE metered_until >= %(since)s
), totals AS (
    SELECT reached.*,
        FLOOR(EXTRACT(EPOCH FROM reached_at) - EXTRACT(EPOCH FROM started_at))::bigint
            AS seconds_total
    FROM reached
    WHERE metered_until < reached_at
), measured AS MATERIALIZED (
    SELECT totals.*, seconds_total - metered_seconds AS seconds,
        DIV(2 * hourly_minor * seconds_total + 3600, 7200)::bigint AS minor_total
    FROM totals
), advanced AS (
    UPDATE billing_meter AS meter
    SET metered_until = measured.reached_at,
        metered_seconds = CASE WHEN measured.seconds > 0 THEN measured.seconds_total
            ELSE meter.metered_seconds END,
        metered_minor = CASE WHEN measured.seconds > 0 THEN measured.minor_total
            ELSE meter.metered_minor END
    FROM measured
    WHERE meter.id = measured.id
), recorded AS (
    INSERT INTO billing_usagerecord (organization_id, meter_id, kind, workload_id,
        started_at, ended_at, seconds, compute_unit_milliseconds, hourly_minor, amount_minor,
        currency, day)
    SELECT organization_id, id, kind, workload_id, metered_until, reached_at, seconds,
        TRUNC(compute_units * seconds * 1000)::bigint, hourly_minor,
        minor_total - metered_minor, currency, %(today)s
    FROM measured
    WHERE seconds > 0
    ORDER BY id
"""
    + FOLD
    + """
), spent AS (
    INSERT INTO billing_monthlyspend (organization_id, month, amount_minor)
    SELECT organization_id, %(month)s, SUM(minor_total - metered_minor)
    FROM measured
    WHERE seconds > 0
    GROUP BY organization_id
    ORDER BY organization_id
    ON CONFLICT (organization_id, month) DO UPDATE
    SET amount_minor = billing_monthlyspend.amount_minor + EXCLUDED.amount_minor
)
SELECT due.organization_id, due.workload_id,
    COALESCE(SUM(measured.minor_total - measured.metered_minor)
        FILTER (WHERE measured.seconds > 0), 0)::bigint,
    COUNT(*) FILTER (WHERE measured.seconds > 0),
    COALESCE(SUM(due.hourly_minor) FILTER (WHERE due.ended_at IS NULL), 0)
FROM due LEFT JOIN measured ON measured.id = due.id
GROUP BY due.organization_id, due.workload_id
"""
)


def _measure_in_sql(ids: list[int], *, until: datetime, today: datetime, tally: Tally):
    day = timezone.localtime(today).date()
    rows = fetch_all(
        Meter,
        MEASURE_SQL,
        {"ids": ids, "until": until, "since": today, "today": day, "month": day.replace(day=1)},
    )
    for organization_id, workload_id, amount, records, burn_rate in rows:
        tally.amounts[organization_id] += amount
        if amount:
            tally.by_workload[workload_id] += amount
        tally.records += records
        tally.burn_rates[organization_id] += burn_rate
