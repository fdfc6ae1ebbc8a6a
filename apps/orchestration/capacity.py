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


@transaction.atomic(durable=True)
def sample_capacity(*, now=None) -> list[CapacitySample]:
    """One sample per pool, at the minute (a second run in the same minute adds nothing):
    accelerators total and allocated, how many of the allocated read idle, their mean measured
    utilization, the estimated power of the allocated ones (count × TDP × PUE) and, beside it,
    the power the pool's accelerators measured (fresh telemetry with power: the host agent's),
    so the overview shows the estimate against the meters."""
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
    cards = list(
        Accelerator.objects.filter(node__telemetry__has_key="accelerators").values_list(
            "node__pool_id", "node_id", "index", "allocation_id"
        )
    )
    telemetry = dict(
        Node.objects.filter(pk__in={node for _pool, node, _i, _a in cards}).values_list(
            "pk", "telemetry"
        )
    )
    readings: dict[int, list[float]] = {}  # pool id -> utilization of its allocated cards, %
    measured: dict[int, list[float]] = {}  # pool id -> the power its cards measured, W
    for pool_id, node_id, index, allocation_id in cards:
        node_telemetry = telemetry.get(node_id) or {}
        updated = parse_datetime(node_telemetry.get("updated_at") or "")
        if updated is None or now - updated > TELEMETRY_FRESH_FOR:
            continue
        reading = (node_telemetry.get("accelerators") or {}).get(str(index)) or {}
        if allocation_id is not None and reading.get("util") is not None:
            readings.setdefault(pool_id, []).append(float(reading["util"]))
        if reading.get("power_w") is not None:
            measured.setdefault(pool_id, []).append(float(reading["power_w"]))
    samples = []
    for pool in pools:
        utils = readings.get(pool.pk, [])
        watts = Decimal(pool.allocated * pool.accelerator_model.tdp_w) * pool.pue
        power = measured.get(pool.pk)
        measured_watts = Decimal(str(sum(power))) * pool.pue if power else None
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
                watts=_whole(watts),
                measured_watts=_whole(measured_watts) if power else None,
                measured_accelerators=len(power or ()),
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
            measured_watts=Avg("measured_watts"),
            measured=Avg("measured_accelerators"),
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
            measured_watts=(
                _whole(hour["measured_watts"]) if hour["measured_watts"] is not None else None
            ),
            measured_accelerators=_whole(hour["measured"]),
        )
        for hour in hours
    )
    return len(raw)


def _whole(mean) -> int:
    """A mean of counts as a count (half up): allocated and idle stay within the total."""
    return int(Decimal(mean).quantize(Decimal(1), rounding=ROUND_HALF_UP))
