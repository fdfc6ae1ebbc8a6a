"""A host's own figures from its agent (`usage` in the host reports, docs/agent-protocol.md; the
portal's side is apps/agents/usage.py): a monitoring sample a minute per running host, with its
cards' figures over that minute, CPU and network as rates of the agent's counters; an agent
that sends no usage keeps working and still gets its hosts' GPU charted."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.agents.models import AgentHost
from apps.agents.usage import counter_rate, usage_rates
from apps.orders.models import HostSample
from tests.agents.conftest import next_report_sequence, sample
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 5, 10, 0, 10, tzinfo=UTC)
T1, T2, T3 = (T0 + timedelta(minutes=n) for n in (1, 2, 3))


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def usage(at: datetime, *, cpu_s: float, rx: int, tx: int, **changes) -> dict:
    return {
        "taken_at": iso(at),
        "cpu_usage_usec": int(cpu_s * 1_000_000),
        "memory_used_mib": 2048,
        "memory_limit_mib": 65536,
        "disk_used_mib": 1000,
        "disk_size_mib": 100_000,
        "net_rx_bytes": rx,
        "net_tx_bytes": tx,
        **changes,
    }


def report(agent, instance, *, state="running", **extra):
    host = AgentHost.objects.get(handle=instance.backend_handle)
    entry = {
        "id": host.handle,
        "generation": host.generation,
        "state": state,
        "address": "10.213.7.2" if state == "running" else None,
        "ssh_port": 22 if state == "running" else None,
        "message": "",
        **extra,
    }
    return agent.post("hosts/report", {"sequence": next_report_sequence(), "hosts": [entry]})


def heartbeat(agent, instance, *, held_pct: int, other_pct: int = 90):
    """Every card reports `other_pct`, the host's own card `held_pct`."""
    held = set(AgentHost.objects.get(handle=instance.backend_handle).card_uuids)
    agent.heartbeat(
        [
            sample(card["uuid"], utilization_pct=held_pct if card["uuid"] in held else other_pct)
            for card in agent.cards
        ]
    )


def test_a_running_hosts_usage_is_a_sample_a_minute_with_rates(agent, order_host):
    with time_machine.travel(T0, tick=False):
        instance = order_host()  # flavor a1.1x: one card, 8 vCPU
    HostSample.objects.all().delete()  # what the converging agent's reports sampled

    with time_machine.travel(T1, tick=False):
        heartbeat(agent, instance, held_pct=40)
        assert report(agent, instance, usage=usage(T1, cpu_s=1000, rx=0, tx=0)).status_code == 204
    with time_machine.travel(T1 + timedelta(seconds=20), tick=False):
        # Later in the same minute: not sampled again, and the counters stay the minute's.
        report(agent, instance, usage=usage(T1, cpu_s=1010, rx=5, tx=5))
    with time_machine.travel(T2, tick=False):
        heartbeat(agent, instance, held_pct=60)
        # A minute later: 4 of its 8 vCPUs busy, 1 MB/s in, 125 kB/s out.
        report(agent, instance, usage=usage(T2, cpu_s=1240, rx=60_000_000, tx=7_500_000))
    with time_machine.travel(T3, tick=False):
        # Restarted meanwhile: its counters began again.
        report(agent, instance, usage=usage(T3, cpu_s=3, rx=100, tx=100, memory_used_mib=512))

    first, second, third = HostSample.objects.filter(instance=instance).order_by("at")
    assert [s.at for s in (first, second, third)] == [
        moment.replace(second=0) for moment in (T1, T2, T3)
    ]
    # The first: gauges, and no rate without a previous reading.
    assert first.cpu_pct is None and first.net_rx_bytes_per_s is None
    assert (first.memory_used_mib, first.memory_limit_mib) == (2048, 65536)
    assert (first.disk_used_mib, first.disk_size_mib) == (1000, 100_000)
    # Its card's figures, not the server's other cards'.
    assert first.gpu_count == 1 and first.gpu_utilization_pct == 40.0
    assert first.gpu_memory_total_mib == 143771 and first.gpu_memory_used_mib == 20480
    assert first.power_w == 312.5 and not first.simulated
    # The second: rates since the first sample's counters.
    assert second.cpu_pct == 50.0
    assert second.net_rx_bytes_per_s == 1_000_000 and second.net_tx_bytes_per_s == 125_000
    assert second.gpu_utilization_pct == 60.0
    # The third: counters that went back give no rate, never a negative one.
    assert third.cpu_pct is None and third.net_rx_bytes_per_s is None
    assert third.memory_used_mib == 512


def test_an_agent_that_sends_no_usage_still_gets_its_hosts_gpu_charted(agent, order_host):
    with time_machine.travel(T0, tick=False):
        instance = order_host()
    HostSample.objects.all().delete()
    with time_machine.travel(T1, tick=False):
        heartbeat(agent, instance, held_pct=25)
        assert report(agent, instance).status_code == 204
        assert report(agent, instance, usage=None).status_code == 204

    (sampled,) = HostSample.objects.filter(instance=instance)
    assert sampled.gpu_utilization_pct == 25.0 and sampled.gpu_count == 1
    assert sampled.cpu_pct is None and sampled.memory_used_mib is None
    assert sampled.disk_used_mib is None and sampled.net_rx_bytes_per_s is None


def test_a_stopped_host_is_not_sampled(agent, order_host):
    with time_machine.travel(T0, tick=False):
        instance = order_host()
    HostSample.objects.all().delete()
    with time_machine.travel(T1, tick=False):
        report(agent, instance, state="stopped")
    assert not HostSample.objects.exists()


def test_a_figure_out_of_range_is_a_400_naming_it(agent, order_host):
    instance = order_host()
    response = report(agent, instance, usage=usage(T1, cpu_s=1, rx=-5, tx=0))
    assert response.status_code == 400
    assert "net_rx_bytes" in response.json()["detail"]


def test_a_counter_rate():
    assert counter_rate(100, 700, 60) == 10
    assert counter_rate(None, 700, 60) is None
    assert counter_rate(100, None, 60) is None
    assert counter_rate(700, 100, 60) is None  # it went back: started again
    assert counter_rate(100, 700, 0) is None


def test_usage_rates_are_shares_of_the_hosts_vcpus_and_bytes_a_second():
    previous = {"taken_at": iso(T1), "cpu_usage_usec": 0, "net_rx_bytes": 0, "net_tx_bytes": 0}
    current = {"cpu_usage_usec": 30_000_000, "net_rx_bytes": 600, "net_tx_bytes": 6000}
    rates = usage_rates(previous, current, vcpu=2, taken_at=T1 + timedelta(seconds=30))
    assert rates == {"cpu_pct": 50.0, "net_rx_bytes_per_s": 20.0, "net_tx_bytes_per_s": 200.0}
    assert usage_rates({}, current, vcpu=2, taken_at=T1) == {
        "cpu_pct": None,
        "net_rx_bytes_per_s": None,
        "net_tx_bytes_per_s": None,
    }
