"""Cloud disks (volumes) on this server: an ext4 image each, outliving the hosts they serve.

state_dir/volumes/<id>.img is the volume, state_dir/volumes/<id>.mnt where it is loop-mounted
while a host that has it runs (docs/agent-protocol.md, "Volumes"). The portal lists the server's
volumes with the hosts (`DesiredVolume`): one missing is made (empty, or a copy of another volume
of this server: a snapshot), one smaller than asked grows, offline: when no running host has
it mounted (ext4 grows online only with CAP_SYS_RESOURCE, which agents may lack; a container
runtime often drops it), one no longer listed is deleted once no host has it mounted. A host's
spec names the volumes it has (`HostVolume`) and where they appear in it; they are bound in
id-mapped as the data disk is, when the host starts: nspawn can bind nothing into a host that runs
(`machinectl bind` needs a machine registered with machined, which hosts are not), so a volume
attached to a running host appears at its next start.

A host's data disk is a volume too, at /data. One made before data disks were volumes is the
host's own state_dir/hosts/<host>/data.img: the portal lists its volume with that host
(`adopt`), and the image is moved into the volumes' folder, once (a rename on one file system,
so it is whole or not moved), when the host does not have it mounted: at once for a stopped
host, else when it stops, starts again or is removed. Until then the volume is reported ready
at the size of the data.img it still is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from loam_agent.hosts.model import HOST_ID, HostError

GIB = 1024**3
DATA_DISK_PATH = "/data"  # where a host's data disk appears in it
VOLUME_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
# Where a volume may appear in a host: an absolute path of plain names, not in the system's own
# folders (a volume over /etc or /usr would hide the image's files).
MOUNT_PATH = re.compile(r"(/[A-Za-z0-9._-]+)+")
SYSTEM_FOLDERS = frozenset(
    ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "proc", "run", "sbin", "sys", "usr")
)


def mount_path_problem(path: str) -> str | None:
    """Why `path` can't be where a volume appears in a host, or None when it can."""
    if not MOUNT_PATH.fullmatch(path) or any(part in (".", "..") for part in path.split("/")):
        return f"{path!r} is not an absolute path of plain names"
    if path.split("/")[1] in SYSTEM_FOLDERS:
        return f"{path!r} is inside a system folder"
    return None


def _volume_id(value: object) -> str:
    if not isinstance(value, str) or not VOLUME_ID.fullmatch(value):
        raise ValueError(f"volume id {value!r} is not lower-case letters, digits and dashes")
    return value


@dataclass(frozen=True)
class HostVolume:
    """A volume a host has, and where it appears in the host."""

    id: str
    mount_path: str

    @classmethod
    def from_json(cls, value: dict) -> HostVolume:
        path = str(value["mount_path"])
        if problem := mount_path_problem(path):
            raise ValueError(f"volume mount path {problem}")
        return cls(_volume_id(value["id"]), path)


def host_volumes(values: list | None) -> tuple[HostVolume, ...]:
    volumes = tuple(HostVolume.from_json(value) for value in values or ())
    if len({volume.id for volume in volumes}) != len(volumes):
        raise ValueError("a volume is listed twice")
    if len({volume.mount_path for volume in volumes}) != len(volumes):
        raise ValueError("two volumes are mounted at the same path")
    return volumes


@dataclass(frozen=True)
class DesiredVolume:
    """A volume the server is to keep: its size, and (when it is made) the volume it copies or
    the host whose data.img it adopts."""

    id: str
    size_gb: int
    source: str = ""
    adopt: str = ""

    @classmethod
    def from_json(cls, value: dict) -> DesiredVolume:
        size_gb = value["size_gb"]
        if isinstance(size_gb, bool) or not isinstance(size_gb, int) or size_gb < 1:
            raise ValueError(f"volume size_gb must be a whole number of GB ≥ 1, not {size_gb!r}")
        source = value.get("source") or ""
        adopt = str(value.get("adopt") or "")
        if adopt and not HOST_ID.fullmatch(adopt):
            raise ValueError(f"volume adopts the disk of {adopt!r}, which is no host id")
        return cls(_volume_id(value["id"]), size_gb, _volume_id(source) if source else "", adopt)


def _run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise HostError(f"{' '.join(command)} failed: {result.stderr.strip() or result.stdout}")
    return result.stdout


class VolumeStore:
    def __init__(self, state_dir: Path) -> None:
        self.folder = state_dir / "volumes"
        self.hosts_dir = state_dir / "hosts"
        # host id -> the volume that adopts its data.img once the host has it unmounted.
        self._adopting: dict[str, str] = {}
        # id -> the size asked of a volume that was mounted then: grown once it isn't.
        self._wanted_gb: dict[str, int] = {}

    def image(self, volume_id: str) -> Path:
        return self.folder / f"{_volume_id(volume_id)}.img"

    def mount_point(self, volume_id: str) -> Path:
        return self.folder / f"{_volume_id(volume_id)}.mnt"

    def sizes(self) -> dict[str, int]:
        """Every volume of this server and its size in GB."""
        if not self.folder.is_dir():
            return {}
        return {
            image.stem: image.stat().st_size // GIB
            for image in self.folder.glob("*.img")
            if VOLUME_ID.fullmatch(image.stem)
        }

    def apply(self, desired: list[DesiredVolume], in_use: set[str]) -> list[dict]:
        """Make, grow and delete volumes as the portal lists them; each one listed reported
        ({"id", "state": "ready" | "failed", "size_gb", "message"}). A volume in `in_use` (a host
        has it mounted) is never deleted."""
        # Only root may enter: the volumes' files are owned by the hosts' id ranges.
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Copies first: a snapshot is taken before its source grows or goes.
        ordered = sorted(desired, key=lambda volume: not volume.source)
        reports = []
        for volume in ordered:
            try:
                self.ensure(volume)
                waiting = self._adopting.get(volume.adopt) == volume.id
                if waiting:  # still the host's data.img, which it has mounted
                    size_gb = self.data_image(volume.adopt).stat().st_size // GIB
                else:
                    size_gb = self.sizes()[volume.id]
                state = "growing" if size_gb < volume.size_gb else "ready"
                reports.append({"id": volume.id, "state": state, "size_gb": size_gb})
            except HostError as error:
                reports.append({"id": volume.id, "state": "failed", "message": str(error)[:2000]})
        wanted = {volume.id for volume in desired}
        for volume_id in set(self.sizes()) - wanted - in_use:
            self.delete(volume_id)
        return sorted(reports, key=lambda report: report["id"])

    def ensure(self, volume: DesiredVolume) -> None:
        image = self.image(volume.id)
        if not image.exists() and volume.adopt and self.data_image(volume.adopt).exists():
            if os.path.ismount(self.hosts_dir / volume.adopt / "data"):
                self._adopting[volume.adopt] = volume.id
                return
            self.adopt(volume.adopt, volume.id)
        if not image.exists():
            self._make(volume)
        elif image.stat().st_size < volume.size_gb * GIB:
            if os.path.ismount(self.mount_point(volume.id)):
                self._wanted_gb[volume.id] = volume.size_gb  # when its host stops
            else:
                self._grow(volume.id, volume.size_gb)

    def data_image(self, host_id: str) -> Path:
        """The data disk a host had before data disks were volumes."""
        if not HOST_ID.fullmatch(host_id):
            raise HostError(f"host id {host_id!r} can't name a folder")
        return self.hosts_dir / host_id / "data.img"

    def adopt(self, host_id: str, volume_id: str) -> None:
        """The host's data.img as the volume `volume_id`'s image, unless the volume has one:
        the caller knows the host does not have it mounted."""
        self._adopting.pop(host_id, None)
        image, data = self.image(volume_id), self.data_image(host_id)
        if image.exists() or not data.exists():
            return
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        data.replace(image)

    def adopt_waiting(self, host_id: str) -> None:
        """The host's data.img adopted now if a volume waited for it (the host stopped)."""
        if host_id in self._adopting:
            self.adopt(host_id, self._adopting[host_id])

    def _make(self, volume: DesiredVolume) -> None:
        image, partial = self.image(volume.id), self.folder / f"{volume.id}.partial"
        needed = volume.size_gb * GIB
        if needed > shutil.disk_usage(self.folder).free:
            raise HostError(f"not enough disk for volume {volume.id}: {volume.size_gb} GB asked")
        if volume.source:
            source = self.image(volume.source)
            if not source.exists():
                raise HostError(f"volume {volume.id}: its source {volume.source} isn't here")
            # A copy of a mounted volume is what a power cut would leave: ext4's journal
            # makes it consistent when it is mounted.
            _run("cp", "--sparse=always", str(source), str(partial))
            if partial.stat().st_size < needed:
                with partial.open("r+b") as file:
                    file.truncate(needed)
                subprocess.run(["e2fsck", "-f", "-y", str(partial)], capture_output=True)
                _run("resize2fs", str(partial))
        else:
            with partial.open("wb") as file:
                file.truncate(needed)
            _run("mkfs.ext4", "-q", "-F", str(partial))
        partial.replace(image)  # a volume is whole or absent, whenever the agent dies

    def _grow(self, volume_id: str, size_gb: int) -> None:
        image = self.image(volume_id)
        self._wanted_gb.pop(volume_id, None)
        if image.stat().st_size >= size_gb * GIB:
            return
        with image.open("r+b") as file:
            file.truncate(size_gb * GIB)
        # e2fsck exits 1 when it fixed something: still fine for resize2fs.
        subprocess.run(["e2fsck", "-f", "-y", str(image)], capture_output=True)
        _run("resize2fs", str(image))

    def delete(self, volume_id: str) -> None:
        mount_point = self.mount_point(volume_id)
        if os.path.ismount(mount_point):
            _run("umount", str(mount_point))
        if mount_point.exists():
            mount_point.rmdir()
        self.image(volume_id).unlink(missing_ok=True)

    def binds(self, volumes: tuple[HostVolume, ...]) -> list[str]:
        """nspawn's arguments binding `volumes` into a host, each mounted here first (once,
        whichever hosts bind it)."""
        binds = []
        for volume in volumes:
            image, mount_point = self.image(volume.id), self.mount_point(volume.id)
            if not image.exists():
                raise HostError(f"volume {volume.id} isn't on this server")
            if not os.path.ismount(mount_point):
                if volume.id in self._wanted_gb:
                    self._grow(volume.id, self._wanted_gb[volume.id])
                mount_point.mkdir(mode=0o700, exist_ok=True)
                # nosuid, nodev: the tenant's root owns the files (an id-mapped bind).
                _run("mount", "-o", "loop,nosuid,nodev", str(image), str(mount_point))
            binds.append(f"--bind={mount_point}:{volume.mount_path}:idmap")
        return binds

    def release(self, volume_ids: list[str], in_use: set[str]) -> None:
        """Unmount the volumes a stopped host had, except those another running host has."""
        for volume_id in set(volume_ids) - in_use:
            mount_point = self.mount_point(volume_id)
            if os.path.ismount(mount_point):
                _run("umount", str(mount_point))  # the loop device goes with it (autoclear)
            if volume_id in self._wanted_gb:
                self._grow(volume_id, self._wanted_gb[volume_id])
