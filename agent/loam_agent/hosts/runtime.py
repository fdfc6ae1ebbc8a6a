"""Hosts as systemd-nspawn containers: no daemon, one detached nspawn process per host.

Per host, state_dir/hosts/<id>/ holds the overlay's upper and work layers on the image and the
merged root (`root`, mounted while the host runs), data.img (ext4, loop-mounted at /data inside;
a data disk is a volume now, which adopts the data.img of a host made before: volumes.py),
the nspawn pid, the console log and state.json (the shape applied, the network index and the
host's network: group, forwarded ports, ingress rules). The network is a namespace `loam-<key>`
joined to the root namespace by a veth `vh-<key>` (10.213.N.1 root side, 10.213.N.2 inside, the
default route); `network.py` does the rest (NAT, published ports, security groups). CPU, memory
and device limits are cgroups the nspawn process enters before it execs, so everything in the
host inherits them. A host with cards also gets the server's NVIDIA driver user space
(`gpu_userspace.py`) bound read-only at its own paths, which PID 1's `ldconfig` makes resolve.

Isolation: every host runs in a user namespace of its own: root inside is an unprivileged range
of 65536 ids on the server (`uid_base` in its state, from 0x70000000 up, above the ranges nspawn
picks for other containers), a different one per host, so no capability a host holds counts
outside it. The image is the overlay's lower layer through an id-mapped mount (`idmap.py`), so
it reads as owned by the host's range without a file changed; the upper layer is written in the
range; the data disk is bound in id-mapped too, so its files stay owned by ids from 0 on the
disk itself.

nspawn runs in its own session with --register=no --keep-unit, so neither machined nor the agent's
service unit owns it: hosts survive an agent restart and are adopted again from their state files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from loam_agent.hosts.gpu_userspace import GpuUserspace, discover
from loam_agent.hosts.idmap import IDS, bind_shifted, shift_tree
from loam_agent.hosts.image import BuiltImage
from loam_agent.hosts.model import HOST_ID, ActualHost, DesiredHost, HostError, HostNetwork
from loam_agent.hosts.network import AttachedHost, Firewall, ServerNetwork, resolv_conf
from loam_agent.hosts.saved_images import HostLayers, find_image, save_host
from loam_agent.hosts.shared_fs import SharedFileSystems
from loam_agent.hosts.usage import host_usage
from loam_agent.hosts.volumes import DATA_DISK_PATH, DesiredVolume, VolumeStore

STOP_TIMEOUT_S = 10.0
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# What a host may open besides its cards and the control devices (cgroup v1's allow-list):
# the pseudo-devices nspawn creates in its /dev (null, zero, full, random, urandom, tty,
# console, ptmx) and the terminals under /dev/pts.
BASE_DEVICES = (
    "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
    "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm",
)  # fmt: skip
# Capabilities a host's root never needs, dropped even inside its own user namespace.
DROPPED_CAPABILITIES = "CAP_SYS_MODULE,CAP_SYS_RAWIO,CAP_MKNOD"
MAX_PROCESSES = 16384
# Written into every host at start from its spec (docs/agent-protocol.md, "Hosts").
USER_CA_FILE, USER_CA_DROP_IN = "etc/ssh/loam_user_ca.pub", "etc/ssh/sshd_config.d/loam-ca.conf"
SERVICES_DIR = "etc/loam/services"
GPU_LOADER_CONF = "etc/ld.so.conf.d/loam-gpu.conf"
# PID 1's first step: the host's loader learns the driver's libraries bound in (or forgets
# them) before anything in the host can need them; then the image's init ("$0").
REFRESH_LOADER_THEN = ("/bin/sh", "-c", 'ldconfig; exec "$0"')
_NO_LINK_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
CPU_PERIOD_US = 100_000
FIRST_INDEX, LAST_INDEX = 1, 254
# Hosts' id ranges: 65536 ids each from here, below systemd's 0x7FFE0000 (nspawn's own `pick`
# stays below 0x70000000).
FIRST_UID_BASE, UID_BASES = 0x70000000, (0x7FFE0000 - 0x70000000) // 65536


def host_key(host_id: str) -> str:
    """8 hex characters naming the host's netns, veth and cgroups (interface names ≤ 15)."""
    return hashlib.sha256(host_id.encode()).hexdigest()[:8]


def _make_disk(image: Path, size_gb: int) -> None:
    """A sparse ext4 image of `size_gb`, the host's data disk."""
    with image.open("wb") as file:
        file.truncate(size_gb * 1024**3)
    _run("mkfs.ext4", "-q", "-F", str(image))


def _run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise HostError(f"{' '.join(command)} failed: {result.stderr.strip() or result.stdout}")
    return result.stdout


class Cgroups:
    """A host's cpu, memory, pids and (v1) devices cgroups, on cgroup v2 (unified) or v1 (one
    tree per controller)."""

    def __init__(self, key: str, root: Path = CGROUP_ROOT) -> None:
        self.v2 = (root / "cgroup.controllers").exists()
        if self.v2:
            # A tree of our own under the root: the agent's own service cgroup has processes, and
            # v2 forbids controllers on a cgroup with processes of its own.
            self.parent = root / "loam-hosts"
            self.dirs = [self.parent / key]
            self.v1: dict[str, Path] = {}
        else:
            self.v1 = {
                controller: _v1_dir(root, controller) / f"loam-{key}"
                for controller in ("memory", "cpu", "pids", "devices")
                if controller in ("memory", "cpu") or (root / controller).is_dir()
            }
            self.dirs = list(self.v1.values())

    def create(self, vcpu: int, memory_mib: int) -> None:
        if self.v2:
            self.parent.mkdir(exist_ok=True)
            (self.parent / "cgroup.subtree_control").write_text("+cpu +memory +pids")
        for directory in self.dirs:
            directory.mkdir(exist_ok=True)
        self.set(vcpu, memory_mib)
        # A fork bomb in one host must not exhaust the server's process table.
        if self.v2:
            (self.dirs[0] / "pids.max").write_text(str(MAX_PROCESSES))
        elif "pids" in self.v1:
            (self.v1["pids"] / "pids.max").write_text(str(MAX_PROCESSES))

    def set(self, vcpu: int, memory_mib: int) -> None:
        memory = memory_mib * 1024 * 1024
        if self.v2:
            (self.dirs[0] / "memory.max").write_text(str(memory))
            (self.dirs[0] / "cpu.max").write_text(f"{vcpu * CPU_PERIOD_US} {CPU_PERIOD_US}")
        else:
            (self.v1["memory"] / "memory.limit_in_bytes").write_text(str(memory))
            (self.v1["cpu"] / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (self.v1["cpu"] / "cpu.cfs_quota_us").write_text(str(vcpu * CPU_PERIOD_US))

    def allow_devices(self, paths: list[str]) -> None:
        """Only these device files (and the pseudo-devices) may be opened in the host: v1's
        device list. On v2 there is no list (it would take a BPF program); there a host still
        can't make a device node (its user namespace) and finds only the ones bound in."""
        devices = self.v1.get("devices")
        if devices is None:
            return
        (devices / "devices.deny").write_text("a")
        allowed = list(BASE_DEVICES)
        for path in paths:
            info = os.stat(path)
            kind = "c" if stat.S_ISCHR(info.st_mode) else "b"
            allowed.append(f"{kind} {os.major(info.st_rdev)}:{os.minor(info.st_rdev)} rw")
        for entry in allowed:
            (devices / "devices.allow").write_text(entry)

    @property
    def cpu_dir(self) -> Path:
        """Where the host's CPU time is counted (v1: cpuacct, which shares cpu's hierarchy)."""
        return self.dirs[0] if self.v2 else self.v1["cpu"]

    @property
    def memory_dir(self) -> Path:
        return self.dirs[0] if self.v2 else self.v1["memory"]

    def memory_limit_file(self) -> Path:
        return self.dirs[0] / ("memory.max" if self.v2 else "memory.limit_in_bytes")

    def procs_files(self) -> list[str]:
        return [str(directory / "cgroup.procs") for directory in self.dirs]

    def remove(self) -> None:
        for directory in self.dirs:
            # A cgroup goes once its processes are gone; they may take a moment to be reaped.
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)

    def exist(self) -> bool:
        return any(directory.exists() for directory in self.dirs)


def _v1_dir(root: Path, controller: str) -> Path:
    """Where this process sits in a v1 hierarchy (inside a container it's not always `/`)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            nested = root / controller / path.lstrip("/")
            return nested if nested.is_dir() else root / controller
    return root / controller


class HostRuntime:
    def __init__(
        self,
        state_dir: Path,
        images: Path,
        card_devices: Callable[[], dict[str, str]],
        server_network: ServerNetwork,
        gpu_userspace: Callable[[], GpuUserspace] = discover,
        saved_images: Path | None = None,
    ) -> None:
        self.hosts_dir = state_dir / "hosts"
        self.shared_fs = SharedFileSystems(state_dir / "shared-fs")
        self.images = images
        self.saved_images = saved_images or state_dir / "saved-images"
        self.firewall = Firewall(server_network)
        # host id -> the network the portal wants now, ahead of the host's own worker.
        self._expected: dict[str, HostNetwork] = {}
        self._expected_lock = threading.Lock()
        # uuid -> device file (/dev/nvidiaN); read when a host starts, so new cards count.
        self._card_devices = card_devices
        # The driver's libraries and tools; read when a host with cards starts (upgrades count).
        self._gpu_userspace = gpu_userspace
        self._index_lock = threading.Lock()
        self.volumes = VolumeStore(state_dir)

    # -- paths and state -------------------------------------------------------------------

    def folder(self, host_id: str) -> Path:
        if not HOST_ID.fullmatch(host_id):
            raise HostError(f"host id {host_id!r} can't name a folder")
        return self.hosts_dir / host_id

    def _state(self, host_id: str) -> dict | None:
        try:
            return json.loads((self.folder(host_id) / "state.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _save(self, host_id: str, state: dict) -> None:
        path = self.folder(host_id) / "state.json"
        path.with_suffix(".tmp").write_text(json.dumps(state))
        path.with_suffix(".tmp").replace(path)

    def _pid(self, host_id: str) -> int | None:
        """The nspawn pid when it's still our nspawn (a reused pid after a reboot isn't)."""
        try:
            pid = int((self.folder(host_id) / "pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        machine = f"loam-{host_key(host_id)}".encode()
        return pid if b"systemd-nspawn" in cmdline[0] and machine in cmdline else None

    def list(self) -> list[str]:
        if not self.hosts_dir.is_dir():
            return []
        return sorted(path.name for path in self.hosts_dir.iterdir() if path.is_dir())

    def inspect(self, host_id: str) -> ActualHost | None:
        state = self._state(host_id)
        if state is None:
            return None
        return ActualHost(
            id=host_id,
            running=self._pid(host_id) is not None,
            address=f"10.213.{state['index']}.2",
            card_uuids=tuple(state.get("card_uuids", ())),
            vcpu=state["vcpu"],
            memory_mib=state["memory_mib"],
            data_disk_gb=state["data_disk_gb"],
            bandwidth_mbps=state["bandwidth_mbps"],
            network=_network(state),
            extra={"netns": state["netns"], "index": state["index"]},
        )

    def cgroups(self, host_id: str) -> Cgroups:
        return Cgroups(host_key(host_id))

    def usage(self, host_id: str) -> dict | None:
        """What the host uses now (`usage.host_usage`: CPU, memory, data disk, network), or
        None when it isn't running."""
        state = self._state(host_id)
        if state is None or not self._pid(host_id):
            return None
        cgroups = self.cgroups(host_id)
        data = self.folder(host_id) / "data"
        if state.get("data_volume"):
            data = self.volumes.mount_point(state["data_volume"])
        return host_usage(
            v2=cgroups.v2,
            cpu_dir=cgroups.cpu_dir,
            memory_dir=cgroups.memory_dir,
            data_mount=data if _mounted(data) else None,
            veth=state["veth"],
        )

    # -- lifecycle -------------------------------------------------------------------------

    def create(self, host: DesiredHost, index: int | None = None) -> None:
        """The folder, the data disk and the network; `start` runs it."""
        if find_image(self.images, self.saved_images, host.image) is None:
            raise HostError(
                f"image {host.image!r} isn't built on this server; "
                f"run `loam-agent image build --name {host.image}`"
            )
        folder = self.folder(host.id)
        if folder.exists():
            self.remove(host.id)  # half-made by an agent that died mid-create
        needed = host.data_disk_gb * 1024**3
        free = shutil.disk_usage(self.hosts_dir if self.hosts_dir.exists() else "/").free
        if needed > free:
            raise HostError(
                f"not enough disk: {host.data_disk_gb} GB asked, {free // 1024**3} GB free"
            )
        # Only root on the server may enter: hosts' files are owned by their id ranges, which
        # are nobody's on the server, and their disks are mounted in here.
        self.hosts_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.hosts_dir.chmod(0o700)
        (folder / "upper").mkdir(parents=True)
        (folder / "data").mkdir()
        try:
            with self._index_lock:
                index = index or self._free_index()
                uid_base = self._free_uid_base()
                key = host_key(host.id)
                state = {
                    "generation": host.generation,
                    "image": host.image,
                    "index": index,
                    "uid_base": uid_base,
                    "uid_shifted": True,  # nothing written yet
                    "netns": f"loam-{key}",
                    "veth": f"vh-{key}",
                    "card_uuids": [],
                    "vcpu": host.vcpu,
                    "memory_mib": host.memory_mib,
                    "data_disk_gb": host.data_disk_gb,
                    "bandwidth_mbps": 0,
                    "network": host.network.to_json(),
                }
                self._save(host.id, state)
            if host.data_disk_gb:
                _make_disk(folder / "data.img", host.data_disk_gb)
            self._network_up(state)
            self.set_bandwidth(host.id, host.bandwidth_mbps)
            self.apply_firewall()
        except Exception:
            self.remove(host.id)
            raise

    def _free_index(self) -> int:
        used = {state["index"] for host_id in self.list() if (state := self._state(host_id))}
        # Networks this agent doesn't know (another state dir, a crashed test) are taken too:
        # a second 10.213.N.0/24 route would make both hosts unreachable.
        used |= {
            int(match)
            for match in re.findall(r"inet 10\.213\.(\d+)\.1/", _run("ip", "-o", "-4", "addr"))
        }
        for index in range(FIRST_INDEX, LAST_INDEX + 1):
            if index not in used:
                return index
        raise HostError(f"no free network: all {LAST_INDEX} host networks are in use")

    def _free_uid_base(self) -> int:
        """The lowest id range no host of this server has (called under the index lock)."""
        used = {state.get("uid_base") for host_id in self.list() if (state := self._state(host_id))}
        for number in range(UID_BASES):
            base = FIRST_UID_BASE + number * IDS
            if base not in used:
                return base
        raise HostError(f"no free id range: all {UID_BASES} host ranges are in use")

    def _uid_base(self, host_id: str, state: dict) -> int:
        """The host's id range; a host made by an older agent (its files owned from 0) gets one
        now, and its upper layer is moved into it once."""
        if "uid_base" not in state:
            with self._index_lock:
                state["uid_base"] = self._free_uid_base()
                self._save(host_id, state)  # first: a walk cut short resumes in the same range
        if not state.get("uid_shifted"):
            shift_tree(self.folder(host_id) / "upper", state["uid_base"])
            state["uid_shifted"] = True
            self._save(host_id, state)
        return state["uid_base"]

    def _network_up(self, state: dict) -> None:
        netns, veth, index = state["netns"], state["veth"], state["index"]
        if not Path(f"/run/netns/{netns}").exists():
            _run("ip", "netns", "add", netns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
            _run("ip", "addr", "add", f"10.213.{index}.1/24", "dev", veth)
            _run("ip", "link", "set", veth, "up")
            _run("ip", "-n", netns, "addr", "add", f"10.213.{index}.2/24", "dev", "eth0")
            _run("ip", "-n", netns, "link", "set", "eth0", "up")
            _run("ip", "-n", netns, "link", "set", "lo", "up")
        # Each time, so that a namespace an older agent (or a crash) left half made is whole.
        _run("ip", "-n", netns, "route", "replace", "default", "via", f"10.213.{index}.1")
        # The namespace belongs to the server's user namespace, not the host's: let the host's
        # root bind sshd's port 22 and ping, as on any machine (its own namespace only).
        for setting in (
            "net.ipv4.ip_unprivileged_port_start=0",
            "net.ipv4.ping_group_range=0 2147483647",
        ):
            _run("ip", "netns", "exec", netns, "sysctl", "-qw", setting)

    def start(self, host: DesiredHost) -> None:
        state = self._state(host.id)
        if state is None:
            raise HostError(f"host {host.id} doesn't exist here")
        if self._pid(host.id):
            return
        folder = self.folder(host.id)
        devices = self._card_devices()
        unknown = [uuid for uuid in host.card_uuids if uuid not in devices]
        if unknown:
            raise HostError(f"no such card on this server: {', '.join(unknown)}")
        image = find_image(self.images, self.saved_images, state["image"])
        if image is None:
            raise HostError(f"image {state['image']!r} isn't built on this server")
        self._network_up(state)
        uid_base = self._uid_base(host.id, state)
        root = self._mount_root(folder, image[0], uid_base)
        self._write_into(root, "root/.ssh/authorized_keys", _authorized_keys(host), 0o600)
        self._write_into(root, "etc/resolv.conf", resolv_conf(self.firewall.server), 0o644)
        self._write_user_ca(root, host.ssh_user_ca_keys)
        self._write_services(root, host)
        gpu = self._gpu_userspace() if host.card_uuids else GpuUserspace()
        # nspawn made an empty file in the host for each one bound last time: gone, so a host
        # that no longer has cards finds no library at all.
        for path in state.get("gpu_files", ()):
            self._remove_from(root, path.lstrip("/"), empty_file_only=True)
        if gpu.library_dirs:
            folders = "".join(f"{folder}\n" for folder in gpu.library_dirs)
            self._write_into(root, GPU_LOADER_CONF, folders, 0o644)
        else:
            self._remove_from(root, GPU_LOADER_CONF)
        data, binds = folder / "data", [f"--bind-ro={file}" for file in gpu.files]
        for volume in host.volumes:
            if volume.mount_path == DATA_DISK_PATH:  # its data.img, if it has one, is this
                self.volumes.adopt(host.id, volume.id)
        if (folder / "data.img").exists():  # none when ordered without one, or it's a volume
            if not _mounted(data):
                # nosuid, nodev: the tenant's root owns this disk's files (an id-mapped bind),
                # so a setuid binary it leaves there must mean nothing on the server.
                _run("mount", "-o", "loop,nosuid,nodev", str(folder / "data.img"), str(data))
            # Id-mapped: root inside owns what the disk's uid 0 owns, whatever the range.
            binds.append(f"--bind={data}:/data:idmap")
        state["shared_fs"] = host.shared_fs.name if host.shared_fs else ""
        state["volumes"] = [volume.id for volume in host.volumes]  # released by a failed start
        state["data_volume"] = next(
            (volume.id for volume in host.volumes if volume.mount_path == DATA_DISK_PATH), ""
        )
        self._save(host.id, state)
        if host.shared_fs:
            binds.append(f"--bind={self.shared_fs.mount(host.shared_fs)}:/shared")
        binds += self.volumes.binds(host.volumes)
        device_files = []
        for uuid in sorted(host.card_uuids):
            # At its own name, /dev/nvidia<minor>, as nvidia-container-toolkit binds it: the
            # driver opens a card's device by its minor number. NVML and CUDA in the host
            # number the cards they can open from 0.
            minor = os.minor(os.stat(devices[uuid]).st_rdev)
            binds.append(f"--bind={devices[uuid]}:/dev/nvidia{minor}")
            device_files.append(devices[uuid])
        # A host without cards (a CPU host, or a GPU host started without its cards) gets no
        # /dev/nvidia* at all.
        controls = [d for d in CONTROL_DEVICES if host.card_uuids and os.path.exists(d)]
        binds += [f"--bind={device}" for device in controls]
        cgroups = self.cgroups(host.id)
        cgroups.create(host.vcpu, host.memory_mib)
        cgroups.allow_devices(device_files + controls)
        nspawn = [
            "systemd-nspawn",
            "-q",
            "-D",
            str(root),
            "--register=no",
            "--keep-unit",
            f"--private-users={uid_base}:{IDS}",
            "--private-users-ownership=off",
            f"--drop-capability={DROPPED_CAPABILITIES}",
            "--resolv-conf=off",
            "-M",
            state["netns"],
            *binds,
            *REFRESH_LOADER_THEN,
            "/usr/local/sbin/loam-init",
        ]
        # Enter the cgroups and the network namespace, then become nspawn: the whole host
        # inherits them. nspawn can't join the namespace itself from inside the host's user
        # namespace, and mustn't: owned by the server's, it is one the host's root can't
        # reconfigure (its address, its route, the shaping on its side of the link).
        enter = (
            'for procs in "$@"; do echo $$ > "$procs"; done; '
            f'exec "$NSENTER" --net=/run/netns/{state["netns"]} "$NSPAWN" '
        ) + " ".join(f"'{argument}'" for argument in nspawn[1:])
        with (folder / "console.log").open("ab") as console:
            process = subprocess.Popen(
                ["sh", "-c", enter, "enter", *cgroups.procs_files()],
                env={
                    **os.environ,
                    "NSPAWN": shutil.which("systemd-nspawn") or "systemd-nspawn",
                    "NSENTER": shutil.which("nsenter") or "nsenter",
                },
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=console,
                start_new_session=True,
            )
        (folder / "pid").write_text(str(process.pid))
        state.update(
            generation=host.generation,
            card_uuids=sorted(host.card_uuids),
            gpu_files=list(gpu.files),
            vcpu=host.vcpu,
            memory_mib=host.memory_mib,
        )
        self._save(host.id, state)
        # nspawn's argv is checked by _pid; give exec a moment before anyone looks.
        for _ in range(20):
            if self._pid(host.id) or process.poll() is not None:
                break
            time.sleep(0.05)
        if process.poll() is not None:
            log = (folder / "console.log").read_text(errors="replace")[-1500:]
            self._stop_leftovers(host.id)
            raise HostError(f"the container exited at once ({process.returncode}): {log}")

    @staticmethod
    def _mount_root(folder: Path, image: Path, uid_base: int) -> Path:
        """The host's root: an overlay of its own upper layer on the image, which it sees
        through an id-mapped, read-only mount as owned by its range."""
        root, lower, upper = folder / "root", folder / "lower", folder / "upper"
        for layer in (lower, upper, folder / "work", root):
            layer.mkdir(exist_ok=True)
        os.chown(upper, uid_base, uid_base)  # the root folder itself is the host root's
        if not _mounted(lower):
            bind_shifted(image, lower, uid_base)
        if not _mounted(root):
            options = f"lowerdir={lower},upperdir={upper},workdir={folder / 'work'}"
            _run("mount", "-t", "overlay", "overlay", "-o", options, str(root))
        return root

    def _write_user_ca(self, root: Path, keys: tuple[str, ...]) -> None:
        """The CAs whose user certificates sshd takes (the portal's web terminal): none, no
        files, so a CA dropped from the spec stops counting at the next start."""
        if keys:
            self._write_into(root, USER_CA_FILE, "".join(f"{key.strip()}\n" for key in keys), 0o644)
            drop_in = f"TrustedUserCAKeys /{USER_CA_FILE}\n"
            self._write_into(root, USER_CA_DROP_IN, drop_in, 0o644)
        else:
            self._remove_from(root, USER_CA_DROP_IN)
            self._remove_from(root, USER_CA_FILE)

    def _write_services(self, root: Path, host: DesiredHost) -> None:
        """One env file per service the host's init starts; those no longer listed go."""
        for service in host.services:
            lines = {
                "LOAM_SERVICE_PORT": str(service.port),
                "LOAM_SERVICE_BASE_URL": service.base_url,
                "LOAM_SERVICE_TOKEN": service.token,
            }
            text = "".join(f"{key}={shlex.quote(value)}\n" for key, value in lines.items())
            self._write_into(root, f"{SERVICES_DIR}/{service.name}.env", text, 0o600)
        listed = {f"{service.name}.env" for service in host.services}
        for name in self._names_in(root, SERVICES_DIR):
            if name.endswith(".env") and name not in listed:
                self._remove_from(root, f"{SERVICES_DIR}/{name}")

    # The tenant owns everything under a host's root: each step is opened without following
    # links, so a link planted in the host (/root/.ssh -> /etc) can't make the agent write or
    # remove on the server.

    @staticmethod
    def _write_into(root: Path, relative: str, text: str, mode: int) -> None:
        """Write a file in the host's root, owned by the host's root (the first id of its range,
        which owns the root folder); missing folders are made, for the host's root alone."""
        owner = root.stat()
        *parents, name = relative.split("/")
        try:
            folder = _open_folder(root, parents, owner)
        except OSError as error:
            raise HostError(f"can't write /{relative} in the host: {error.strerror}") from None
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
            file = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, dir_fd=folder)
            with os.fdopen(file, "w") as opened:
                opened.write(text)
                os.fchown(opened.fileno(), owner.st_uid, owner.st_gid)
                os.fchmod(opened.fileno(), mode)
        except OSError as error:
            raise HostError(f"can't write /{relative} in the host: {error.strerror}") from None
        finally:
            os.close(folder)

    @staticmethod
    def _remove_from(root: Path, relative: str, empty_file_only: bool = False) -> None:
        """Remove a file of the host's root if it is there (`empty_file_only`: only an empty
        regular file, such as a mount point nspawn made)."""
        *parents, name = relative.split("/")
        try:
            folder = _open_folder(root, parents)
        except FileNotFoundError:
            return
        except OSError as error:
            raise HostError(f"can't remove /{relative} in the host: {error.strerror}") from None
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if not empty_file_only or (stat.S_ISREG(info.st_mode) and info.st_size == 0):
                os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        except OSError as error:
            raise HostError(f"can't remove /{relative} in the host: {error.strerror}") from None
        finally:
            os.close(folder)

    @staticmethod
    def _names_in(root: Path, relative: str) -> list[str]:
        """The names in a folder of the host's root; none when it isn't there."""
        try:
            folder = _open_folder(root, relative.split("/"))
        except FileNotFoundError:
            return []
        except OSError as error:
            raise HostError(f"can't list /{relative} in the host: {error.strerror}") from None
        try:
            return os.listdir(folder)
        finally:
            os.close(folder)

    def stop(self, host_id: str) -> None:
        pid = self._pid(host_id)
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self._alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._alive(pid):
                os.killpg(pid, signal.SIGKILL)
                while self._alive(pid):
                    time.sleep(0.05)
        self._stop_leftovers(host_id)
        state = self._state(host_id)
        if state is not None:
            state["card_uuids"] = []  # a stopped host holds no cards
            self._save(host_id, state)
        self._unmount_unused_shared_fs()

    def _unmount_unused_shared_fs(self) -> None:
        """An organization's file system stays mounted while one of its hosts runs here."""
        in_use = set()
        for other in self.list():
            state = self._state(other)
            if state and state.get("shared_fs") and self._pid(other):
                in_use.add(state["shared_fs"])
        self.shared_fs.unmount_unused(in_use)

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            # Reap it when it's our child (the agent that started it is still running).
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"

    def _stop_leftovers(self, host_id: str) -> None:
        data = self.folder(host_id) / "data"
        if _mounted(data):
            _run("umount", str(data))  # the loop device goes with it (autoclear)
        for layer in ("root", "lower"):  # the overlay, then the image under it
            mount = self.folder(host_id) / layer
            if _mounted(mount):
                _run("umount", str(mount))
        (self.folder(host_id) / "pid").unlink(missing_ok=True)
        self.cgroups(host_id).remove()
        state = self._state(host_id) or {}
        self.volumes.release(state.get("volumes", []), self._volumes_in_use())
        self.volumes.adopt_waiting(host_id)

    def _volumes_in_use(self) -> set[str]:
        """The volumes the running hosts have."""
        return {
            volume_id
            for host_id in self.list()
            if self._pid(host_id) and (state := self._state(host_id))
            for volume_id in state.get("volumes", ())
        }

    def apply_volumes(self, volumes: list[DesiredVolume]) -> list[dict]:
        """The server's volumes as the portal lists them (`volumes.VolumeStore.apply`)."""
        return self.volumes.apply(volumes, self._volumes_in_use())

    def save_image(self, host_id: str, name: str) -> BuiltImage:
        """The stopped host's root as the saved image `name` (`saved_images.py`)."""
        state = self._state(host_id)
        if state is None or self._pid(host_id):
            raise HostError(f"host {host_id} can be saved only when it exists and is stopped")
        image = find_image(self.images, self.saved_images, state["image"])
        if image is None:
            raise HostError(f"host {host_id}'s image {state['image']!r} isn't on this server")
        layers = HostLayers(
            host_id=host_id,
            image=image[0],
            image_digest=image[1].digest,
            upper=self.folder(host_id) / "upper",
            uid_base=self._uid_base(host_id, state),
            gpu_files=tuple(state.get("gpu_files", ())),
        )
        return save_host(self.saved_images, name, layers)

    def set_limits(self, host_id: str, vcpu: int, memory_mib: int) -> None:
        self.cgroups(host_id).set(vcpu, memory_mib)
        state = self._state(host_id) or {}
        state.update(vcpu=vcpu, memory_mib=memory_mib)
        self._save(host_id, state)

    def grow_disk(self, host_id: str, data_disk_gb: int) -> None:
        if self._pid(host_id):
            raise HostError("the data disk can only grow while the host is stopped")
        data = self.folder(host_id) / "data.img"
        if not data.exists():  # a host ordered without a data disk gets its first one
            _make_disk(data, data_disk_gb)
        else:
            with data.open("r+b") as file:
                file.truncate(data_disk_gb * 1024**3)
            # e2fsck exits 1 when it fixed something: still fine for resize2fs.
            subprocess.run(["e2fsck", "-f", "-y", str(data)], capture_output=True)
            _run("resize2fs", str(data))
        state = self._state(host_id) or {}
        state["data_disk_gb"] = data_disk_gb
        self._save(host_id, state)

    def set_bandwidth(self, host_id: str, mbps: int) -> None:
        state = self._state(host_id)
        if state is None:
            raise HostError(f"host {host_id} doesn't exist here")
        veth, netns = state["veth"], state["netns"]
        ends = [("tc",), ("ip", "netns", "exec", netns, "tc")]
        devices = [veth, "eth0"]
        for prefix, device in zip(ends, devices, strict=True):
            subprocess.run([*prefix, "qdisc", "del", "dev", device, "root"], capture_output=True)
            if mbps:
                _run(
                    *prefix,
                    "qdisc",
                    "add",
                    "dev",
                    device,
                    "root",
                    "tbf",
                    "rate",
                    f"{mbps}mbit",
                    "burst",
                    "64kb",
                    "latency",
                    "50ms",
                )
        state["bandwidth_mbps"] = mbps
        self._save(host_id, state)

    def set_network(self, host_id: str, network: HostNetwork) -> None:
        """Forwarded ports and ingress rules, live (a running host keeps running); kept in the
        host's state once applied."""
        state = self._state(host_id)
        if state is None:
            raise HostError(f"host {host_id} doesn't exist here")
        self.apply_firewall({host_id: network})
        state["network"] = network.to_json()
        self._save(host_id, state)

    def expect_networks(self, networks: dict[str, HostNetwork]) -> None:
        """The networks the portal's latest list gives its hosts (a host leaving the list:
        none), applied at once in one firewall change, before each host's worker gets to it:
        a port or an address freed by one host and given to another never points at both."""
        with self._expected_lock:
            if all(self._expected.get(host_id) == network for host_id, network in networks.items()):
                return
            self._expected.update(networks)
        self.apply_firewall()

    def apply_firewall(self, changes: dict[str, HostNetwork] | None = None) -> None:
        """Every host's rules, from the state files (the portal's latest network first, then
        `changes`): at start, and after any change."""
        with self._expected_lock:
            wanted = {**self._expected, **(changes or {})}
        hosts = []
        for host_id in self.list():
            state = self._state(host_id)
            if state is not None:
                hosts.append(
                    AttachedHost(
                        key=host_key(host_id),
                        veth=state["veth"],
                        address=f"10.213.{state['index']}.2",
                        network=wanted.get(host_id) or _network(state),
                    )
                )
        self.firewall.apply(hosts)

    def harden(self) -> None:
        """What an older agent left open, closed at start: the hosts' folder for root alone, and
        data disks mounted without nosuid and nodev."""
        if self.hosts_dir.is_dir():
            self.hosts_dir.chmod(0o700)
        for host_id in self.list():
            data = self.folder(host_id) / "data"
            if _mounted(data):
                _run("mount", "-o", "remount,nosuid,nodev", str(data))

    def remove(self, host_id: str) -> None:
        folder = self.folder(host_id)
        state = self._state(host_id)
        self.stop(host_id)
        netns = state["netns"] if state else f"loam-{host_key(host_id)}"
        if Path(f"/run/netns/{netns}").exists():
            _run("ip", "netns", "del", netns)  # the veth goes with it
        shutil.rmtree(folder, ignore_errors=True)
        with self._expected_lock:
            self._expected.pop(host_id, None)
        self.apply_firewall()


def _open_folder(root: Path, parts: list[str], owner: os.stat_result | None = None) -> int:
    """A descriptor of the folder root/parts, each step opened without following a link;
    with `owner`, missing steps are made (0700, owned as `owner`), else FileNotFoundError."""
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            try:
                inner = os.open(part, _NO_LINK_DIRECTORY, dir_fd=folder)
            except FileNotFoundError:
                if owner is None:
                    raise
                os.mkdir(part, 0o700, dir_fd=folder)
                os.chown(part, owner.st_uid, owner.st_gid, dir_fd=folder)
                inner = os.open(part, _NO_LINK_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
    except BaseException:
        os.close(folder)
        raise
    return folder


def _mounted(path: Path) -> bool:
    """Whether something is mounted at `path`, as the kernel's mount table says (os.path.ismount
    misses a bind mount of a folder of the same file system, such as the id-mapped image)."""
    target = os.path.realpath(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4]
        # Spaces, tabs, newlines and backslashes are escaped in octal there.
        unescaped = re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), mount_point)
        if unescaped == target:
            return True
    return False


def _network(state: dict) -> HostNetwork:
    try:
        return HostNetwork.from_json(state.get("network"))
    except (KeyError, TypeError, ValueError):
        return HostNetwork()  # written by this agent: only a hand-edited file gets here


def _authorized_keys(host: DesiredHost) -> str:
    return "".join(f"{key.strip()}\n" for key in host.ssh_public_keys)
