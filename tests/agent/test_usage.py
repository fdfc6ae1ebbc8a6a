"""What a running host uses, as the agent reads it (loam_agent.hosts.usage): from fake cgroup
(v1 and v2) and sysfs trees in a temporary folder, so no root and no real host is needed; and
the poller's full report carrying it for running hosts only."""

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from loam_agent.hosts.model import HostStatus
from loam_agent.hosts.poller import HostsPoller
from loam_agent.hosts.runtime import Cgroups
from loam_agent.hosts.usage import (
    cpu_usage_usec,
    disk_mib,
    host_usage,
    memory_mib,
    network_bytes,
)

from tests.agent.test_reconcile import FakeRuntime

MIB = 1024 * 1024
KEY = "0a1b2c3d"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2_tree(root: Path) -> Path:
    """A cgroup v2 root with a host's cgroup as the agent makes it (loam-hosts/<key>)."""
    write(root / "cgroup.controllers", "cpu memory pids\n")
    host = root / "loam-hosts" / KEY
    write(host / "cpu.stat", "usage_usec 8123456789\nuser_usec 8000000000\nsystem_usec 1\n")
    write(host / "memory.current", str(3 * 1024 * MIB))
    write(host / "memory.stat", f"anon {2 * 1024 * MIB}\ninactive_file {1024 * MIB}\nfile 9\n")
    write(host / "memory.max", str(8 * 1024 * MIB))
    return host


def v1_tree(root: Path) -> tuple[Path, Path]:
    """A cgroup v1 root: cpu (with cpuacct in the same hierarchy) and memory."""
    cpu = root / "cpu" / f"loam-{KEY}"
    memory = root / "memory" / f"loam-{KEY}"
    for controller in ("pids", "devices"):
        (root / controller).mkdir(parents=True)
    write(cpu / "cpuacct.usage", "2500000000\n")  # nanoseconds: 2.5 s
    write(memory / "memory.usage_in_bytes", str(600 * MIB))
    write(memory / "memory.stat", f"cache 1\ntotal_inactive_file {100 * MIB}\n")
    write(memory / "memory.limit_in_bytes", str(1024 * MIB))
    return cpu, memory


def net_tree(root: Path, rx: int, tx: int) -> Path:
    """/sys/class/net with the server's end of a host's veth: it received `rx`, sent `tx`."""
    statistics = root / f"vh-{KEY}" / "statistics"
    write(statistics / "rx_bytes", f"{rx}\n")
    write(statistics / "tx_bytes", f"{tx}\n")
    return root


def test_cgroup_v2_cpu_and_memory(tmp_path):
    host = v2_tree(tmp_path)
    cgroups = Cgroups(KEY, root=tmp_path)
    assert cgroups.v2 and cgroups.cpu_dir == host == cgroups.memory_dir

    assert cpu_usage_usec(v2=True, cpu_dir=host) == 8123456789
    # Used: what is charged less the page cache that can be dropped at once.
    assert memory_mib(v2=True, memory_dir=host) == (2048, 8192)


def test_cgroup_v2_without_a_memory_limit(tmp_path):
    host = v2_tree(tmp_path)
    write(host / "memory.max", "max\n")
    assert memory_mib(v2=True, memory_dir=host) == (2048, None)


def test_cgroup_v1_cpu_in_microseconds_and_memory(tmp_path):
    cpu, memory = v1_tree(tmp_path)
    cgroups = Cgroups(KEY, root=tmp_path)
    assert not cgroups.v2 and cgroups.cpu_dir == cpu and cgroups.memory_dir == memory

    assert cpu_usage_usec(v2=False, cpu_dir=cpu) == 2_500_000
    assert memory_mib(v2=False, memory_dir=memory) == (500, 1024)
    # v1 writes "no limit" as a huge number.
    write(memory / "memory.limit_in_bytes", "9223372036854771712")
    assert memory_mib(v2=False, memory_dir=memory) == (500, None)


def test_a_figure_that_cannot_be_read_is_none_not_zero(tmp_path):
    missing = tmp_path / "gone"
    assert cpu_usage_usec(v2=True, cpu_dir=missing) is None
    assert cpu_usage_usec(v2=False, cpu_dir=missing) is None
    assert memory_mib(v2=True, memory_dir=missing) == (None, None)
    assert network_bytes(f"vh-{KEY}", tmp_path) == (None, None)
    assert disk_mib(None) == (None, None)
    write(tmp_path / "garbled" / "cpuacct.usage", "not a number")
    assert cpu_usage_usec(v2=False, cpu_dir=tmp_path / "garbled") is None


def test_network_is_counted_as_the_host_sees_it(tmp_path):
    # The server's end of the veth received 5 000 bytes (the host sent them) and sent 70 000.
    sys_class_net = net_tree(tmp_path, rx=5_000, tx=70_000)
    received, sent = network_bytes(f"vh-{KEY}", sys_class_net)
    assert (received, sent) == (70_000, 5_000)


def test_the_data_disk_is_read_off_its_file_system(tmp_path):
    class Stats:
        f_frsize = 4096
        f_blocks = 25_600  # 100 MiB
        f_bfree = 19_200  # 75 MiB free

    assert disk_mib(tmp_path, statvfs=lambda path: Stats) == (25, 100)
    # A real file system: used and size as statvfs has them.
    used, size = disk_mib(tmp_path)
    real = os.statvfs(tmp_path)
    assert size == real.f_blocks * real.f_frsize // MIB and 0 <= used <= size


def test_host_usage_is_what_the_report_carries(tmp_path):
    host = v2_tree(tmp_path / "cgroup")
    sys_class_net = net_tree(tmp_path / "net", rx=1_000, tx=2_000_000)
    usage = host_usage(
        v2=True,
        cpu_dir=host,
        memory_dir=host,
        data_mount=None,
        veth=f"vh-{KEY}",
        sys_class_net=sys_class_net,
        now=lambda: datetime(2026, 12, 5, 10, 0, 5, 123456, tzinfo=UTC),
    )
    assert usage == {
        "taken_at": "2026-12-05T10:00:05.123456Z",
        "cpu_usage_usec": 8123456789,
        "memory_used_mib": 2048,
        "memory_limit_mib": 8192,
        "disk_used_mib": None,
        "disk_size_mib": None,
        "net_rx_bytes": 2_000_000,
        "net_tx_bytes": 1_000,
    }


def test_the_full_report_carries_usage_for_running_hosts_only(tmp_path):
    read = []

    def usage(host_id):
        read.append(host_id)
        if host_id == "h-broken":
            raise OSError("cgroup gone")
        return {"cpu_usage_usec": 1}

    poller = HostsPoller(
        client=None,
        runtime=FakeRuntime(),
        poll_interval_s=1,
        full_report_s=1,
        sequence=type("Sequence", (), {"next": staticmethod(lambda: 7)})(),
        stop=threading.Event(),
        usage=usage,
    )
    for status in (
        HostStatus("h-run", 1, "running", "10.213.1.2"),
        HostStatus("h-stop", 1, "stopped"),
        HostStatus("h-broken", 1, "running", "10.213.2.2"),
    ):
        poller.reconciler.statuses[status.id] = status

    sequence, hosts, volumes = poller._full_report()

    assert (sequence, volumes) == (7, None)  # no volume list applied yet
    by_id = {host["id"]: host for host in hosts}
    assert by_id["h-run"]["usage"] == {"cpu_usage_usec": 1}
    assert "usage" not in by_id["h-stop"] and "usage" not in by_id["h-broken"]
    assert sorted(read) == ["h-broken", "h-run"]  # a stopped host is not read at all
