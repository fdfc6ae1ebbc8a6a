"""Capacity samples: one per pool every few minutes, what the operator overview's utilization
and energy charts draw (`apps.orchestration.tasks.sample_capacity`).

Samples older than a day are rolled up into one per pool and hour, so a chart of the last 30
days reads about 720 samples per pool instead of 8,640 (issue 15: the overview grew with them)."""

from datetime import UTC, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction
from django.db.models import Avg, Count, Q
from django.db.models.functions import TruncHour
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.orchestration.models import Accelerator, CapacitySample, Node, Pool
from apps.orchestration.services import IDLE_BELOW_PCT, TELEMETRY_FRESH_FOR

SAMPLES_KEPT_FOR = timedelta(days=90)
RAW_SAMPLES_KEPT_FOR = timedelta(hours=24)  # the 24 h chart draws every sample
# How far back each run looks for hours still to roll up: beat runs the job every few minutes,
# so only a sampler stopped for longer than this leaves raw hours behind (the charts still read
# them, a little slower).
ROLL_UP_LOOKS_BACK = timedelta(days=7)


@transaction.atomic
def sample_capacity(*, now=None) -> list[CapacitySample]:
    """One sample per pool, at the minute (a second run in the same minute adds nothing):
    accelerators total and allocated, how many of the allocated read idle, their mean measured
    utilization, and the power of the allocated ones × PUE: measured where fresh telemetry
    has it (the host agent's), else their TDP."""
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    pools = list(
        Pool.objects.select_related("backend", "accelerator_model")
        .annotate(
            total=Count("nodes__accelerators"),
            allocated=Count(
                "nodes__accelerators", filter=Q(nodes__accelerators__allocation__isnull=False)
            ),
        )
        .order_by("pk")
    )
    held = list(
        Accelerator.objects.filter(allocation__isnull=False).values_list(
            "node__pool_id", "node_id", "index"
        )
    )
    telemetry = dict(
        Node.objects.filter(pk__in={node for _pool, node, _i in held}).values_list(
            "pk", "telemetry"
        )
    )
    readings: dict[int, list[float]] = {}
    measured: dict[int, list[float]] = {}  # pool id -> the power its servers measured, W
    for pool_id, node_id, index in held:
        node_telemetry = telemetry.get(node_id) or {}
        updated = parse_datetime(node_telemetry.get("updated_at") or "")
        if updated is None or now - updated > TELEMETRY_FRESH_FOR:
            continue
        reading = (node_telemetry.get("accelerators") or {}).get(str(index))
        if reading and reading.get("util") is not None:
            readings.setdefault(pool_id, []).append(float(reading["util"]))
        if reading and reading.get("power_w") is not None:
            measured.setdefault(pool_id, []).append(float(reading["power_w"]))
    samples = []
    for pool in pools:
        utils = readings.get(pool.pk, [])
        # Measured power where the backend reports it (the host agent does), TDP for the rest.
        power = measured.get(pool.pk, [])
        estimated = max(0, pool.allocated - len(power)) * pool.accelerator_model.tdp_w
        watts = (Decimal(str(sum(power))) + Decimal(estimated)) * pool.pue
        samples.append(
            CapacitySample(
                park_id=pool.backend.park_id,
                pool=pool,
                taken_at=now,
                accelerators_total=pool.total,
                accelerators_allocated=pool.allocated,
                accelerators_idle=sum(1 for u in utils if u < IDLE_BELOW_PCT),
                utilization_pct=(
                    Decimal(sum(utils) / len(utils)).quantize(Decimal("0.1")) if utils else None
                ),
                watts=int(watts.quantize(Decimal(1), rounding=ROUND_HALF_UP)),
            )
        )
    CapacitySample.objects.bulk_create(samples, ignore_conflicts=True)
    CapacitySample.objects.filter(taken_at__lt=now - SAMPLES_KEPT_FOR).delete()
    roll_up_samples(now=now)
    return samples


@transaction.atomic
def roll_up_samples(*, now) -> int:
    """Every pool's samples of each whole hour older than RAW_SAMPLES_KEPT_FOR become one sample
    at the start of the hour with the hour's means (power too, so the energy a chart integrates
    over the hour stays the same). Idempotent: a rolled-up hour is one sample, left as it is.
    Returns how many hours were rolled up."""
    cutoff = (now - RAW_SAMPLES_KEPT_FOR).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    window = CapacitySample.objects.filter(
        taken_at__gte=cutoff - ROLL_UP_LOOKS_BACK, taken_at__lt=cutoff
    )
    hours = list(
        window.annotate(hour=TruncHour("taken_at", tzinfo=UTC))
        .values("park", "pool", "hour")
        .annotate(
            samples=Count("id"),
            total=Avg("accelerators_total"),
            allocated=Avg("accelerators_allocated"),
            idle=Avg("accelerators_idle"),
            util=Avg("utilization_pct"),
            watts=Avg("watts"),
        )
        .order_by()
    )
    raw = [hour["hour"] for hour in hours if hour["samples"] > 1]
    if not raw:
        return 0
    # From the first hour with raw samples on, every hour is written again: the rolled-up ones
    # come out as they were, and one delete by time covers the lot.
    first = min(raw)
    hours = [hour for hour in hours if hour["hour"] >= first]
    window.filter(taken_at__gte=first).delete()
    CapacitySample.objects.bulk_create(
        CapacitySample(
            park_id=hour["park"],
            pool_id=hour["pool"],
            taken_at=hour["hour"],
            accelerators_total=_whole(hour["total"]),
            accelerators_allocated=_whole(hour["allocated"]),
            accelerators_idle=_whole(hour["idle"]),
            utilization_pct=(
                Decimal(hour["util"]).quantize(Decimal("0.1")) if hour["util"] is not None else None
            ),
            watts=_whole(hour["watts"]),
        )
        for hour in hours
    )
    return len(raw)


def _whole(mean) -> int:
    """A mean of counts as a count (half up): allocated and idle stay within the total."""
    return int(Decimal(mean).quantize(Decimal(1), rounding=ROUND_HALF_UP))
