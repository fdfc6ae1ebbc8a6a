"""Capacity samples: one per pool every few minutes, what the operator overview's utilization
and energy charts draw (`apps.orchestration.tasks.sample_capacity`)."""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.orchestration.models import Accelerator, CapacitySample, Node, Pool
from apps.orchestration.services import IDLE_BELOW_PCT, TELEMETRY_FRESH_FOR

SAMPLES_KEPT_FOR = timedelta(days=90)


@transaction.atomic
def sample_capacity(*, now=None) -> list[CapacitySample]:
    """One sample per pool, at the minute (a second run in the same minute adds nothing):
    accelerators total and allocated, how many of the allocated read idle, their mean measured
    utilization, and the estimated power of the allocated ones (count × TDP × PUE)."""
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
    for pool_id, node_id, index in held:
        node_telemetry = telemetry.get(node_id) or {}
        updated = parse_datetime(node_telemetry.get("updated_at") or "")
        if updated is None or now - updated > TELEMETRY_FRESH_FOR:
            continue
        reading = (node_telemetry.get("accelerators") or {}).get(str(index))
        if reading and reading.get("util") is not None:
            readings.setdefault(pool_id, []).append(float(reading["util"]))
    samples = []
    for pool in pools:
        utils = readings.get(pool.pk, [])
        watts = Decimal(pool.allocated * pool.accelerator_model.tdp_w) * pool.pue
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
    return samples
