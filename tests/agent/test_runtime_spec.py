"""Real hosts given the spec's web-terminal CAs and services: files the agent writes into the
host at every start, read by its sshd and its init."""

import subprocess
import uuid
from pathlib import Path

import pytest
from loam_agent.hosts.model import HostService
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import HostRuntime

from tests.agent.test_runtime import desired, ssh
from tests.agent.test_runtime_network import SSH_OPTIONS

pytestmark = pytest.mark.containers

JUPYTER = HostService("jupyter", 8888, "/instances/42/jupyter/", "s3cret-Token_1")
TENSORBOARD = HostService("tensorboard", 6006, "/instances/42/tensorboard/", "other")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
    return path


@pytest.fixture
def runtime(tmp_path, host_images, server_network):
    runtime = HostRuntime(tmp_path / "state", host_images, dict, server_network)
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


def logs_in(key: Path, address: str) -> bool:
    """Whether `key` (with its certificate key-cert.pub, which ssh offers with it) gets in."""
    result = subprocess.run(
        ["ssh", "-i", key, *SSH_OPTIONS, "-o", "IdentitiesOnly=yes", f"root@{address}", "true"],
        capture_output=True,
        timeout=30,
    )
    return result.returncode == 0


def test_a_certificate_from_the_specs_ca_logs_in_until_the_ca_leaves_the_spec(runtime, tmp_path):
    owner_key, ca, user = (keygen(tmp_path / name) for name in ("id_owner", "ca", "id_user"))
    # As the portal signs for a web-terminal session: principal root, minutes long.
    subprocess.run(
        ["ssh-keygen", "-q", "-s", ca, "-I", "web-terminal", "-n", "root", "-V", "+10m"]
        + [user.with_suffix(".pub")],
        check=True,
    )
    host_id = f"h-test-{uuid.uuid4().hex[:8]}"
    ca_key = ca.with_suffix(".pub").read_text()
    host = desired(host_id, owner_key, card_uuids=(), bandwidth_mbps=0, ssh_user_ca_keys=(ca_key,))
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host_id).address
    assert ssh_answers(address), (runtime.folder(host_id) / "console.log").read_text()
    assert logs_in(user, address)
    (tmp_path / "id_user-cert.pub").unlink()
    assert not logs_in(user, address)  # the key alone is nobody's

    subprocess.run(
        ["ssh-keygen", "-q", "-s", ca, "-I", "web-terminal", "-n", "root", "-V", "+10m"]
        + [user.with_suffix(".pub")],
        check=True,
    )
    runtime.stop(host_id)
    runtime.start(desired(host_id, owner_key, generation=2, card_uuids=(), bandwidth_mbps=0))
    assert ssh_answers(address)
    assert not logs_in(user, address)
    assert logs_in(owner_key, address)
    files = "ls /etc/ssh/loam_user_ca.pub /etc/ssh/sshd_config.d/loam-ca.conf 2>/dev/null || true"
    assert ssh(owner_key, address, files) == ""


def test_services_env_files_are_written_for_the_hosts_root_and_stale_ones_removed(
    runtime, tmp_path
):
    key = keygen(tmp_path / "id_owner")
    host_id = f"h-test-{uuid.uuid4().hex[:8]}"
    shape = dict(card_uuids=(), bandwidth_mbps=0)
    host = desired(host_id, key, services=(JUPYTER, TENSORBOARD), **shape)
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host_id).address
    assert ssh_answers(address), (runtime.folder(host_id) / "console.log").read_text()
    listing = "cd /etc/loam/services && stat -c '%n %a %U:%G' *"
    assert ssh(key, address, listing).splitlines() == [
        "jupyter.env 600 root:root",
        "tensorboard.env 600 root:root",
    ]
    assert ssh(key, address, "cat /etc/loam/services/jupyter.env").splitlines() == [
        "LOAM_SERVICE_PORT=8888",
        "LOAM_SERVICE_BASE_URL=/instances/42/jupyter/",
        "LOAM_SERVICE_TOKEN=s3cret-Token_1",
    ]
    sourced = ". /etc/loam/services/tensorboard.env && echo $LOAM_SERVICE_PORT $LOAM_SERVICE_TOKEN"
    assert ssh(key, address, sourced).split() == ["6006", "other"]

    runtime.stop(host_id)
    runtime.start(desired(host_id, key, generation=2, services=(JUPYTER,), **shape))
    assert ssh_answers(address)
    assert ssh(key, address, "ls /etc/loam/services").split() == ["jupyter.env"]
    runtime.stop(host_id)
    runtime.start(desired(host_id, key, generation=3, **shape))
    assert ssh_answers(address)
    assert ssh(key, address, "ls /etc/loam/services").split() == []
