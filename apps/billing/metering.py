"""Meters follow what instances and tasks hold; metering turns them into usage records.

Which meters an instance or a task needs in each state is said by the app that owns it
(`apps.orders.meters`, `apps.orchestration.meters`); both keep them with `reconcile`.

Rounding, stated once: a meter's charge up to a moment is its hourly rate × the whole seconds
since it opened ÷ 3600, rounded half up to the minor unit. Each usage record carries the increase
of that running total, so the records of one meter add up to exactly its rounded total however
often metering runs, and an invoice's total (tax included) is the sum of its records.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.billing.models import Meter, UsageRecord

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


@transaction.atomic
def reconcile(meters, *, specs, new, currency, at) -> None:
    """Close the open `meters` (one subject's) that no longer match `specs`, and open the ones
    missing, with `new`'s fields (the organization and the instance or task they measure)."""
    wanted = {spec.kind: spec for spec in specs}
    for meter in meters.select_for_update(no_key=True).filter(ended_at__isnull=True):
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


# --- Metering: meters into usage records ----------------------------------------------------


def month_start(moment: datetime) -> datetime:
    local = timezone.localtime(moment)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(moment: datetime) -> datetime:
    start = month_start(moment)
    return month_start(start + timedelta(days=32))


def _slices(start: datetime, end: datetime):
    """[start, end) cut at month boundaries (local time), so each record falls in one invoice."""
    while start < end:
        cut = min(end, next_month_start(start))
        yield start, cut
        start = cut


def _measure(meter: Meter, until: datetime) -> list[UsageRecord]:
    """Advance `meter` to `until` (or its end), returning the records for what it measured."""
    end = min(meter.ended_at or until, until)
    records = []
    for start, cut in _slices(meter.metered_until, end):
        seconds_total = int((cut - meter.started_at).total_seconds())
        seconds = seconds_total - meter.metered_seconds
        meter.metered_until = cut
        if seconds <= 0:  # a fraction of a second: it counts in the next slice
            continue
        amount_total = amount_for(meter.hourly_minor, seconds_total)
        records.append(
            UsageRecord(
                organization_id=meter.organization_id,
                meter=meter,
                kind=meter.kind,
                instance_id=meter.instance_id,
                task_id=meter.task_id,
                started_at=start,
                ended_at=cut,
                seconds=seconds,
                compute_unit_milliseconds=int(meter.compute_units * seconds * 1000),
                hourly_minor=meter.hourly_minor,
                amount_minor=amount_total - meter.metered_minor,
                currency=meter.currency,
            )
        )
        meter.metered_seconds, meter.metered_minor = seconds_total, amount_total
    return records


def _due(meters):
    return meters.filter(Q(ended_at__isnull=True) | Q(metered_until__lt=F("ended_at")))


def organizations_due() -> list[int]:
    return sorted(set(_due(Meter.objects.all()).values_list("organization_id", flat=True)))


@transaction.atomic
def meter_organization(organization_id: int, *, until: datetime) -> int:
    """Record and charge everything `organization_id` used up to `until`; returns the amount.

    Runs under the wallet's lock and then each meter's, in one transaction: running it twice,
    concurrently, or again after a crash never records a second of use twice.
    """
    from apps.billing.services import charge, locked_wallet

    wallet = locked_wallet(organization_id)
    meters = _due(Meter.objects.filter(organization_id=organization_id)).select_for_update(
        no_key=True
    )
    records = []
    for meter in meters:
        measured = _measure(meter, until)
        meter.save(update_fields=["metered_until", "metered_seconds", "metered_minor"])
        records.extend(measured)
    UsageRecord.objects.bulk_create(records)
    by_instance = defaultdict(int)
    for record in records:
        if record.instance_id:
            by_instance[record.instance_id] += record.amount_minor
    total = sum(record.amount_minor for record in records)
    charge(wallet, amount_minor=total, by_instance=by_instance)
    return total
