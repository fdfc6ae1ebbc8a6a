"""Idle capacity: running instances whose accelerators all read idle in the backend's telemetry
(`Node.telemetry`, written by `apps.orchestration.services.probe_backend`) for long enough."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Max, Prefetch
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core.models import AuditEvent
from apps.operations.models import IdlePolicy
from apps.orchestration.models import Accelerator, Allocation
from apps.orders.models import Instance, InstanceState

DEFAULT_THRESHOLD_MINUTES = IdlePolicy._meta.get_field("threshold_minutes").default
# Telemetry older than this proves nothing: the instance is not called idle on it.
TELEMETRY_FRESH_FOR = timedelta(minutes=30)


@dataclass(frozen=True)
class IdleInstance:
    instance: Instance
    idle_since: datetime
    utilization_pct: float
    threshold_minutes: int
    last_notice_at: datetime | None = None

    @property
    def idle_minutes(self) -> int:
        return int((timezone.now() - self.idle_since).total_seconds() // 60)


def with_live_devices(instances):
    devices = Accelerator.objects.order_by("index")
    live = Allocation.objects.filter(released_at__isnull=True).prefetch_related(
        Prefetch("accelerators", queryset=devices)
    )
    return instances.prefetch_related(Prefetch("allocations", queryset=live, to_attr="live"))


def idle_reading(instance: Instance, *, now=None) -> tuple[datetime, float] | None:
    """(idle since, mean utilization) when every accelerator the instance holds reads idle in
    fresh telemetry; None otherwise. Needs `with_live_devices` (or it queries)."""
    now = now or timezone.now()
    node = instance.node
    if node is None or instance.state != InstanceState.RUNNING:
        return None
    telemetry = node.telemetry or {}
    updated = parse_datetime(telemetry.get("updated_at") or "")
    if updated is None or now - updated > TELEMETRY_FRESH_FOR:
        return None
    live = getattr(instance, "live", None)
    if live is None:
        live = list(with_live_devices(Instance.objects.filter(pk=instance.pk)).get().live)
    indices = [device.index for allocation in live for device in allocation.accelerators.all()]
    if not indices:
        return None
    # A device may have idled before this instance got it: the instance idles from then on.
    held_since = max(allocation.created_at for allocation in live)
    readings = telemetry.get("accelerators") or {}
    since, utils = [], []
    for index in indices:
        reading = readings.get(str(index)) or {}
        start = parse_datetime(reading.get("idle_since") or "")
        if start is None:
            return None
        since.append(start)
        utils.append(float(reading.get("util") or 0))
    return max([*since, held_since]), round(sum(utils) / len(utils), 1)


def idle_policies(parks) -> dict[int, IdlePolicy]:
    return {policy.park_id: policy for policy in IdlePolicy.objects.filter(park__in=parks)}


def idle_instances(parks, *, min_minutes: int | None = None, now=None) -> list[IdleInstance]:
    """Running instances of the parks idle for at least `min_minutes` (default: each park's
    policy threshold), longest idle first, with when their owners were last told."""
    now = now or timezone.now()
    policies = idle_policies(parks)
    instances = with_live_devices(
        Instance.objects.filter(
            organization__park__in=parks, state=InstanceState.RUNNING, node__isnull=False
        ).select_related("organization__park", "flavor", "region", "node__pool")
    ).order_by("pk")
    found = []
    for instance in instances:
        reading = idle_reading(instance, now=now)
        if reading is None:
            continue
        policy = policies.get(instance.organization.park_id)
        threshold = policy.threshold_minutes if policy else DEFAULT_THRESHOLD_MINUTES
        wanted = threshold if min_minutes is None else min_minutes
        if now - reading[0] >= timedelta(minutes=wanted):
            found.append((instance, reading, threshold))
    notices = dict(
        AuditEvent.objects.filter(
            action="instance.idle_notice",
            object_type=Instance._meta.label_lower,
            object_id__in=[str(instance.pk) for instance, _r, _t in found],
        )
        .values_list("object_id")
        .annotate(last=Max("created_at"))
        .order_by()
    )
    rows = [
        IdleInstance(
            instance=instance,
            idle_since=since,
            utilization_pct=util,
            threshold_minutes=threshold,
            last_notice_at=notices.get(str(instance.pk)),
        )
        for instance, (since, util), threshold in found
    ]
    return sorted(rows, key=lambda row: (row.idle_since, row.instance.pk))
