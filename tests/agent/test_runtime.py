"""Real hosts: systemd-nspawn containers with fake cards, a data disk, limits and shaping."""

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from loam_agent.hosts.model import DesiredHost
from loam_agent.hosts.reconcile import ssh_answers, ssh_host_keys
from loam_agent.hosts.runtime import HostRuntime, host_key

pytestmark = pytest.mark.containers

GIB = 1024**3


@pytest.fixture
def fake_cards(tmp_path) -> dict[str, str]:
    """Two card uuids -> char devices 195:N under tmp (as /dev/nvidiaN would be)."""
    devices = {}
    for minor in (0, 1):
        path = tmp_path / f"nvidia{minor}"
        os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))
        devices[f"GPU-test-{minor}"] = str(path)
    return devices


@pytest.fixture
def runtime(tmp_path, host_images, fake_cards, server_network):
    runtime = HostRuntime(tmp_path / "state", host_images, lambda: fake_cards, server_network)
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


def ssh(key: Path, address: str, command: str) -> str:
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(key),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=5",
            f"root@{address}",
            command,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def desired(host_id: str, key: Path, **changes) -> DesiredHost:
    shape = dict(
        id=host_id,
        generation=1,
        state="running",
        card_uuids=("GPU-test-0", "GPU-test-1"),
        vcpu=1,
        memory_mib=256,
        data_disk_gb=1,
        bandwidth_mbps=10,
        ssh_public_keys=(key.with_suffix(".pub").read_text(),),
    )
    return DesiredHost(**{**shape, **changes})


def data_size_gb(key: Path, address: str) -> float:
    return int(ssh(key, address, "df -B1 --output=size /data | tail -1")) / GIB


def test_a_host_lives_through_create_resize_stop_grow_start_remove(runtime, ssh_key):
    host_id = f"h-test-{uuid.uuid4().hex[:8]}"
    host = desired(host_id, ssh_key)
    started = time.monotonic()
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host_id).address
    assert ssh_answers(address), (runtime.folder(host_id) / "console.log").read_text()
    print(f"\ncreate -> SSH-able: {time.monotonic() - started:.2f} s")
    # What the agent reports for the portal to pin is the key pair this host made for itself.
    made = ssh(ssh_key, address, "cat /etc/ssh/ssh_host_*_key.pub").splitlines()
    assert ssh_host_keys(address) == tuple(sorted(" ".join(line.split()[:2]) for line in made))

    assert ssh(ssh_key, address, "ls /dev/nvidia0 /dev/nvidia1").split() == [
        "/dev/nvidia0",
        "/dev/nvidia1",
    ]
    assert 0.9 < data_size_gb(ssh_key, address) <= 1.0
    cgroups = runtime.cgroups(host_id)
    assert int(cgroups.memory_limit_file().read_text()) == 256 * 1024**2
    pids = cgroups.dirs[0] if cgroups.v2 else cgroups.v1["pids"]
    assert (pids / "pids.max").read_text().strip() == "16384"  # no fork bomb takes the server
    netns = f"loam-{host_key(host_id)}"
    qdisc = subprocess.run(
        ["tc", "qdisc", "show", "dev", f"vh-{host_key(host_id)}"], capture_output=True, text=True
    ).stdout
    assert "tbf" in qdisc and "10Mbit" in qdisc

    # Fewer cards: a restart. More memory: live.
    smaller = desired(host_id, ssh_key, generation=2, card_uuids=("GPU-test-0",), memory_mib=512)
    runtime.stop(host_id)
    runtime.start(smaller)
    assert ssh_answers(address)
    assert ssh(ssh_key, address, "ls /dev/ | grep -c '^nvidia[0-9]' || true").strip() == "1"
    assert int(cgroups.memory_limit_file().read_text()) == 512 * 1024**2
    ssh(ssh_key, address, "echo kept > /data/proof")
    runtime.set_limits(host_id, 1, 768)  # live, as the reconciler does for a running host
    assert int(cgroups.memory_limit_file().read_text()) == 768 * 1024**2
    assert ssh_answers(address, wait_s=1)

    pid = int((runtime.folder(host_id) / "pid").read_text())
    runtime.stop(host_id)
    assert not Path(f"/proc/{pid}").exists()
    assert runtime.inspect(host_id).card_uuids == ()
    assert (runtime.folder(host_id) / "data.img").exists()

    runtime.grow_disk(host_id, 2)
    runtime.start(desired(host_id, ssh_key, generation=3, data_disk_gb=2))
    assert ssh_answers(address)
    assert ssh(ssh_key, address, "cat /data/proof").strip() == "kept"
    assert 1.9 < data_size_gb(ssh_key, address) <= 2.0

    folder = runtime.folder(host_id)
    pid = int((folder / "pid").read_text())
    runtime.remove(host_id)
    assert not Path(f"/proc/{pid}").exists()
    assert str(folder) not in Path("/proc/mounts").read_text()
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(folder) not in losetup
    assert not Path(f"/run/netns/{netns}").exists()
    assert not cgroups.exist()
    assert not folder.exists()


def test_a_host_ordered_without_a_data_disk_gets_one_when_it_grows(runtime, ssh_key):
    host_id = f"h-test-{uuid.uuid4().hex[:8]}"
    host = desired(host_id, ssh_key, card_uuids=(), data_disk_gb=0, bandwidth_mbps=0)
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host_id).address
    assert ssh_answers(address)
    assert ssh(ssh_key, address, "mountpoint -q /data && echo disk || echo none").strip() == "none"

    runtime.stop(host_id)
    runtime.grow_disk(host_id, 1)
    runtime.start(desired(host_id, ssh_key, generation=2, card_uuids=(), data_disk_gb=1))
    assert ssh_answers(address)
    assert 0.9 < data_size_gb(ssh_key, address) <= 1.0
