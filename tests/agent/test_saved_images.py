"""Saved images on real hosts: a tenant's installed tool in host A, A stopped and saved through
the spec, host B booted from the saved image has it (owned as the image's own files are), with
SSH host keys of its own and none of A's secrets."""

import uuid

import pytest
from loam_agent.hosts.model import HostError
from loam_agent.hosts.reconcile import converge, ssh_answers
from loam_agent.hosts.runtime import HostRuntime
from loam_agent.hosts.saved_images import keep_only, list_saved, remove_saved, saved_image

from tests.agent.test_runtime import desired, ssh

pytestmark = pytest.mark.containers

TOOL = "/usr/local/bin/loam-hello"


@pytest.fixture
def saved(tmp_path):
    return tmp_path / "saved-images"  # never the shared image cache


@pytest.fixture
def runtime(tmp_path, host_images, server_network, saved):
    runtime = HostRuntime(tmp_path / "state", host_images, dict, server_network, saved_images=saved)
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


def test_a_host_ordered_from_a_saved_image_has_what_the_tenant_installed(runtime, saved, ssh_key):
    host_a = desired(f"h-test-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), bandwidth_mbps=0)
    runtime.create(host_a)
    runtime.start(host_a)
    address_a = runtime.inspect(host_a.id).address
    assert ssh_answers(address_a), (runtime.folder(host_a.id) / "console.log").read_text()
    ssh(
        ssh_key,
        address_a,
        f"printf '#!/bin/sh\\necho hello from A\\n' > {TOOL} && chmod 755 {TOOL} && rm /etc/motd",
    )
    key_a = ssh(ssh_key, address_a, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub")

    with pytest.raises(HostError, match="stopped"):
        runtime.save_image(host_a.id, "saved-test")
    reports = []
    stopped = desired(
        host_a.id, ssh_key, generation=2, state="stopped", card_uuids=(), save_image="saved-test"
    )
    status = converge(runtime, stopped, reports.append, lambda address: True)
    assert status.state == "stopped", status.message
    image = saved_image(saved, "saved-test")
    assert status.saved_image == {
        "name": "saved-test",
        "digest": image.digest,
        "size_bytes": image.size_bytes,
    }
    assert image.digest.startswith("sha256:") and image.size_bytes > 100 * 2**20  # a full copy
    assert list_saved(saved) == [image]
    # Asked again (the same generation polled again): the same image, not a second save.
    assert converge(runtime, stopped, reports.append, lambda address: True).saved_image == (
        status.saved_image
    )
    rootfs = saved / "saved-test" / "rootfs"
    assert (rootfs / TOOL.lstrip("/")).stat().st_uid == 0  # back from A's id range
    assert not list((rootfs / "etc/ssh").glob("ssh_host_*"))
    assert not (rootfs / "root/.ssh/authorized_keys").exists()

    host_b = desired(
        f"h-test-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), bandwidth_mbps=0,
        image="saved-test",
    )  # fmt: skip
    runtime.create(host_b)
    runtime.start(host_b)
    address_b = runtime.inspect(host_b.id).address
    assert ssh_answers(address_b), (runtime.folder(host_b.id) / "console.log").read_text()
    assert ssh(ssh_key, address_b, TOOL) == "hello from A\n"
    assert ssh(ssh_key, address_b, f"stat -c %u:%a {TOOL}; test ! -e /etc/motd && echo gone") == (
        "0:755\ngone\n"
    )
    assert ssh(ssh_key, address_b, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub") != key_a
    # The portal deleted it: kept while host B, whose root it is under, is still here.
    assert keep_only(saved, set(), runtime.hosts_dir) == []
    runtime.remove(host_b.id)
    assert keep_only(saved, {"saved-test"}, runtime.hosts_dir) == []
    runtime.remove(host_a.id)
    assert keep_only(saved, set(), runtime.hosts_dir) == ["saved-test"]
    assert list_saved(saved) == [] and not (saved / "saved-test").exists()
    with pytest.raises(HostError, match="image 'saved-test' isn't built"):
        runtime.create(host_b)


def test_a_saved_image_cant_take_a_recipes_name_or_a_path(runtime, host_images):
    for name in ("debian-12", "../escape", "Upper"):
        with pytest.raises(HostError, match="saved image"):
            remove_saved(runtime.saved_images, name)
    assert (host_images / "debian-12" / "rootfs").is_dir()


def test_saving_refuses_a_host_that_isnt_here(runtime):
    with pytest.raises(HostError, match="exists and is stopped"):
        runtime.save_image("h-none", "saved-test")
