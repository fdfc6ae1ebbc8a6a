"""A saved image copied from one server's saved images to another's through the portal (an
HTTP stand-in here), by the agent's own code: `ImageCopier` packs and PUTs it on the holder,
GETs, checks and unpacks it on the other, and says so; a damaged archive is reported failed
and unpacks nothing. Then, on real hosts: a host booted from the copy on the second server's
runtime, the first one's host and image gone, has what the tenant installed in the first."""

import hashlib
import json
import os
import uuid

import pytest
from loam_agent.client import PortalClient
from loam_agent.credential import Credential
from loam_agent.hosts.image_copies import ImageCopier, pack, unpack
from loam_agent.hosts.model import HostError
from loam_agent.hosts.reconcile import converge, ssh_answers
from loam_agent.hosts.runtime import HostRuntime
from loam_agent.hosts.saved_images import keep_only, list_saved, remove_saved, saved_image

from tests.agent.test_runtime import desired, ssh

NAME = "saved-copytest"
ARCHIVE_URL = f"/api/v1/agent/saved-images/{NAME}/archive"
COPIED_URL = f"/api/v1/agent/saved-images/{NAME}/copied"
TOOL = "/usr/local/bin/loam-hello"


def client_of(portal) -> PortalClient:
    credential = Credential(portal_url=portal.url, server_id="srv-1", secret="s3cret")
    return PortalClient(portal.url, credential=credential, attempts=1)


def a_saved_image(saved, name=NAME):
    """A saved image as `save_host` leaves one, without a host."""
    rootfs = saved / name / "rootfs"
    (rootfs / "usr/local/bin").mkdir(parents=True)
    tool = rootfs / TOOL.lstrip("/")
    tool.write_text("#!/bin/sh\necho hello\n")
    tool.chmod(0o755)
    (rootfs / "etc").mkdir()
    (rootfs / "etc/hostname").symlink_to("/proc/sys/kernel/hostname")
    facts = {"name": name, "host": "h-a", "digest": "sha256:" + "5a" * 32, "size_bytes": 4096}
    (saved / name / "image.json").write_text(json.dumps(facts))


def copy_between(portal, saved_a, saved_b) -> str:
    """The holder sends, the other fetches: the archive's sha256."""
    portal.hosts = []
    with client_of(portal) as client:
        holder = ImageCopier(client, saved_a)
        holder.apply([{"name": NAME, "direction": "send", "url": ARCHIVE_URL}])
        assert holder.wait_idle(600)
    (sent,) = portal.requests(ARCHIVE_URL)
    sha256 = sent.headers["x-loam-sha256"]
    assert hashlib.sha256(portal.archives[ARCHIVE_URL]).hexdigest() == sha256
    with client_of(portal) as client:
        other = ImageCopier(client, saved_b)
        other.apply([{"name": NAME, "direction": "receive", "url": ARCHIVE_URL, "sha256": sha256}])
        assert other.wait_idle(600)
    return sha256


def test_a_saved_image_goes_from_one_server_to_another_whole(portal, tmp_path):
    saved_a, saved_b = tmp_path / "a", tmp_path / "b"
    a_saved_image(saved_a)
    sha256 = copy_between(portal, saved_a, saved_b)
    assert [request.body for request in portal.requests(COPIED_URL)] == [{"sha256": sha256}]
    assert saved_image(saved_b, NAME) == saved_image(saved_a, NAME)
    tool = saved_b / NAME / "rootfs" / TOOL.lstrip("/")
    assert tool.read_text() == "#!/bin/sh\necho hello\n" and tool.stat().st_mode & 0o777 == 0o755
    assert os.readlink(saved_b / NAME / "rootfs/etc/hostname") == "/proc/sys/kernel/hostname"
    # Nothing left behind on either side, and the work folders are never taken for an image.
    assert not list((saved_a / ".outgoing").iterdir())
    assert not list((saved_b / ".incoming").iterdir())
    assert [image.name for image in list_saved(saved_b)] == [NAME]
    assert keep_only(saved_b, {NAME}, tmp_path / "hosts") == []


def test_a_damaged_archive_is_reported_failed_and_unpacks_nothing(portal, tmp_path):
    saved_a, saved_b = tmp_path / "a", tmp_path / "b"
    a_saved_image(saved_a)
    archive, sha256 = pack(saved_a, NAME)
    portal.archives[ARCHIVE_URL] = archive.read_bytes()[:-512]
    portal.hosts = []
    with client_of(portal) as client:
        copier = ImageCopier(client, saved_b)
        copier.apply([{"name": NAME, "direction": "receive", "url": ARCHIVE_URL, "sha256": sha256}])
        assert copier.wait_idle(60)
    (report,) = portal.requests(COPIED_URL)
    assert report.body["error"].startswith(f"receive: the archive of '{NAME}' arrived with")
    assert saved_image(saved_b, NAME) is None and not list((saved_b / ".incoming").iterdir())


def test_an_archive_of_another_image_is_refused(tmp_path):
    saved_a, saved_b = tmp_path / "a", tmp_path / "b"
    a_saved_image(saved_a, "saved-other")
    archive, _sha256 = pack(saved_a, "saved-other")
    with pytest.raises(HostError, match="another image"):
        unpack(saved_b, NAME, archive)
    assert saved_image(saved_b, NAME) is None
    with pytest.raises(HostError, match="isn't on this server"):
        pack(saved_b, NAME)


@pytest.fixture
def runtime(tmp_path, host_images, server_network):
    runtime = HostRuntime(
        tmp_path / "state-a", host_images, dict, server_network, saved_images=tmp_path / "a"
    )
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


@pytest.mark.containers
def test_a_host_on_another_server_boots_from_the_copy_with_what_the_tenant_installed(
    runtime, portal, tmp_path, host_images, server_network, ssh_key
):
    saved_a, saved_b = runtime.saved_images, tmp_path / "b"
    host_a = desired(f"h-test-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), bandwidth_mbps=0)
    runtime.create(host_a)
    runtime.start(host_a)
    address_a = runtime.inspect(host_a.id).address
    assert ssh_answers(address_a), (runtime.folder(host_a.id) / "console.log").read_text()
    ssh(ssh_key, address_a, f"printf '#!/bin/sh\\necho hello from A\\n' > {TOOL}; chmod 755 {TOOL}")
    stopped = desired(
        host_a.id, ssh_key, generation=2, state="stopped", card_uuids=(), save_image=NAME
    )
    status = converge(runtime, stopped, lambda status: None, lambda address: True)
    assert status.state == "stopped" and status.saved_image["name"] == NAME, status.message

    copy_between(portal, saved_a, saved_b)
    assert saved_image(saved_b, NAME) == saved_image(saved_a, NAME)
    # Server A's host and image are gone: what B boots can only be its own copy.
    runtime.remove(host_a.id)
    remove_saved(saved_a, NAME)

    server_b = HostRuntime(
        tmp_path / "state-b", host_images, dict, server_network, saved_images=saved_b
    )
    host_b = desired(
        f"h-test-{uuid.uuid4().hex[:8]}", ssh_key, card_uuids=(), bandwidth_mbps=0, image=NAME
    )
    try:
        server_b.create(host_b)
        server_b.start(host_b)
        address_b = server_b.inspect(host_b.id).address
        assert ssh_answers(address_b), (server_b.folder(host_b.id) / "console.log").read_text()
        assert ssh(ssh_key, address_b, TOOL) == "hello from A\n"
        assert ssh(ssh_key, address_b, f"stat -c %u:%a {TOOL}") == "0:755\n"
    finally:
        for host_id in server_b.list():
            server_b.remove(host_id)
