"""What a running host uses, read on the server without entering the host: its `usage` in the full
host report (docs/agent-protocol.md). Every figure is read on its own; one that can't be read is
None (null on the wire), never 0.

- CPU: the CPU time of the host's cgroup, a counter in microseconds: cgroup v2's `usage_usec`
  in `cpu.stat`, v1's `cpuacct.usage` (nanoseconds) where cpuacct shares the cpu hierarchy.
- Memory: what the host uses less the page cache the kernel may drop at once (as `docker stats`
  counts it): v2 `memory.current` less `inactive_file` of `memory.stat`, v1
  `memory.usage_in_bytes` less `total_inactive_file`; and its limit (`memory.max`,
  `memory.limit_in_bytes`; none when unlimited).
- Disk: the data disk (mounted at the host's `data` folder while it runs): used and size.
- Network: the bytes through the server's end of the host's veth, from sysfs (no need to enter
  its namespace): what that end receives is what the host sent, and the other way round.

CPU and network are counters that only grow while the host runs (they start again from 0 when
it starts again); the portal turns them into rates.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

MIB = 1024 * 1024
SYS_CLASS_NET = Path("/sys/class/net")
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit number; anything this large is
# no limit.
UNLIMITED_BYTES = 2**62


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _integer(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _stat(path: Path) -> dict[str, int]:
    """A flat keyed file ("usage_usec 1234" lines) as {key: value}; {} if unreadable."""
    values = {}
    for line in (_read(path) or "").splitlines():
        key, _sep, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            continue
    return values


def cpu_usage_usec(*, v2: bool, cpu_dir: Path) -> int | None:
    """The CPU time the cgroup's processes have used, in microseconds."""
    if v2:
        return _stat(cpu_dir / "cpu.stat").get("usage_usec")
    nanoseconds = _integer(cpu_dir / "cpuacct.usage")
    return None if nanoseconds is None else nanoseconds // 1000


def memory_mib(*, v2: bool, memory_dir: Path) -> tuple[int | None, int | None]:
    """(used, limit) in MiB; the limit None when the cgroup has none."""
    if v2:
        current = _integer(memory_dir / "memory.current")
        inactive = _stat(memory_dir / "memory.stat").get("inactive_file", 0)
        limit_text = _read(memory_dir / "memory.max")
    else:
        current = _integer(memory_dir / "memory.usage_in_bytes")
        inactive = _stat(memory_dir / "memory.stat").get("total_inactive_file", 0)
        limit_text = _read(memory_dir / "memory.limit_in_bytes")
    used = None if current is None else max(0, current - inactive) // MIB
    try:
        limit = int(limit_text) if limit_text not in (None, "max") else None
    except ValueError:
        limit = None
    if limit is not None and limit >= UNLIMITED_BYTES:
        limit = None
    return used, None if limit is None else limit // MIB


def disk_mib(
    mount: Path | None, statvfs: Callable[[Path], os.statvfs_result] = os.statvfs
) -> tuple[int | None, int | None]:
    """(used, size) in MiB of the file system mounted at `mount` (None: the host has no data
    disk mounted)."""
    if mount is None:
        return None, None
    try:
        stats = statvfs(mount)
    except OSError:
        return None, None
    size = stats.f_blocks * stats.f_frsize
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return used // MIB, size // MIB


def network_bytes(veth: str, sys_class_net: Path = SYS_CLASS_NET) -> tuple[int | None, int | None]:
    """(received, sent) by the host, in bytes, from the server's end of its veth."""
    statistics = sys_class_net / veth / "statistics"
    # The server's end receives what the host sends, and sends what the host receives.
    return _integer(statistics / "tx_bytes"), _integer(statistics / "rx_bytes")


def host_usage(
    *,
    v2: bool,
    cpu_dir: Path,
    memory_dir: Path,
    data_mount: Path | None,
    veth: str,
    sys_class_net: Path = SYS_CLASS_NET,
    statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> dict:
    """A running host's `usage`, as the host report carries it."""
    used, limit = memory_mib(v2=v2, memory_dir=memory_dir)
    disk_used, disk_size = disk_mib(data_mount, statvfs)
    received, sent = network_bytes(veth, sys_class_net)
    return {
        "taken_at": now().isoformat().replace("+00:00", "Z"),
        "cpu_usage_usec": cpu_usage_usec(v2=v2, cpu_dir=cpu_dir),
        "memory_used_mib": used,
        "memory_limit_mib": limit,
        "disk_used_mib": disk_used,
        "disk_size_mib": disk_size,
        "net_rx_bytes": received,
        "net_tx_bytes": sent,
    }
