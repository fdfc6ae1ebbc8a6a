"""Volumes on agent hosts, through the portal (the fake agent of tests/agents): attached to a
running host (at its next start) or a stopped one, named in the host's spec and the server's
list; kept, detached, when the host is released, and attached to the next host; refusals."""

import pytest
from django.utils import translation

from apps.core.models import AuditEvent
from apps.orders.models import InstanceState
from apps.orders.operations import request_operation
from apps.orders.volumes import attach_volume, detach_volume
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import QuotaExceeded
from apps.storage import services as storage
from apps.storage.models import Volume, VolumeState
from tests.factories import BackendFactory, NodeFactory, PoolFactory, RegionFactory
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

pytestmark = pytest.mark.usefixtures("english_messages")


@pytest.fixture
def volume(agent_world, agent, owner, django_capture_on_commit_callbacks):
    server = agent_world.servers[0]
    made = storage.create_volume(
        organization=agent_world.organization,
        actor=owner,
        region=agent_world.region,
        name="work",
        size_gb=20,
        node=server.node,
    )
    return made


def listed(agent, host_id: str) -> dict:
    (host,) = [host for host in agent.hosts() if host["id"] == host_id]
    return host


def server_list(agent) -> list[dict]:
    # A request through the test client activates the language it negotiates, for good.
    with translation.override(translation.get_language()):
        response = agent.client.get("/api/v1/agent/hosts", **agent.headers())
    return response.json()["volumes"]


def operate(instance, owner, kind, capture):
    with capture(execute=True):
        request_operation(instance=instance, actor=owner, kind=kind)
    instance.refresh_from_db()
    return instance


def test_a_volume_of_a_released_host_is_attached_to_the_next_one(
    agent, order_host, volume, owner, django_capture_on_commit_callbacks
):
    first = order_host(name="first")
    assert server_list(agent) == [{"id": volume.public_id, "size_gb": 20}]
    agent.post(
        "hosts/report",
        {"sequence": 10**9, "hosts": [],
         "volumes": [{"id": volume.public_id, "state": "ready", "size_gb": 20}]},
    )  # fmt: skip
    volume.refresh_from_db()
    assert (volume.state, volume.reported_size_gb) == (VolumeState.READY, 20)

    at_next_start = attach_volume(
        volume=volume, instance=first, mount_path="/mnt/work", actor=owner
    )
    assert at_next_start  # the host runs: the volume appears when it starts again
    assert listed(agent, first.backend_handle)["volumes"] == [
        {"id": volume.public_id, "mount_path": "/mnt/work"}
    ]
    with pytest.raises(storage.VolumeRefused, match="Stop the host"):
        detach_volume(volume=volume, actor=owner)

    operate(first, owner, "release", django_capture_on_commit_callbacks)
    assert first.state == InstanceState.RELEASED
    volume.refresh_from_db()
    assert volume.workload is None and volume.state == VolumeState.READY  # kept, detached
    assert server_list(agent) == [{"id": volume.public_id, "size_gb": 20}]

    second = order_host(name="second")
    stopped = operate(second, owner, "stop", django_capture_on_commit_callbacks)
    assert stopped.state == InstanceState.STOPPED
    assert not attach_volume(volume=volume, instance=second, mount_path="/data2", actor=owner)
    assert listed(agent, second.backend_handle)["volumes"] == [
        {"id": volume.public_id, "mount_path": "/data2"}
    ]
    actions = list(
        AuditEvent.objects.filter(action__startswith="volume.").values_list("action", flat=True)
    )
    assert actions.count("volume.attached") == 2 and actions.count("volume.detached") == 1


def test_attaching_across_regions_servers_or_twice_is_refused(
    agent_world, agent, order_host, volume, owner
):
    host = order_host()
    elsewhere = RegionFactory(park=agent_world.park, code="far", name="Far")
    backend = BackendFactory(park=agent_world.park, name="far-agents", driver="agent")
    far_node = NodeFactory(pool=PoolFactory(backend=backend, region=elsewhere, name="far"))
    far = storage.create_volume(
        organization=agent_world.organization,
        actor=owner,
        region=elsewhere,
        name="far",
        size_gb=1,
        node=far_node,
    )
    with pytest.raises(storage.VolumeRefused, match="own region"):
        attach_volume(volume=far, instance=host, mount_path="/mnt/far", actor=owner)
    other_server = NodeFactory(pool=agent_world.pool)
    Volume.objects.filter(pk=far.pk).update(region=agent_world.region, node=other_server)
    with pytest.raises(storage.VolumeRefused, match="lives on server"):
        attach_volume(volume=far, instance=host, mount_path="/mnt/far", actor=owner)

    attach_volume(volume=volume, instance=host, mount_path="/mnt/work", actor=owner)
    with pytest.raises(storage.VolumeRefused, match="attached to that host already"):
        attach_volume(volume=volume, instance=host, mount_path="/mnt/again", actor=owner)
    with pytest.raises(storage.VolumeRefused, match="detach it first"):
        storage.delete_volume(volume=volume, actor=owner)
    for path in ("/etc", "relative", "/mnt/../etc"):
        with pytest.raises(storage.DomainError):
            attach_volume(volume=far, instance=host, mount_path=path, actor=owner)


def test_a_volume_grows_never_shrinks_and_counts_in_the_storage_quota(agent_world, volume, owner):
    with pytest.raises(storage.VolumeRefused, match="only grows"):
        storage.grow_volume(volume=volume, actor=owner, size_gb=10)
    QuotaLimit.objects.create(
        park=agent_world.park,
        organization=agent_world.organization,
        resource=QuotaResource.STORAGE_GB,
        limit=50,
    )
    assert storage.grow_volume(volume=volume, actor=owner, size_gb=40).size_gb == 40
    with pytest.raises(QuotaExceeded, match="Cloud disks"):
        storage.create_volume(
            organization=agent_world.organization,
            actor=owner,
            region=agent_world.region,
            name="big",
            size_gb=11,
        )
    with pytest.raises(QuotaExceeded):
        storage.snapshot_volume(volume=volume, actor=owner, name="copy")
    small = storage.create_volume(
        organization=agent_world.organization,
        actor=owner,
        region=agent_world.region,
        name="small",
        size_gb=5,
    )
    copy = storage.snapshot_volume(volume=small, actor=owner, name="copy")
    assert (copy.node, copy.source, copy.size_gb) == (small.node, small, 5)
    deleted = storage.delete_volume(volume=volume, actor=owner)
    assert deleted.state == VolumeState.DELETED  # its 40 GB leave the quota
    storage.grow_volume(volume=small, actor=owner, size_gb=45)
    with pytest.raises(storage.VolumeRefused, match="deleted"):
        storage.grow_volume(volume=deleted, actor=owner, size_gb=41)
