"""What the portal learns about the server at enrolment, beside its accelerators."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

from loam_agent import __version__


def server_facts() -> dict:
    return {
        "hostname": socket.gethostname(),
        "os": _os_name(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_total_mib": _memory_total_mib(),
        "agent_version": __version__,
    }


def _os_name() -> str:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return platform.system()
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    return fields.get("PRETTY_NAME", platform.system()).strip('"')


def _memory_total_mib() -> int | None:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None
