"""Real hosts with volumes: a volume outlives the host that wrote it and brings its files to the
next one; it grows once its host stops; a snapshot is a copy; a deleted volume is gone; a host's
data disk made before data disks were volumes becomes one, kept after its host."""

import uuid

import pytest
from loam_agent.hosts.model import DesiredHost
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import HostRuntime
from loam_agent.hosts.volumes import DesiredVolume, HostVolume

from tests.agent.test_runtime import GIB, desired, ssh

pytestmark = pytest.mark.containers


@pytest.fixture
def runtime(tmp_path, host_images, server_network):
    runtime = HostRuntime(tmp_path / "state", host_images, dict, server_network)
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)
    runtime.apply_volumes([])


def volume_size_gb(key, address: str, path: str) -> float:
    return int(ssh(key, address, f"df -B1 --output=size {path} | tail -1")) / GIB


def test_a_volume_detached_from_a_released_host_brings_its_files_to_a_new_one(runtime, ssh_key):
    (ready,) = runtime.apply_volumes([DesiredVolume("vol-work", 1)])
    assert ready == {"id": "vol-work", "state": "ready", "size_gb": 1}
    on_a = (HostVolume("vol-work", "/mnt/work"),)
    host_a = desired(f"h-a-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), volumes=on_a)
    runtime.create(host_a)
    runtime.start(host_a)
    address_a = runtime.inspect(host_a.id).address
    assert ssh_answers(address_a)
    ssh(ssh_key, address_a, "echo 'written on A' > /mnt/work/proof && sync")
    # Owned by the host's root inside, by uid 0 on the volume itself (an id-mapped bind).
    assert ssh(ssh_key, address_a, "stat -c %u /mnt/work/proof").strip() == "0"

    # Grown while mounted: offline, once its host has stopped.
    (growing,) = runtime.apply_volumes([DesiredVolume("vol-work", 2)])
    assert growing == {"id": "vol-work", "state": "growing", "size_gb": 1}
    assert volume_size_gb(ssh_key, address_a, "/mnt/work") < 1.0

    runtime.remove(host_a.id)  # released: the volume stays, unmounted, and grows
    assert not runtime.volumes.mount_point("vol-work").is_mount()
    assert runtime.volumes.sizes() == {"vol-work": 2}
    snapshot = DesiredVolume("vol-snap", 2, source="vol-work")
    reports = runtime.apply_volumes([DesiredVolume("vol-work", 2), snapshot])
    assert [report["state"] for report in reports] == ["ready", "ready"]

    on_b = (HostVolume("vol-work", "/data/work"), HostVolume("vol-snap", "/srv/snap"))
    host_b = desired(f"h-b-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), volumes=on_b)
    runtime.create(host_b)
    runtime.start(host_b)
    address_b = runtime.inspect(host_b.id).address
    assert ssh_answers(address_b)
    assert ssh(ssh_key, address_b, "cat /data/work/proof").strip() == "written on A"
    assert ssh(ssh_key, address_b, "cat /srv/snap/proof").strip() == "written on A"
    assert 1.9 < volume_size_gb(ssh_key, address_b, "/data/work") <= 2.0

    # A volume listed no more is kept while a running host has it, then deleted.
    runtime.apply_volumes([DesiredVolume("vol-work", 2)])
    assert runtime.volumes.image("vol-snap").exists()
    runtime.stop(host_b.id)
    runtime.apply_volumes([DesiredVolume("vol-work", 2)])
    assert not runtime.volumes.image("vol-snap").exists()
    assert runtime.volumes.sizes() == {"vol-work": 2}


def test_a_data_disk_becomes_a_volume_kept_after_release_for_a_new_host(runtime, ssh_key):
    """A host made with its own data.img (before data disks were volumes) keeps its files when
    the portal lists that disk as a volume: adopted once it stops, at /data as before; kept
    when the host is released, it brings them to a new host."""
    host_a = desired(f"h-d-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=())
    runtime.create(host_a)
    runtime.start(host_a)
    address_a = runtime.inspect(host_a.id).address
    assert ssh_answers(address_a)
    ssh(ssh_key, address_a, "echo 'on the data disk' > /data/proof && sync")

    # Listed as a volume while the host runs: its data.img is that volume until it stops.
    data_disk = DesiredVolume("vol-data", 1, adopt=host_a.id)
    (waiting,) = runtime.apply_volumes([data_disk])
    assert waiting == {"id": "vol-data", "state": "ready", "size_gb": 1}
    assert not runtime.volumes.image("vol-data").exists()
    runtime.stop(host_a.id)
    assert runtime.volumes.image("vol-data").exists()
    assert not (runtime.folder(host_a.id) / "data.img").exists()
    runtime.apply_volumes([data_disk])  # again: nothing to adopt, nothing made anew
    as_volume = DesiredHost(
        **{**host_a.__dict__, "generation": 2, "data_disk_gb": 0,
           "volumes": (HostVolume("vol-data", "/data"),)}
    )  # fmt: skip
    runtime.start(as_volume)
    assert ssh_answers(address_a)
    assert ssh(ssh_key, address_a, "cat /data/proof").strip() == "on the data disk"

    runtime.remove(host_a.id)  # released, the tenant keeping its data disk
    assert runtime.apply_volumes([DesiredVolume("vol-data", 1)])[0]["state"] == "ready"
    host_b = desired(
        f"h-e-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), data_disk_gb=0,
        volumes=(HostVolume("vol-data", "/mnt/kept"),),
    )  # fmt: skip
    runtime.create(host_b)
    runtime.start(host_b)
    address_b = runtime.inspect(host_b.id).address
    assert ssh_answers(address_b)
    assert ssh(ssh_key, address_b, "cat /mnt/kept/proof").strip() == "on the data disk"
