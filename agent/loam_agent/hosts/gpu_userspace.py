"""The server's NVIDIA driver user space, found as nvidia-container-toolkit finds it.

A host with cards needs the driver's user-space half, which must match the server's kernel
module exactly, so it comes from the server and never from the image: the libraries the loader
knows (`ldconfig -p`) and the tools on PATH, for the `compute` and `utility` capabilities (the
toolkit's default). The runtime binds each file read-only into the host at the same path and
has the host's loader learn them (`ld.so.conf.d` entry and `ldconfig` before PID 1).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# libnvidia-container's utility and compute libraries (src/nvc_info.c).
LIBRARIES = frozenset(
    {
        "libnvidia-ml",
        "libnvidia-cfg",
        "libnvidia-nscq",
        "libcuda",
        "libcudadebugger",
        "libnvidia-opencl",
        "libnvidia-gpucomp",
        "libnvidia-ptxjitcompiler",
        "libnvidia-fatbinaryloader",
        "libnvidia-allocator",
        "libnvidia-compiler",
        "libnvidia-pkcs11",
        "libnvidia-pkcs11-openssl3",
        "libnvidia-nvvm",
    }
)
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
# How `ldconfig -p` tags this machine's own libraries (32-bit ones are left out, as the toolkit
# does for a 64-bit host).
_ABI_TAGS = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "64bit"}
# "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
_CACHE_LINE = re.compile(r"^\s*(\S+) \(([^)]*)\) => (/.+)$")


@dataclass(frozen=True)
class GpuUserspace:
    """Files to bind read-only into a host, each at its own path, and the folders of the
    libraries among them (for the host's loader)."""

    files: tuple[str, ...] = ()
    library_dirs: tuple[str, ...] = ()


def driver_libraries(ldconfig_output: str, machine: str | None = None) -> list[str]:
    """The driver's libraries in `ldconfig -p` output: each entry's path (the soname link) and
    the real file it leads to, this machine's ABI only."""
    tag = _ABI_TAGS.get(machine or platform.machine())
    found: list[str] = []
    for line in ldconfig_output.splitlines():
        match = _CACHE_LINE.match(line)
        if match is None:
            continue
        name, flags, path = match.groups()
        if name.split(".so")[0] not in LIBRARIES or (tag and tag not in flags.split(",")):
            continue
        for file in (path, os.path.realpath(path)):
            if os.path.isfile(file) and file not in found:
                found.append(file)
    return found


def discover(
    ldconfig_cache: Path | str | None = None, search_path: str | None = None
) -> GpuUserspace:
    """What this server has now. `ldconfig_cache` and `search_path` default to the system's
    (/etc/ld.so.cache and the agent's PATH); LOAM_AGENT_LDCONFIG_CACHE names another cache
    where the driver is a fake one (tests, a demo server), leaving the system's as it is."""
    ldconfig_cache = ldconfig_cache or os.environ.get("LOAM_AGENT_LDCONFIG_CACHE")
    ldconfig = shutil.which("ldconfig") or shutil.which("ldconfig", path="/sbin:/usr/sbin")
    if ldconfig is None:
        return GpuUserspace()
    command = [ldconfig, "-p", *(["-C", str(ldconfig_cache)] if ldconfig_cache else [])]
    listing = subprocess.run(command, capture_output=True, text=True).stdout
    libraries = driver_libraries(listing)
    binaries = [
        path
        for name in BINARIES
        if (path := shutil.which(name, path=search_path)) and os.path.isfile(path)
    ]
    folders = list(dict.fromkeys(os.path.dirname(library) for library in libraries))
    return GpuUserspace(tuple(libraries + binaries), tuple(folders))
