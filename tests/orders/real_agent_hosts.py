"""Hosts of the orders tests on a real host agent (tests/agent_server.py): `loam-agent` enrolled
in a pool of the live portal, its hosts systemd-nspawn containers reached from the outside world
(tests/outside_world.py). Marker `containers`, PostgreSQL (the agent writes while the test
does); run them under `flock /tmp/agent-hosts.lock`. Celery is eager, so each use case returns
once the agent reports the host as asked."""

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from apps.orchestration.models import Accelerator
from apps.orders.models import Instance, InstanceState
from apps.orders.operations import request_operation
from apps.orders.services import HostRequest, submit_create
from tests.agent_server import AgentPark, build_agent_park, require_hosts, start_agent_server


def wait_until(check, seconds: float = 30, what: str = "the condition"):
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


@dataclass
class RealAgent:
    park: AgentPark
    key: Path  # the tenant's private key; key.pub is on the hosts

    def order(self, name: str, data_disk_gb: int = 0) -> Instance:
        """A host of the park's one-card flavor, running (with a data disk of `data_disk_gb`)."""
        request = HostRequest(
            flavor=self.park.flavor,
            image=self.park.image,
            region=self.park.region,
            system_disk_gb=100,
            data_disk_gb=data_disk_gb,
            ssh_public_key=self.key.with_suffix(".pub").read_text().strip(),
            name=name,
        )
        (order,) = submit_create(
            organization=self.park.organization, actor=self.park.owner, request=request
        )
        instance = Instance.objects.get(pk=order.instance_id)
        assert instance.state == InstanceState.RUNNING, instance.error_message
        return instance

    def operate(self, instance: Instance, kind: str, **params) -> Instance:
        request_operation(instance=instance, actor=self.park.owner, kind=kind, params=params)
        return Instance.objects.get(pk=instance.pk)


@pytest.fixture
def real_agent(live_server, settings, tmp_path, outside_world):
    """A park with an agent pool whose one server (one card) runs real hosts for the live
    portal; stopped, and its hosts removed, afterwards."""
    require_hosts()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    park = build_agent_park(quota=2)
    server = start_agent_server(
        pool=park.pool,
        operator=park.operator,
        portal_url=live_server.url,
        work=tmp_path / "server",
        cards=1,
    )
    try:
        wait_until(
            lambda: Accelerator.objects.filter(node__pool=park.pool).exists(),
            what="the agent's card",
        )
        key = tmp_path / "tenant_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        yield RealAgent(park=park, key=key)
    finally:
        server.stop()
