"""Volumes on the server (no host): parsing the portal's lists, made, copied, grown, deleted."""

import pytest
from loam_agent.hosts.model import DesiredHost, HostError
from loam_agent.hosts.volumes import (
    GIB,
    DesiredVolume,
    HostVolume,
    VolumeStore,
    mount_path_problem,
)


@pytest.mark.parametrize(
    "path", ["/", "work", "/mnt/../etc", "/etc/x", "/usr", "/proc/1", "/mnt/a b", "/mnt//a"]
)
def test_a_volume_appears_only_outside_the_system_folders(path):
    assert mount_path_problem(path)


def test_a_host_spec_names_its_volumes_and_refuses_a_duplicate_or_a_bad_path():
    host = DesiredHost.from_json(
        {"id": "h1", "generation": 1, "state": "running",
         "volumes": [{"id": "vol-a", "mount_path": "/mnt/a"}]}
    )  # fmt: skip
    assert host.volumes == (HostVolume("vol-a", "/mnt/a"),)
    for volumes in (
        [{"id": "vol-a", "mount_path": "/mnt/a"}, {"id": "vol-a", "mount_path": "/mnt/b"}],
        [{"id": "vol-a", "mount_path": "/mnt/a"}, {"id": "vol-b", "mount_path": "/mnt/a"}],
        [{"id": "vol-a", "mount_path": "/etc"}],
        [{"id": "../x", "mount_path": "/mnt/a"}],
    ):
        with pytest.raises(HostError):
            DesiredHost.from_json({"id": "h1", "generation": 1, "state": "running",
                                   "volumes": volumes})  # fmt: skip


@pytest.mark.parametrize("size_gb", [0, -1, True, "2", 1.5])
def test_a_volume_size_is_a_whole_number_of_gb(size_gb):
    with pytest.raises(ValueError):
        DesiredVolume.from_json({"id": "vol-a", "size_gb": size_gb})


def test_volumes_are_made_copied_grown_and_deleted_as_listed(tmp_path):
    store = VolumeStore(tmp_path)
    assert store.apply([DesiredVolume("vol-a", 1)], in_use=set()) == [
        {"id": "vol-a", "state": "ready", "size_gb": 1}
    ]
    reports = store.apply(
        [DesiredVolume("vol-a", 2), DesiredVolume("vol-copy", 1, source="vol-a")], in_use=set()
    )
    # The copy was taken before its source grew.
    assert reports == [
        {"id": "vol-a", "state": "ready", "size_gb": 2},
        {"id": "vol-copy", "state": "ready", "size_gb": 1},
    ]
    assert store.image("vol-a").stat().st_size == 2 * GIB
    missing = store.apply([DesiredVolume("vol-b", 1, source="vol-gone")], in_use={"vol-a"})
    assert missing[0]["state"] == "failed" and "vol-gone" in missing[0]["message"]
    # vol-a is kept while a running host has it; vol-copy, listed no more, is gone.
    assert store.sizes() == {"vol-a": 2}
    store.apply([], in_use=set())
    assert store.sizes() == {}


def _legacy_data_disk(store: VolumeStore, host_id: str) -> None:
    """A host's own data.img, as hosts were made before their data disk was a volume."""
    (store.hosts_dir / host_id / "data").mkdir(parents=True)
    with store.data_image(host_id).open("wb") as file:
        file.write(b"the tenant's files")
        file.truncate(GIB)


def test_a_hosts_data_img_becomes_its_data_disk_volume_once(tmp_path):
    store = VolumeStore(tmp_path)
    _legacy_data_disk(store, "h1")
    data_disk = DesiredVolume("vol-d", 1, adopt="h1")
    assert store.apply([data_disk], in_use=set()) == [
        {"id": "vol-d", "state": "ready", "size_gb": 1}
    ]
    assert not store.data_image("h1").exists()
    assert store.image("vol-d").read_bytes().startswith(b"the tenant's files")
    # Listed again (or with a data.img that came back): the volume is kept as it is.
    store.data_image("h1").write_bytes(b"other")
    assert store.apply([data_disk], in_use=set())[0]["state"] == "ready"
    assert store.image("vol-d").read_bytes().startswith(b"the tenant's files")
    # A new host's data disk has no data.img to adopt: made empty.
    assert store.apply([data_disk, DesiredVolume("vol-n", 1, adopt="h2")], in_use=set())[1] == {
        "id": "vol-n",
        "state": "ready",
        "size_gb": 1,
    }


def test_a_mounted_data_img_is_adopted_when_its_host_stops(tmp_path, monkeypatch):
    store = VolumeStore(tmp_path)
    _legacy_data_disk(store, "h1")
    running = {str(store.hosts_dir / "h1" / "data")}
    monkeypatch.setattr("loam_agent.hosts.volumes.os.path.ismount", lambda p: str(p) in running)
    data_disk = DesiredVolume("vol-d", 1, adopt="h1")
    # Still the host's data.img, mounted in it: reported at its size, neither made nor moved.
    assert store.apply([data_disk], in_use=set()) == [
        {"id": "vol-d", "state": "ready", "size_gb": 1}
    ]
    assert store.data_image("h1").exists() and not store.image("vol-d").exists()
    running.clear()  # the host stopped
    store.adopt_waiting("h1")
    assert store.image("vol-d").read_bytes().startswith(b"the tenant's files")
    assert store.apply([data_disk], in_use=set())[0] == {
        "id": "vol-d",
        "state": "ready",
        "size_gb": 1,
    }


def test_a_volume_adopts_only_a_host_ids_data_disk():
    with pytest.raises(ValueError):
        DesiredVolume.from_json({"id": "vol-a", "size_gb": 1, "adopt": "../etc"})
    assert DesiredVolume.from_json({"id": "vol-a", "size_gb": 1, "adopt": "h1"}).adopt == "h1"
