"""What the overview shows: capacity broken down by level, site, pool and vendor, its history
(CapacitySample), the queues and what waits for an operator."""

from dataclasses import dataclass
from datetime import UTC, timedelta
from decimal import Decimal

from django.core.cache import cache
from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Min, Sum
from django.utils import timezone

from apps.orchestration.capacity import RAW_SAMPLES_KEPT_FOR
from apps.orchestration.models import Backend, CapacitySample, Task, TaskState
from apps.orders.models import Order, OrderState

RECENT = timedelta(hours=24)
# A chart's cache key changes with each new sample (every 5 minutes); this only bounds how long
# a key nobody asks for again stays.
CHART_CACHED_FOR = 15 * 60


@dataclass
class CapacityRow:
    label: str
    total: int = 0
    allocated: int = 0

    @property
    def free(self) -> int:
        return self.total - self.allocated

    @property
    def percent(self) -> int:
        return round(100 * self.allocated / self.total) if self.total else 0


def capacity_breakdown(pools) -> dict[str, list[CapacityRow]]:
    """Totals of annotated pools (`pools_with_allocation`) by region level, site and vendor."""
    groups = {"level": {}, "region": {}, "vendor": {}}
    for pool in pools:
        keys = {
            "level": (pool.region.level, pool.region.get_level_display()),
            "region": (pool.region_id, str(pool.region)),
            "vendor": (pool.accelerator_model.vendor, pool.accelerator_model.get_vendor_display()),
        }
        for group, (key, label) in keys.items():
            row = groups[group].setdefault(key, CapacityRow(label=label))
            row.total += pool.total
            row.allocated += pool.allocated
    order = {"center": 0, "province": 1, "edge": 2}
    return {
        "level": [groups["level"][k] for k in sorted(groups["level"], key=lambda k: order[k])],
        "region": sorted(groups["region"].values(), key=lambda row: row.label),
        "vendor": sorted(groups["vendor"].values(), key=lambda row: row.label),
    }


def capacity_chart(parks, *, period: timedelta) -> dict:
    """`capacity_series` of the last `period`, kept in the cache until the parks' next sample
    (the key names the newest one, so a new sample is a new key). Periods past a day are drawn
    by the hour: older samples are hourly anyway (`capacity.roll_up_samples`)."""
    park_ids = sorted(park.pk for park in parks)
    newest = (
        CapacitySample.objects.filter(park__in=park_ids)
        .order_by("-taken_at", "-pk")
        .values_list("taken_at", "pk")
        .first()
    )
    if newest is None:
        return capacity_series(park_ids, since=timezone.now() - period)
    key = "ops:capacity-chart:{parks}:{seconds}:{at}:{pk}".format(
        parks=",".join(map(str, park_ids)),
        seconds=int(period.total_seconds()),
        at=newest[0].isoformat(),
        pk=newest[1],
    )
    return cache.get_or_set(
        key,
        lambda: capacity_series(
            park_ids, since=timezone.now() - period, hourly=period > RAW_SAMPLES_KEPT_FOR
        ),
        timeout=CHART_CACHED_FOR,
    )


def capacity_series(parks, *, since, until=None, hourly: bool = False) -> dict:
    """The samples of the parks summed per moment, as the charts want them: times (ISO),
    allocation and measured utilization in %, estimated power (TDP) and measured power (the
    host agents' meters, where any reports) in kW; and the energy (kWh)
    the allocated accelerators used over the period. `hourly`: one point per hour, the means
    of the hour's moments."""
    samples = CapacitySample.objects.filter(park__in=parks, taken_at__gte=since)
    if until is not None:
        samples = samples.filter(taken_at__lt=until)
    rows = list(
        samples.values("taken_at")
        .annotate(
            total=Sum("accelerators_total"),
            allocated=Sum("accelerators_allocated"),
            idle=Sum("accelerators_idle"),
            watts=Sum("watts"),
            measured_watts=Sum("measured_watts"),
            measured=Sum("measured_accelerators"),
            util=Avg("utilization_pct"),
        )
        .order_by("taken_at")
    )
    if hourly:
        rows = _by_hour(rows)
    energy_wh = Decimal(0)
    for before, after in zip(rows, rows[1:], strict=False):
        hours = Decimal((after["taken_at"] - before["taken_at"]).total_seconds()) / 3600
        energy_wh += Decimal(before["watts"]) * hours
    return {
        "times": [timezone.localtime(row["taken_at"]).isoformat() for row in rows],
        "allocated_pct": [
            round(100 * row["allocated"] / row["total"], 1) if row["total"] else 0 for row in rows
        ],
        "utilization_pct": [
            round(float(row["util"]), 1) if row["util"] is not None else None for row in rows
        ],
        "idle": [row["idle"] for row in rows],
        "power_kw": [round(row["watts"] / 1000, 2) for row in rows],
        # What the host agents' meters read (null where no pool's accelerators report power).
        "measured_kw": [
            round(row["measured_watts"] / 1000, 2) if row["measured_watts"] is not None else None
            for row in rows
        ],
        "measured_accelerators": rows[-1]["measured"] if rows else 0,
        "energy_kwh": round(energy_wh / 1000, 1),
        "points": len(rows),
    }


def _by_hour(rows: list[dict]) -> list[dict]:
    """Moments of the same hour (UTC) as one, at the hour's start, with the hour's means."""
    hours: dict = {}
    for row in rows:
        start = row["taken_at"].astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        hours.setdefault(start, []).append(row)
    merged = []
    for start, moments in hours.items():
        utils = [m["util"] for m in moments if m["util"] is not None]
        measured = [m["measured_watts"] for m in moments if m["measured_watts"] is not None]
        merged.append(
            {
                "taken_at": start,
                "total": _mean([m["total"] for m in moments]),
                "allocated": _mean([m["allocated"] for m in moments]),
                "idle": round(_mean([m["idle"] for m in moments])),
                "watts": _mean([m["watts"] for m in moments]),
                "measured_watts": _mean(measured) if measured else None,
                "measured": round(_mean([m["measured"] for m in moments])),
                "util": _mean(utils) if utils else None,
            }
        )
    return merged


def _mean(values) -> float:
    return float(sum(values)) / len(values)


@dataclass(frozen=True)
class Queue:
    length: int
    longest_wait: timedelta | None
    average_wait: timedelta | None  # of those that left the queue in the last 24 h


def queues(parks, *, now=None) -> dict[str, Queue]:
    """Training tasks waiting for a node, and create orders waiting for an operator."""
    now = now or timezone.now()
    tasks = Task.objects.filter(organization__park__in=parks)
    waiting = tasks.filter(state=TaskState.QUEUED).aggregate(
        n=Count("id"), oldest=Min("submitted_at")
    )
    started = tasks.filter(started_at__gte=now - RECENT).aggregate(
        wait=Avg(
            ExpressionWrapper(F("started_at") - F("submitted_at"), output_field=DurationField())
        )
    )
    orders = Order.objects.filter(organization__park__in=parks)
    pending = orders.filter(state=OrderState.AWAITING_APPROVAL).aggregate(
        n=Count("id"), oldest=Min("created_at")
    )
    decided = orders.filter(decided_at__gte=now - RECENT, decided_by__isnull=False).aggregate(
        wait=Avg(ExpressionWrapper(F("decided_at") - F("created_at"), output_field=DurationField()))
    )
    return {
        "tasks": Queue(
            length=waiting["n"],
            longest_wait=now - waiting["oldest"] if waiting["oldest"] else None,
            average_wait=started["wait"],
        ),
        "approvals": Queue(
            length=pending["n"],
            longest_wait=now - pending["oldest"] if pending["oldest"] else None,
            average_wait=decided["wait"],
        ),
    }


def backends_with_errors(parks):
    return (
        Backend.objects.filter(park__in=parks)
        .exclude(last_error="")
        .select_related("park")
        .order_by("-last_checked_at", "name")
    )
