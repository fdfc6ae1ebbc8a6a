"""The shared file storage end to end: hosts ordered through the portal's services on a real
host agent (tests/agent_server.py: `loam-agent` enrolled in a pool of the live portal, its hosts
systemd-nspawn containers), their organizations' JuiceFS file systems made by their first hosts
on this machine's PostgreSQL (the storage server). A file written in /shared on one host of an
organization is read on its other host; another organization's host has a /shared of its own.
Marker `containers`; run under `flock /tmp/agent-hosts.lock`."""

import subprocess

import pytest

from apps.orchestration.models import Accelerator, Node
from apps.orders.models import Instance, InstanceState
from apps.orders.services import HostRequest, submit_create
from apps.quotas.models import QuotaLimit
from apps.sharedfs.models import SharedFileSystem
from tests.agent_server import build_agent_park, require_hosts, ssh_answers, start_agent_server
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.orders.real_agent_hosts import wait_until
from tests.sharedfs.conftest import storage_server as storage_server

pytestmark = [pytest.mark.containers, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ordered(storage_server, live_server, settings, tmp_path, outside_world):
    """ordered(organization, owner, name) -> a running host of the park's one-card flavor, on a
    real agent server with three cards; the park's organization and a second one of the park
    (`ordered.other`, `ordered.other_owner`). The agent stops, and its hosts and their mounts
    go, before the storage server's databases (storage_server)."""
    require_hosts()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    park = build_agent_park(quota=2)
    other = OrganizationFactory(park=park.organization.park, verification_state="verified")
    other_owner = UserFactory()
    MembershipFactory(organization=other, user=other_owner, role="owner")
    for resource in ("accelerators", "instances"):
        QuotaLimit.objects.create(park=other.park, organization=other, resource=resource, limit=1)
    key = tmp_path / "tenant_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    server = start_agent_server(
        pool=park.pool,
        operator=park.operator,
        portal_url=live_server.url,
        work=tmp_path / "server",
        cards=3,
    )

    def order(organization, owner, name: str) -> Instance:
        request = HostRequest(
            flavor=park.flavor,
            image=park.image,
            region=park.region,
            system_disk_gb=100,
            ssh_public_key=key.with_suffix(".pub").read_text().strip(),
            name=name,
        )
        (placed,) = submit_create(organization=organization, actor=owner, request=request)
        host = Instance.objects.get(pk=placed.instance_id)
        assert host.state == InstanceState.RUNNING, host.error_message
        wait_until(lambda: ssh_answers(host.access, key).returncode == 0, 90, what=f"SSH to {name}")
        return host

    def run(host: Instance, command: str) -> str:
        done = ssh_answers(host.access, key, command)
        assert done.returncode == 0, (command, done.stderr, server.log.read_text()[-3000:])
        return done.stdout

    try:
        wait_until(
            lambda: Accelerator.objects.filter(node__pool=park.pool).count() == 3,
            what="the agent's cards",
        )
        # The server counts this machine's CPUs (two in CI): three one-vCPU hosts share them.
        Node.objects.filter(pool=park.pool).update(vcpu_total=4)
        order.park, order.other, order.other_owner, order.run = park, other, other_owner, run
        yield order
    finally:
        server.stop()


def test_a_file_in_shared_is_read_on_the_organizations_other_host_and_not_by_another(ordered):
    park = ordered.park
    a1 = ordered(park.organization, park.owner, "a1")
    a2 = ordered(park.organization, park.owner, "a2")
    b1 = ordered(ordered.other, ordered.other_owner, "b1")

    ordered.run(a1, "echo from-a1 > /shared/note && sync")

    assert ordered.run(a2, "cat /shared/note") == "from-a1\n"
    # B's /shared is a file system of its own: mounted, without A's file, its files not A's
    # (JuiceFS's own entries, such as .trash, aside).
    mounts = ordered.run(b1, "cat /proc/self/mountinfo")
    assert f"JuiceFS:{SharedFileSystem.objects.get(organization=ordered.other).name}" in mounts
    assert ordered.run(b1, "ls -A /shared | grep -v '^\\.' || true") == ""
    ordered.run(b1, "echo from-b1 > /shared/theirs && sync")
    assert ordered.run(a2, "ls -A /shared | grep -v '^\\.' || true") == "note\n"
    made = SharedFileSystem.objects.order_by("organization_id")
    assert [fs.organization_id for fs in made] == sorted([park.organization.pk, ordered.other.pk])
