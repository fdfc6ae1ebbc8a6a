"""Pools, capacity samples and the idle policy. Backends and nodes (registration, probing,
draining) are `apps.orchestration.services`' use cases."""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.transactions import lock
from apps.operations.models import CapacitySample, IdlePolicy
from apps.operations.selectors.idle import TELEMETRY_FRESH_FOR
from apps.orchestration.models import Accelerator, Node, Pool
from apps.tenants.access import require_operator

SAMPLES_KEPT_FOR = timedelta(days=90)
POOL_FIELDS = ("region", "pue", "power_price_minor_per_kwh", "carbon_g_per_kwh", "is_schedulable")


@transaction.atomic
def update_pool(*, pool: Pool, operator, **changes) -> Pool:
    """Change a pool's site (and so its level) and energy facts: PUE, power price, carbon."""
    park = Pool.objects.select_related("backend__park").get(pk=pool.pk).backend.park
    require_operator(operator, park, _("Only this park's operators may change its pools."))
    unknown = set(changes) - set(POOL_FIELDS)
    if unknown:
        raise ValueError(f"update_pool cannot change {sorted(unknown)}")
    region = changes.get("region")
    if region is not None and region.park_id != park.pk:
        raise ValidationError({"region": _("This region is not in the park.")})
    lock(Pool, pool.pk)
    pool = Pool.objects.select_related("region").get(pk=pool.pk)
    before = {name: getattr(pool, name) for name in changes}
    for name, value in changes.items():
        setattr(pool, name, value)
    pool.full_clean(exclude=["backend", "accelerator_model", "name"])
    pool.save(update_fields=list(changes))
    diff = {
        name: {"from": _plain(before[name]), "to": _plain(value)}
        for name, value in changes.items()
        if before[name] != value
    }
    if diff:
        record_event(action="pool.updated", actor=operator, target=pool, park=park, data=diff)
    return pool


def _plain(value):
    if hasattr(value, "pk"):
        return str(value)
    return str(value) if isinstance(value, Decimal) else value


@transaction.atomic
def set_idle_policy(*, park, operator, threshold_minutes: int, auto_stop: bool) -> IdlePolicy:
    require_operator(operator, park, _("Only this park's operators may change its policy."))
    policy = IdlePolicy.objects.filter(park=park).first() or IdlePolicy(park=park)
    policy.threshold_minutes, policy.auto_stop = threshold_minutes, auto_stop
    policy.full_clean(exclude=["park"])
    policy.save()
    record_event(
        action="park.idle_policy",
        actor=operator,
        target=park,
        data={"threshold_minutes": threshold_minutes, "auto_stop": auto_stop},
    )
    return policy


@transaction.atomic
def sample_capacity(*, now=None) -> list[CapacitySample]:
    """One sample per pool, at the minute (a second run in the same minute adds nothing):
    accelerators total and allocated, how many of the allocated read idle, their mean measured
    utilization, and the estimated power of the allocated ones (count × TDP × PUE)."""
    from apps.orchestration.services import IDLE_BELOW_PCT

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
