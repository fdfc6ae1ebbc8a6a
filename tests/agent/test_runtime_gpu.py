"""Real hosts with the server's GPU user space: the fake NVIDIA driver (tests/agent/fake_nvml)
installed on this machine as a driver is, in a folder a loader cache lists, with its tools."""

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from loam_agent.hosts.gpu_userspace import discover
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import HostRuntime

from tests.agent.test_runtime import desired, ssh
from tests.agent.test_runtime_network import SSH_OPTIONS
from tests.agent_server import install_fake_driver

pytestmark = pytest.mark.containers

SERVER_CARDS = 4


def card_uuid(minor: int) -> str:
    """The UUID the fake NVML gives the card of this minor number."""
    return f"GPU-fa4e0000-0000-0000-0000-{minor:012d}"


@pytest.fixture
def fake_driver():
    """(folder, loader cache, PATH): the fake driver under /var/tmp (nspawn puts a tmpfs on a
    host's /tmp, which would hide what a start leaves in the host's root)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed, so the fake driver can't be built")
    folder = Path(tempfile.mkdtemp(prefix="loam-fake-driver-", dir="/var/tmp"))
    try:
        cache, tools = install_fake_driver(folder)
        yield folder, cache, str(tools)
    finally:
        shutil.rmtree(folder)


@pytest.fixture
def server_cards(tmp_path) -> dict[str, str]:
    """The server's 4 cards: uuid -> a char device 195:N under tmp (as /dev/nvidiaN)."""
    devices = {}
    for minor in range(SERVER_CARDS):
        path = tmp_path / f"nvidia{minor}"
        os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))
        devices[card_uuid(minor)] = str(path)
    return devices


@pytest.fixture
def runtime(tmp_path, host_images, server_cards, server_network, fake_driver):
    _, cache, tools = fake_driver
    runtime = HostRuntime(
        tmp_path / "state",
        host_images,
        lambda: server_cards,
        server_network,
        gpu_userspace=lambda: discover(cache, search_path=tools),
    )
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


NVML_BY_NAME = """
import ctypes
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
count = ctypes.c_uint()
assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
for index in range(count.value):
    handle, uuid = ctypes.c_void_p(), ctypes.create_string_buffer(96)
    assert nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0
    assert nvml.nvmlDeviceGetUUID(handle, uuid, 96) == 0
    print(index, uuid.value.decode())
"""


def test_a_host_sees_exactly_its_cards_through_the_servers_driver_and_none_once_they_go(
    runtime, ssh_key, fake_driver
):
    folder, _, tools = fake_driver
    host_id = f"h-test-{uuid.uuid4().hex[:8]}"
    host = desired(host_id, ssh_key, card_uuids=(card_uuid(2), card_uuid(3)), bandwidth_mbps=0)
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host_id).address
    assert ssh_answers(address), (runtime.folder(host_id) / "console.log").read_text()

    # Bound at their own names; the driver numbers the cards it can reach from 0.
    assert ssh(ssh_key, address, "ls /dev/ | grep -E '^nvidia[0-9]+$'").split() == [
        "nvidia2",
        "nvidia3",
    ]
    python = ssh(ssh_key, address, f"python3 -c '{NVML_BY_NAME}'")
    assert python.splitlines() == [f"0 {card_uuid(2)}", f"1 {card_uuid(3)}"]
    smi = ssh(ssh_key, address, f"{tools}/nvidia-smi -L")
    assert [line.split("(UUID: ")[1] for line in smi.splitlines()] == [
        f"{card_uuid(2)})",
        f"{card_uuid(3)})",
    ]
    # The loader found it by name through the cache ldconfig made in the host at start.
    resolved = ssh(ssh_key, address, "ldconfig -p | grep libnvidia-ml")
    assert f"=> {folder}/libnvidia-ml.so.1" in resolved
    write = subprocess.run(
        ["ssh", "-i", ssh_key, *SSH_OPTIONS, f"root@{address}"]
        + [f"echo x >> {folder}/libnvidia-ml.so.550.54.15"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert write.returncode != 0, "a host wrote into the server's driver"
    # Not only the ownership (the server's root, nobody to the host): the mounts are read-only.
    mounts = ssh(ssh_key, address, f"grep ' {folder}/' /proc/self/mountinfo")
    assert len(mounts.splitlines()) == 3  # the library, its soname link, nvidia-smi
    assert all(line.split()[5].split(",")[0] == "ro" for line in mounts.splitlines())

    # Without cards, no driver at all: not even the empty files nspawn bound them over.
    runtime.stop(host_id)
    runtime.start(desired(host_id, ssh_key, generation=2, card_uuids=(), bandwidth_mbps=0))
    assert ssh_answers(address)
    assert ssh(ssh_key, address, f"find {folder} -type f | wc -l").strip() == "0"
    assert ssh(ssh_key, address, "ldconfig -p | grep -c nvidia || true").strip() == "0"
    assert "loam-gpu.conf" not in ssh(ssh_key, address, "ls /etc/ld.so.conf.d/")


@pytest.fixture
def control_device(monkeypatch):
    """The server's driver control device (as /dev/nvidiactl, 195:255), at a path of its own
    under /var/tmp: a host with cards gets it bound."""
    folder = Path(tempfile.mkdtemp(prefix="loam-fake-control-", dir="/var/tmp"))
    control = folder / "nvidiactl"
    os.mknod(control, 0o666 | 0o020000, os.makedev(195, 255))
    monkeypatch.setattr("loam_agent.hosts.runtime.CONTROL_DEVICES", (str(control),))
    try:
        yield control
    finally:
        shutil.rmtree(folder)


def test_a_host_started_without_cards_has_no_nvidia_device_at_all(runtime, ssh_key, control_device):
    host_id = f"h-test-{uuid.uuid4().hex[:8]}"
    runtime.create(desired(host_id, ssh_key, card_uuids=(card_uuid(1),), bandwidth_mbps=0))
    runtime.start(desired(host_id, ssh_key, card_uuids=(card_uuid(1),), bandwidth_mbps=0))
    address = runtime.inspect(host_id).address
    assert ssh_answers(address), (runtime.folder(host_id) / "console.log").read_text()
    assert ssh(ssh_key, address, "ls /dev/ | grep nvidia").split() == ["nvidia1"]
    assert ssh(ssh_key, address, f"test -c {control_device} && echo bound").strip() == "bound"

    # 无卡模式: the same host started with no cards.
    runtime.stop(host_id)
    runtime.start(desired(host_id, ssh_key, generation=2, card_uuids=(), bandwidth_mbps=0))

    assert ssh_answers(address)
    assert ssh(ssh_key, address, "ls /dev/ | grep -c nvidia || true").strip() == "0"
    # (Here it is outside /dev, which nspawn makes afresh at each start: the empty file nspawn
    # bound it over stays behind, but no device.)
    assert ssh(ssh_key, address, f"test -c {control_device} || echo absent").strip() == "absent"
