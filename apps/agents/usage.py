"""The hosts' own figures that agents send in their host reports (`usage`, docs/agent-protocol.md),
made a monitoring sample a minute per running host, with its cards' figures over that minute,
and recorded by the orders app (`apps.orders.monitoring.record_host_metrics`).

An agent reports every few seconds; the first report of each minute is sampled. CPU and network
are counters that only grow while the host runs (its cgroup's CPU time, its interface's bytes):
their rates are taken against the counters of the host's previous sample, kept on the host
(`AgentHost.usage_counters`). A counter that went back (the host was restarted, its counters
begin again) or a reading with no previous one gives no rate for that minute, never a negative
or a made-up one. An agent too old to send `usage` still gets its hosts' GPU figures charted.
"""

from datetime import datetime, timedelta

from django.db.models import Avg, Q
from django.utils.dateparse import parse_datetime

from apps.agents.models import AgentCard, AgentHost, AgentServer
from apps.orchestration.backends.base import HostMetrics
from apps.orders.models import Instance, InstanceState
from apps.orders.monitoring import minute_of, record_host_metrics

# The window of card samples a host's sample averages: the minute before it.
CARD_WINDOW = timedelta(seconds=60)
COUNTERS = ("cpu_usage_usec", "net_rx_bytes", "net_tx_bytes")


def counter_rate(previous: int | None, current: int | None, seconds: float) -> float | None:
    """How fast a growing counter grew, a second, between two readings `seconds` apart: None
    when either reading is missing, no time passed, or it went back (it started again)."""
    if previous is None or current is None or seconds <= 0 or current < previous:
        return None
    return (current - previous) / seconds


def usage_rates(previous: dict, usage: dict, *, vcpu: int, taken_at: datetime) -> dict:
    """The CPU share (% of the host's `vcpu`) and network rates (bytes a second, as the host
    sees them) between the counters of the previous sample and `usage`, taken at `taken_at`."""
    before = parse_datetime(str(previous.get("taken_at") or ""))
    seconds = (taken_at - before).total_seconds() if before is not None else 0.0

    def rate(counter: str) -> float | None:
        return counter_rate(previous.get(counter), usage.get(counter), seconds)

    cpu = rate("cpu_usage_usec")
    return {
        "cpu_pct": None if cpu is None or vcpu <= 0 else cpu / (1_000_000 * vcpu) * 100,
        "net_rx_bytes_per_s": rate("net_rx_bytes"),
        "net_tx_bytes_per_s": rate("net_tx_bytes"),
    }


def _card_figures(server: AgentServer, uuids: set[str], now) -> dict[str, tuple]:
    """uuid -> (memory total, mean utilization, mean memory used, mean power) of the server's
    cards over the last CARD_WINDOW, in one query (a figure no sample had is None)."""
    recent = Q(samples__at__gt=now - CARD_WINDOW, samples__at__lte=now)
    rows = (
        AgentCard.objects.filter(server=server, uuid__in=list(uuids))
        .annotate(
            util=Avg("samples__utilization_pct", filter=recent),
            memory=Avg("samples__memory_used_mib", filter=recent),
            power=Avg("samples__power_w", filter=recent),
        )
        .values_list("uuid", "memory_total_mib", "util", "memory", "power")
    )
    return {uuid: figures for uuid, *figures in rows}


def _sum(values: list) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def host_metrics(host: AgentHost, usage: dict | None, cards: dict, *, now) -> HostMetrics:
    """The host's sample: its cards' figures (`cards`: `_card_figures`), and its own usage with
    rates against its previous sample."""
    usage = usage or {}
    held = [cards[uuid] for uuid in host.card_uuids if uuid in cards]
    utils = [util for _total, util, _memory, _power in held if util is not None]
    taken_at = usage.get("taken_at") or now
    rates = (
        usage_rates(host.usage_counters or {}, usage, vcpu=host.vcpu, taken_at=taken_at)
        if usage
        else {}
    )
    return HostMetrics(
        handle=host.handle,
        gpu_count=len(host.card_uuids),
        gpu_utilization_pct=sum(utils) / len(utils) if utils else None,
        gpu_memory_used_mib=_sum([memory for _t, _u, memory, _p in held]),
        gpu_memory_total_mib=_sum([total for total, _u, _m, _p in held]),
        power_w=_sum([power for _t, _u, _m, power in held]),
        cpu_pct=rates.get("cpu_pct"),
        memory_used_mib=usage.get("memory_used_mib"),
        memory_limit_mib=usage.get("memory_limit_mib") or (host.memory_mib if usage else None),
        disk_used_mib=usage.get("disk_used_mib"),
        disk_size_mib=usage.get("disk_size_mib"),
        net_rx_bytes_per_s=rates.get("net_rx_bytes_per_s"),
        net_tx_bytes_per_s=rates.get("net_tx_bytes_per_s"),
    )


def record_host_usage(
    *, server: AgentServer, reports: list[tuple[AgentHost, dict | None]], now
) -> int:
    """A monitoring sample of each running host reported (host, its `usage` or None) that has
    none yet this minute: its cards' figures and its usage. Part of the report's transaction
    (`services.record_host_reports`, which holds the server's lock). Returns how many."""
    minute = minute_of(now)
    due = [
        (host, usage)
        for host, usage in reports
        if host.usage_sampled_at is None or host.usage_sampled_at < minute
    ]
    if not due:
        return 0
    instances = dict(
        Instance.objects.filter(
            backend_handle__in=[host.handle for host, _usage in due], node_id=server.node_id
        )
        .exclude(state=InstanceState.RELEASED)
        .values_list("backend_handle", "pk")
    )
    due = [(host, usage) for host, usage in due if host.handle in instances]
    if not due:
        return 0
    cards = _card_figures(server, {uuid for host, _u in due for uuid in host.card_uuids}, now)
    readings = []
    for host, usage in due:
        readings.append((instances[host.handle], host_metrics(host, usage, cards, now=now)))
        host.usage_sampled_at = now
        if usage:
            host.usage_counters = {
                "taken_at": (usage.get("taken_at") or now).isoformat(),
                **{counter: usage.get(counter) for counter in COUNTERS},
            }
    record_host_metrics(readings, at=now)
    AgentHost.objects.bulk_update(
        [host for host, _usage in due], ["usage_counters", "usage_sampled_at"]
    )
    return len(readings)
