"""Every host is watched: its figures (GPU utilization, GPU memory, power, CPU, memory, disk,
network) a sample a minute (`models.HostSample`), charted on its page over 1 h, 24 h or 7 d.

Where the samples come from:
- agent servers: each agent's host reports carry its hosts' CPU, memory, disk and network
  counters, which `apps.agents.usage` turns into a sample with the cards' figures and records
  here (`record_host_metrics`);
- backends whose driver has METRICS (the simulator, whose figures come from the same model as
  its nodes' telemetry): `sample_hosts`, a beat job every minute, asks them for their running
  hosts' figures. Recorded, not computed for a range on the fly: what a host held at each
  minute (a resize, a stop, its cards) is in its rows, which the portal keeps nowhere else (a
  released allocation forgets its cards), and every host's charts are one query whatever its
  backend.

A chart's range is read in one query (`host_series`): the samples averaged per bucket in the
database, at most MAX_POINTS buckets whatever the range. Samples older than
LOAM_HOST_SAMPLES_KEPT_S are pruned by `sample_hosts` (`prune_samples`).
"""

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Avg, Max, Value
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.core.errors import DomainError
from apps.core.sql import EpochSeconds
from apps.orchestration.backends.base import (
    BackendError,
    Capability,
    HostLoad,
    HostMetrics,
    MetricsDriver,
)
from apps.orchestration.backends.registry import driver_of, supports
from apps.orchestration.models import Accelerator, Allocation
from apps.orders.models import HostSample, Instance, InstanceState

logger = logging.getLogger(__name__)

MAX_POINTS = 360


@dataclass(frozen=True)
class ChartRange:
    key: str
    label: str
    span: timedelta
    step_s: int  # one point per bucket of this many seconds

    @property
    def points(self) -> int:
        return int(self.span.total_seconds()) // self.step_s


# A sample a minute: the hour at full resolution, the day and the week at 360 points each.
RANGES = {
    r.key: r
    for r in (
        ChartRange("1h", gettext_lazy("1 h"), timedelta(hours=1), 60),
        ChartRange("24h", gettext_lazy("24 h"), timedelta(hours=24), 240),
        ChartRange("7d", gettext_lazy("7 d"), timedelta(days=7), 1680),
    )
}
DEFAULT_RANGE = "1h"

# Averaged over a bucket; a capacity (a limit, a size, the cards' memory) is its largest value.
AVERAGED = (
    "gpu_utilization_pct",
    "gpu_memory_used_mib",
    "power_w",
    "cpu_pct",
    "memory_used_mib",
    "disk_used_mib",
    "net_rx_bytes_per_s",
    "net_tx_bytes_per_s",
)
CAPACITIES = ("gpu_count", "gpu_memory_total_mib", "memory_limit_mib", "disk_size_mib")
FIGURES = AVERAGED + CAPACITIES


class UnknownRange(DomainError):
    code = "invalid_range"
    status = 400


def chart_range(key: str | None) -> ChartRange:
    """The range `key` names (none: the default). Raises UnknownRange for any other."""
    if key in (None, ""):
        return RANGES[DEFAULT_RANGE]
    found = RANGES.get(key)
    if found is None:
        raise UnknownRange(
            _("Unknown range “%(range)s”: ask for one of %(ranges)s.")
            % {"range": str(key)[:20], "ranges": ", ".join(RANGES)}
        )
    return found


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _rounded(value):
    return None if value is None else round(float(value), 1)


def host_series(instance: Instance, *, chart: ChartRange, now=None) -> dict:
    """The host's figures over `chart`'s span up to `now`, one point per bucket of
    `chart.step_s` seconds (at most MAX_POINTS), averaged in the database in one query: {"at":
    [iso of each bucket's start], <figure>: [value or null]}. A bucket without a sample (the
    host did not run, or did not report) is null in every figure, so the charts show a gap."""
    now = now or timezone.now()
    step = chart.step_s
    last = _epoch(now) // step
    first = last - min(chart.points, MAX_POINTS) + 1
    rows = (
        HostSample.objects.filter(instance=instance, at__gte=_at(first * step), at__lte=now)
        .annotate(bucket=EpochSeconds("at") / Value(step))
        .values("bucket")
        .annotate(
            **{figure: Avg(figure) for figure in AVERAGED},
            **{figure: Max(figure) for figure in CAPACITIES},
        )
        .order_by("bucket")
    )
    by_bucket = {row["bucket"]: row for row in rows}
    series: dict = {"at": [_at(bucket * step).isoformat() for bucket in range(first, last + 1)]}
    for figure in FIGURES:
        series[figure] = [
            _rounded(by_bucket[bucket][figure]) if bucket in by_bucket else None
            for bucket in range(first, last + 1)
        ]
    series["samples"] = len(by_bucket)
    return series


def notice(instance: Instance, *, has_data: bool) -> str:
    """Why there is nothing (or nothing new) to show, for a host that does not run now or has
    not reported in the range; empty for a running host with figures."""
    state = instance.state
    if state in (InstanceState.PENDING, InstanceState.PROVISIONING):
        return _(
            "This host is not running yet: its figures appear here within a minute of it running."
        )
    if state == InstanceState.STARTING:
        return _("This host is starting: its figures appear here within a minute of it running.")
    if state in (InstanceState.STOPPING, InstanceState.STOPPED):
        return _(
            "This host is stopped: a stopped host runs nothing and reports nothing. Start it to "
            "see new figures; the charts show when it last ran."
        )
    if state in (InstanceState.RELEASING, InstanceState.RELEASED):
        return _("This host is released: it reports nothing any more.")
    if state == InstanceState.ERROR:
        return _("This host is in error: it reports nothing until it is fixed or released.")
    if not has_data:
        return _(
            "No figures in this range yet: a running host reports a sample a minute, and the "
            "first comes within a minute or two of it starting."
        )
    return ""


def monitoring(instance: Instance, *, chart: ChartRange, now=None) -> dict:
    """What the host page's monitoring charts draw: the series, the range, and what the page
    says about them."""
    now = now or timezone.now()
    series = host_series(instance, chart=chart, now=now)
    has_data = series.pop("samples") > 0
    return {
        "range": chart.key,
        "step_s": chart.step_s,
        "start": series["at"][0],
        "end": now.isoformat(),
        "state": instance.state,
        "simulated": instance.is_simulated,
        "has_data": has_data,
        "notice": notice(instance, has_data=has_data),
        "series": series,
    }


# --- writing samples -----------------------------------------------------------------------------


def minute_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _percent(value: float | None) -> float | None:
    return None if value is None else max(0.0, min(100.0, float(value)))


def _whole(value: float | None) -> int | None:
    return None if value is None else max(0, round(value))


def _rate(value: float | None) -> float | None:
    return None if value is None else max(0.0, float(value))


def record_host_metrics(readings: Sequence[tuple[int, HostMetrics]], *, at: datetime) -> int:
    """One sample per (instance id, figures) at `at`'s minute, in one statement; a host that
    has its sample for that minute already keeps it. Returns how many were given."""
    at = minute_of(at)
    _insert([_sample(instance_id, at, metrics) for instance_id, metrics in readings])
    return len(readings)


def _sample(instance_id: int, at: datetime, metrics: HostMetrics) -> HostSample:
    return HostSample(
        instance_id=instance_id,
        at=at,
        gpu_count=metrics.gpu_count,
        gpu_utilization_pct=_percent(metrics.gpu_utilization_pct),
        gpu_memory_used_mib=_whole(metrics.gpu_memory_used_mib),
        gpu_memory_total_mib=_whole(metrics.gpu_memory_total_mib),
        power_w=_rate(metrics.power_w),
        cpu_pct=_percent(metrics.cpu_pct),
        memory_used_mib=_whole(metrics.memory_used_mib),
        memory_limit_mib=_whole(metrics.memory_limit_mib),
        disk_used_mib=_whole(metrics.disk_used_mib),
        disk_size_mib=_whole(metrics.disk_size_mib),
        net_rx_bytes_per_s=_rate(metrics.net_rx_bytes_per_s),
        net_tx_bytes_per_s=_rate(metrics.net_tx_bytes_per_s),
        simulated=metrics.simulated,
    )


def _insert(samples: list[HostSample]) -> None:
    HostSample.objects.bulk_create(samples, batch_size=2000, ignore_conflicts=True)


def prune_samples(*, now=None) -> int:
    """Drop the samples older than LOAM_HOST_SAMPLES_KEPT_S; returns how many."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.LOAM_HOST_SAMPLES_KEPT_S)
    deleted, _rows = HostSample.objects.filter(at__lt=cutoff).delete()
    return deleted


def _loads(instances: list[Instance]) -> dict[int, HostLoad]:
    """Each running host as its driver is asked about it, with the cards it holds now."""
    cards = defaultdict(list)
    held = Accelerator.objects.filter(
        allocation__workload__instance__in=[instance.pk for instance in instances],
        allocation__released_at__isnull=True,
    ).values_list("allocation__workload__instance", "index")
    for instance_id, index in held.order_by("index"):
        cards[instance_id].append(index)
    loads = {}
    for instance in instances:
        model = instance.flavor.family.accelerator_model
        loads[instance.pk] = HostLoad(
            handle=instance.backend_handle,
            node=instance.node.hostname,
            accelerator_indices=tuple(cards[instance.pk]),
            vcpu=instance.flavor.vcpu,
            ram_gb=instance.flavor.ram_gb,
            disk_gb=instance.data_disk_gb or instance.system_disk_gb,
            bandwidth_mbps=instance.bandwidth_mbps,
            card_memory_mib=model.memory_gb * 1024,
            card_tdp_w=model.tdp_w,
        )
    return loads


def _metered_hosts() -> list[list[Instance]]:
    """The running hosts whose backend's driver has METRICS, a list per backend."""
    running = (
        Instance.objects.filter(state=InstanceState.RUNNING, node__isnull=False)
        .exclude(backend_handle="")
        .select_related("pool__backend", "node", "flavor__family__accelerator_model")
        .order_by("pk")
    )
    by_backend = defaultdict(list)
    for instance in running:
        backend = instance.pool.backend
        if backend.is_enabled and supports(backend.driver, Capability.METRICS):
            by_backend[backend.pk].append(instance)
    return list(by_backend.values())


def _figures(hosts: list[Instance], loads: dict, at: datetime) -> list[tuple[int, HostMetrics]]:
    """(instance id, figures) of `hosts` (one backend's) at `at`, from their driver."""
    ids = {instance.backend_handle: instance.pk for instance in hosts}
    driver: MetricsDriver = driver_of(hosts[0].pool.backend)
    figures = driver.host_metrics([loads[instance.pk] for instance in hosts], at)
    return [(ids[m.handle], m) for m in figures if m.handle in ids]


def sample_hosts(*, now=None) -> dict:
    """A sample of each running host whose backend's driver has METRICS, for this minute
    (a second run in the same minute adds nothing), then the old samples pruned. A backend that
    cannot answer is skipped this minute (its hosts show a gap). No row is locked: each driver
    is asked outside any transaction, and the samples are one insert."""
    now = now or timezone.now()
    groups = _metered_hosts()
    loads = _loads([instance for hosts in groups for instance in hosts])
    recorded = 0
    for hosts in groups:
        try:
            readings = _figures(hosts, loads, now)
        except BackendError as exc:
            logger.warning("%s: no host figures this minute: %s", hosts[0].pool.backend, exc)
            continue
        recorded += record_host_metrics(readings, at=now)
    return {"recorded": recorded, "pruned": prune_samples(now=now)}


def sample_past(*, since: datetime, every: timedelta, now=None) -> int:
    """The samples `sample_hosts` would have taken every `every` from `since` to `now`, for the
    hosts running now on a METRICS driver, each from when it took the cards it holds (before
    that it held others, or none): a park seeded a moment ago (the demo) charts its past at
    once. One insert; minutes sampled already keep their samples. Returns how many."""
    now = now or timezone.now()
    groups = _metered_hosts()
    hosts = [instance for group in groups for instance in group]
    loads = _loads(hosts)
    held_since = dict(
        Allocation.objects.filter(
            workload__instance__in=[instance.pk for instance in hosts], released_at__isnull=True
        ).values_list("workload__instance", "created_at")
    )
    samples = []
    at = minute_of(since)
    while at <= now:
        for group in groups:
            try:
                readings = _figures(group, loads, at)
            except BackendError:
                continue  # a gap, as the minute's job would have left
            samples += [
                _sample(instance_id, at, metrics)
                for instance_id, metrics in readings
                if held_since.get(instance_id, at) <= at
            ]
        at += every
    _insert(samples)
    return len(samples)
