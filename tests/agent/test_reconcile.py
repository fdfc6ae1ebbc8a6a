"""Reconcile decisions against an in-memory runtime: what the agent does for each difference."""

import itertools
import threading
import time
from dataclasses import replace

from loam_agent.hosts.model import ActualHost, DesiredHost, HostError, HostNetwork, HostStatus
from loam_agent.hosts.reconcile import Reconciler, converge
from loam_agent.hosts.volumes import HostVolume


class FakeRuntime:
    """Records the calls; hosts are ActualHost values in a dict."""

    def __init__(self, cards=("GPU-a", "GPU-b"), images=("debian-12",)) -> None:
        self.hosts: dict[str, ActualHost] = {}
        self.calls: list[tuple] = []
        self.cards, self.images = set(cards), set(images)
        self.slow: dict[str, threading.Event] = {}
        self.expected: list[tuple[dict, list]] = []

    def list(self):
        return sorted(self.hosts)

    def inspect(self, host_id):
        return self.hosts.get(host_id)

    def create(self, host):
        self.calls.append(("create", host.id))
        if host.id in self.slow:
            self.slow[host.id].wait(5)
        if host.image not in self.images:
            raise HostError(f"image {host.image!r} isn't built on this server")
        self.hosts[host.id] = ActualHost(
            host.id,
            False,
            f"10.213.{len(self.hosts) + 1}.2",
            (),
            host.vcpu,
            host.memory_mib,
            host.data_disk_gb,
            host.bandwidth_mbps,
        )

    def start(self, host):
        self.calls.append(("start", host.id))
        unknown = set(host.card_uuids) - self.cards
        if unknown:
            raise HostError(f"no such card on this server: {', '.join(sorted(unknown))}")
        actual = self.hosts[host.id]
        actual.running, actual.card_uuids = True, host.card_uuids
        actual.vcpu, actual.memory_mib = host.vcpu, host.memory_mib

    def stop(self, host_id):
        self.calls.append(("stop", host_id))
        self.hosts[host_id].running, self.hosts[host_id].card_uuids = False, ()

    def set_limits(self, host_id, vcpu, memory_mib):
        self.calls.append(("set_limits", host_id, vcpu, memory_mib))
        self.hosts[host_id].vcpu, self.hosts[host_id].memory_mib = vcpu, memory_mib

    def grow_disk(self, host_id, data_disk_gb):
        self.calls.append(("grow_disk", host_id, data_disk_gb))
        self.hosts[host_id].data_disk_gb = data_disk_gb

    def set_bandwidth(self, host_id, mbps):
        self.calls.append(("set_bandwidth", host_id, mbps))
        self.hosts[host_id].bandwidth_mbps = mbps

    def set_network(self, host_id, network):
        self.calls.append(("set_network", host_id, network))
        self.hosts[host_id].network = network

    def expect_networks(self, networks):
        # Apart from `calls`: the networks of every list, ahead of the workers' calls.
        self.expected.append((networks, list(self.calls)))

    def remove(self, host_id):
        self.calls.append(("remove", host_id))
        self.hosts.pop(host_id, None)


def host(**changes) -> DesiredHost:
    shape = dict(
        id="h-1",
        generation=1,
        state="running",
        card_uuids=("GPU-a",),
        vcpu=2,
        memory_mib=1024,
        data_disk_gb=10,
        bandwidth_mbps=0,
    )
    return DesiredHost(**{**shape, **changes})


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOfTheFakeHost"


def run(runtime, desired, host_keys=lambda address: (HOST_KEY,)) -> list[HostStatus]:
    reports = []
    converge(runtime, desired, reports.append, host_keys)
    return reports


def states(reports) -> list[str]:
    return [report.state for report in reports]


def test_a_new_host_is_created_started_and_reported_running_when_ssh_answers():
    runtime = FakeRuntime()
    reports = run(runtime, host())
    assert states(reports) == ["creating", "running"]
    assert reports[-1].address == "10.213.1.2" and reports[-1].generation == 1
    assert runtime.calls == [("create", "h-1"), ("start", "h-1")]
    # What its sshd presented, for the portal to pin; reported while it runs, never otherwise.
    assert reports[-1].to_json()["ssh_host_keys"] == [HOST_KEY]
    assert reports[0].to_json()["ssh_host_keys"] == []


def test_a_host_whose_sshd_never_answers_fails_with_a_reason():
    reports = run(FakeRuntime(), host(), host_keys=lambda address: ())
    assert reports[-1].state == "failed"
    assert "sshd did not answer on 10.213.1.2:22" in reports[-1].message


def test_an_unknown_image_or_card_fails_the_host_with_an_operator_readable_message():
    assert "image 'centos-7'" in run(FakeRuntime(), host(image="centos-7"))[-1].message
    reports = run(FakeRuntime(), host(card_uuids=("GPU-zz",)))
    assert (reports[-1].state, reports[-1].message) == (
        "failed",
        "no such card on this server: GPU-zz",
    )


def test_changed_cards_restart_the_host():
    runtime = FakeRuntime()
    run(runtime, host())
    runtime.calls.clear()
    assert states(run(runtime, host(generation=2, card_uuids=("GPU-b",))))[-1] == "running"
    assert runtime.calls == [("stop", "h-1"), ("start", "h-1")]


def test_changed_cpu_memory_and_bandwidth_apply_live_without_a_restart():
    runtime = FakeRuntime()
    run(runtime, host())
    runtime.calls.clear()
    reports = run(runtime, host(generation=2, vcpu=4, memory_mib=2048, bandwidth_mbps=50))
    assert states(reports) == ["running"]
    assert runtime.calls == [("set_limits", "h-1", 4, 2048), ("set_bandwidth", "h-1", 50)]


def test_stopping_stops_and_the_disk_grows_only_while_stopped():
    runtime = FakeRuntime()
    run(runtime, host())
    reports = run(runtime, host(generation=2, data_disk_gb=20))
    assert reports[-1].state == "failed" and "only grow while the host is stopped" in (
        reports[-1].message
    )
    runtime.calls.clear()
    assert states(run(runtime, host(generation=3, state="stopped", data_disk_gb=20))) == ["stopped"]
    assert runtime.calls == [("stop", "h-1"), ("grow_disk", "h-1", 20)]


def test_a_smaller_disk_is_refused():
    runtime = FakeRuntime()
    run(runtime, host())
    assert "only grows" in run(runtime, host(generation=2, data_disk_gb=5))[-1].message


def test_a_data_disk_that_became_a_volume_is_no_smaller_disk():
    """A host made with its own data.img, listed with its data disk as a volume at /data and
    `data_disk_gb` 0: neither refused nor grown (the volume adopts the data.img)."""
    runtime = FakeRuntime()
    run(runtime, host())
    runtime.calls.clear()
    as_volume = host(generation=2, data_disk_gb=0, volumes=(HostVolume("vol-d", "/data"),))
    assert states(run(runtime, as_volume)) == ["running"]
    assert states(run(runtime, replace(as_volume, generation=3, state="stopped"))) == ["stopped"]
    assert ("grow_disk", "h-1", 0) not in runtime.calls


def wait_for(condition, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def reconciler_for(runtime, reports: list[HostStatus] | None = None) -> Reconciler:
    """A reconciler whose hosts' sshd answers at once; it puts each change it reports in
    `reports`."""

    def report(sequence: int, status: HostStatus) -> None:
        if reports is not None:
            reports.append(status)

    return Reconciler(
        runtime, report, next_sequence=itertools.count(1).__next__, host_keys=lambda a: (HOST_KEY,)
    )


def test_the_reconciler_removes_unlisted_hosts_and_skips_unchanged_ones():
    runtime = FakeRuntime()
    reports: list[HostStatus] = []
    reconciler = reconciler_for(runtime, reports)
    reconciler.apply([host(), host(id="h-2", card_uuids=("GPU-b",))])
    assert reconciler.wait_idle(5)
    assert sorted(runtime.hosts) == ["h-1", "h-2"]
    runtime.calls.clear()

    reconciler.apply([host()])
    assert reconciler.wait_idle(5)
    assert runtime.calls == [("remove", "h-2")]
    assert [(r.id, r.state) for r in reports[-1:]] == [("h-2", "removed")]
    assert [status["id"] for status in reconciler.full_report()[1]] == ["h-1"]


def test_a_slow_create_does_not_delay_another_hosts_stop():
    runtime = FakeRuntime()
    reports: list[HostStatus] = []
    reconciler = reconciler_for(runtime, reports)
    reconciler.apply([host()])
    assert reconciler.wait_idle(5)
    runtime.slow["h-slow"] = threading.Event()

    reconciler.apply([host(generation=2, state="stopped"), host(id="h-slow")])
    wait_for(lambda: ("h-1", "stopped") in [(r.id, r.state) for r in reports])
    assert "h-slow" not in runtime.hosts  # still creating
    runtime.slow["h-slow"].set()
    assert reconciler.wait_idle(5)
    assert runtime.hosts["h-slow"].running


def test_a_host_left_by_a_previous_agent_is_removed_when_not_listed():
    runtime = FakeRuntime()
    run(runtime, host(id="h-old"))
    reconciler = reconciler_for(runtime)
    reconciler.apply([])
    assert reconciler.wait_idle(5)
    assert runtime.hosts == {}


def test_a_list_that_moves_a_port_from_one_host_to_another_changes_both_at_once():
    """Host A leaves the list and host B gets the server port A had: both networks reach the
    runtime in one call, before either host's worker runs (which may take seconds)."""
    runtime = FakeRuntime()
    first = host(id="h-a", network=HostNetwork.from_json(PORT_20000))
    reconciler = reconciler_for(runtime)
    reconciler.apply([first])
    assert reconciler.wait_idle(5)
    second = host(id="h-b", network=HostNetwork.from_json(PORT_20000))
    runtime.calls.clear()

    reconciler.apply([second])

    networks, calls_before = runtime.expected[-1]
    assert networks == {"h-a": HostNetwork(), "h-b": second.network}
    assert calls_before == []  # before A's removal and B's creation
    assert reconciler.wait_idle(5)
    assert runtime.calls.count(("remove", "h-a")) == 1


PORT_20000 = {
    "group": "o-1",
    "ports": [{"purpose": "ssh", "protocol": "tcp", "server_port": 20000, "host_port": 22}],
}
