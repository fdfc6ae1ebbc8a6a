"""A host's data disk ordered with it is a volume on its server (agent hosts, through the fake
agent of tests/agents): attached at /data, grown by the host's "expand disk", billed on the
host's disk line and counted in its disk quota while the host lives (never twice), deleted with
the host or kept as a volume of its own, billed from the instant the host's line ends. Hosts of
other backends keep their disk with the host. The agent world prices a GB of cloud disk at 36
fen a month, and its flavors include the 50 GB system disk these hosts have."""

from datetime import timedelta
from decimal import Decimal
from importlib import import_module

import pytest
import time_machine
from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
from django.utils import timezone, translation

from apps.billing.metering import HOURS_PER_MONTH, RATE_PLACES, meter_organization
from apps.billing.models import Meter, MeterKind, UsageRecord
from apps.orders.models import Instance, InstanceState
from apps.orders.operations import request_operation
from apps.orders.volumes import attach_volume, detach_volume
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import QuotaExceeded, organization_usage
from apps.storage import services as storage
from apps.storage.models import Volume, VolumeState
from tests.factories import InstanceFactory
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

pytestmark = pytest.mark.usefixtures("english_messages")

DISK_GB_MONTH_MINOR = 36


def hourly(gb: int) -> Decimal:
    return (Decimal(DISK_GB_MONTH_MINOR * gb) / HOURS_PER_MONTH).quantize(RATE_PLACES)


def listed(agent, host_id: str) -> dict:
    (host,) = [host for host in agent.hosts() if host["id"] == host_id]
    return host


def server_list(agent) -> list[dict]:
    with translation.override(translation.get_language()):
        response = agent.client.get("/api/v1/agent/hosts", **agent.headers())
    return response.json()["volumes"]


def operate(instance, owner, kind, capture, **params):
    with capture(execute=True):
        request_operation(instance=instance, actor=owner, kind=kind, params=params)
    instance.refresh_from_db()
    return instance


def disk_meters(workload_id) -> list[tuple]:
    return list(
        Meter.objects.filter(workload_id=workload_id, kind=MeterKind.DISK)
        .order_by("pk")
        .values_list("quantity", "hourly_minor", "started_at", "ended_at")
    )


def test_an_ordered_data_disk_is_a_volume_at_data_counted_and_billed_once(
    agent_world, agent, order_host
):
    host = order_host(data_disk_gb=30)
    disk = Volume.objects.get(data_disk_of=host.workload)
    assert (disk.name, disk.size_gb, disk.node_id, disk.region_id) == (
        "web-data", 30, host.node_id, host.region_id
    )  # fmt: skip
    assert (disk.workload_id, disk.mount_path, disk.keep_on_release) == (
        host.workload_id, "/data", False
    )  # fmt: skip
    # The agent keeps it with the server's volumes and binds it at /data: no data.img.
    spec = listed(agent, host.backend_handle)
    assert spec["volumes"] == [{"id": disk.public_id, "mount_path": "/data"}]
    assert spec["data_disk_gb"] == 0
    # So from its creation, before its instance knows the host's handle.
    Instance.objects.filter(pk=host.pk).update(backend_handle="")
    assert listed(agent, spec["id"])["volumes"] == spec["volumes"]
    assert listed(agent, spec["id"])["data_disk_gb"] == 0
    Instance.objects.filter(pk=host.pk).update(backend_handle=spec["id"])
    assert server_list(agent) == [
        {"id": disk.public_id, "size_gb": 30, "adopt": host.backend_handle}
    ]
    # Counted once, in the host's disk quota; billed once, on the host's disk line.
    usage = organization_usage(agent_world.organization)
    assert (usage.disk_gb, usage.storage_gb) == (50 + 30, 0)
    assert disk_meters(disk.billed_as_id) == []
    [(quantity, rate, _started, ended)] = disk_meters(host.workload_id)
    assert (quantity, rate, ended) == (30, hourly(30), None)


def test_expand_disk_grows_the_data_disk_volume_the_one_way_volumes_grow(
    agent_world, agent, order_host, owner, django_capture_on_commit_callbacks
):
    host = order_host(data_disk_gb=30)
    disk = Volume.objects.get(data_disk_of=host.workload)
    with pytest.raises(storage.VolumeRefused, match="Expand disk"):
        storage.grow_volume(volume=disk, actor=owner, size_gb=40)
    with pytest.raises(storage.VolumeRefused, match="data disk"):
        detach_volume(volume=disk, actor=owner)

    host = operate(host, owner, "expand_disk", django_capture_on_commit_callbacks,
                   data_disk_gb=40)  # fmt: skip
    disk.refresh_from_db()
    assert (host.data_disk_gb, disk.size_gb) == (40, 40)
    assert server_list(agent)[0]["size_gb"] == 40
    usage = organization_usage(agent_world.organization)
    assert (usage.disk_gb, usage.storage_gb) == (50 + 40, 0)
    assert disk_meters(disk.billed_as_id) == []
    assert [meter[:2] for meter in disk_meters(host.workload_id)] == [
        (30, hourly(30)), (40, hourly(40))
    ]  # fmt: skip
    with pytest.raises(ValidationError, match="only grows"):
        request_operation(instance=host, actor=owner, kind="expand_disk",
                          params={"data_disk_gb": 40})  # fmt: skip


def test_a_released_hosts_data_disk_is_deleted_unless_kept(
    agent, order_host, owner, django_capture_on_commit_callbacks
):
    host = order_host(data_disk_gb=30)
    disk = Volume.objects.get(data_disk_of=host.workload)
    host = operate(host, owner, "release", django_capture_on_commit_callbacks)
    assert host.state == InstanceState.RELEASED
    disk.refresh_from_db()
    assert (disk.state, disk.workload, disk.data_disk_of) == (VolumeState.DELETED, None, None)
    assert disk.deleted_at == host.released_at
    assert server_list(agent) == []  # its server deletes the image
    assert disk_meters(disk.billed_as_id) == []


def test_a_kept_data_disk_is_billed_on_its_own_from_the_instant_the_host_ends_to_the_fen(
    agent_world, agent, order_host, owner, django_capture_on_commit_callbacks
):
    start = timezone.now().replace(microsecond=0)
    with time_machine.travel(start, tick=False):
        host = order_host(data_disk_gb=30)
    with time_machine.travel(start + timedelta(days=1), tick=False):
        host = operate(host, owner, "release", django_capture_on_commit_callbacks,
                       keep_data_disk=True)  # fmt: skip
    disk = Volume.objects.get(billed_as__isnull=False, name="web-data")
    assert (disk.state, disk.workload, disk.data_disk_of) == (VolumeState.CREATING, None, None)
    assert server_list(agent) == [{"id": disk.public_id, "size_gb": 30}]
    [(_gb, host_rate, _started, host_ended)] = disk_meters(host.workload_id)
    [(gb, rate, started, ended)] = disk_meters(disk.billed_as_id)
    assert (gb, rate, started, ended) == (30, host_rate, host_ended, None)  # no gap, no overlap
    usage = organization_usage(agent_world.organization)
    assert (usage.disk_gb, usage.storage_gb) == (0, 30)

    meter_organization(agent_world.organization.pk, until=start + timedelta(days=2))
    disk_fen = {
        workload: sum(
            UsageRecord.objects.filter(kind=MeterKind.DISK, workload_id=workload).values_list(
                "amount_minor", flat=True
            )
        )
        for workload in (host.workload_id, disk.billed_as_id)
    }
    # A day of 30 GB at 36 fen a GB-month (30 days) on each line: 36 × 30 × 24 / 720 = 36 fen,
    # 72 for the two days, as one line would have charged.
    assert disk_fen == {host.workload_id: 36, disk.billed_as_id: 36}

    # The kept disk is a volume like any: attached to the next host, with its files.
    second = order_host(name="second")
    second = operate(second, owner, "stop", django_capture_on_commit_callbacks)
    attach_volume(volume=disk, instance=second, mount_path="/mnt/kept", actor=owner)
    assert listed(agent, second.backend_handle)["volumes"] == [
        {"id": disk.public_id, "mount_path": "/mnt/kept"}
    ]


def test_keeping_the_data_disk_counts_in_the_storage_quota_when_asked(
    agent_world, agent, order_host, owner, django_capture_on_commit_callbacks
):
    host = order_host(data_disk_gb=30)
    QuotaLimit.objects.create(
        park=agent_world.park,
        organization=agent_world.organization,
        resource=QuotaResource.STORAGE_GB,
        limit=20,
    )
    with pytest.raises(QuotaExceeded, match="Cloud disks"):
        request_operation(instance=host, actor=owner, kind="release",
                          params={"keep_data_disk": True})  # fmt: skip
    host.refresh_from_db()
    assert host.state == InstanceState.RUNNING
    # Said once, the choice stands for a release that says nothing (the auto-release's).
    QuotaLimit.objects.filter(resource=QuotaResource.STORAGE_GB).update(limit=30)
    with django_capture_on_commit_callbacks(execute=True):
        request_operation(instance=host, actor=owner, kind="release",
                          params={"keep_data_disk": True})  # fmt: skip
    assert Volume.objects.get(name="web-data").keep_on_release


def test_a_simulated_hosts_data_disk_stays_with_the_host(
    running_host, owner, django_capture_on_commit_callbacks
):
    """Servers that keep no volumes (the simulator's, Slurm's): expand disk and release as
    before; a data disk kept after its host is refused with the reason."""
    instance = running_host(data_disk_gb=20)
    assert instance.pool.backend.driver == "simulator"
    assert not Volume.objects.exists()
    with pytest.raises(storage.VolumeRefused, match="no data disk kept"):
        request_operation(instance=instance, actor=owner, kind="release",
                          params={"keep_data_disk": True})  # fmt: skip
    instance = operate(instance, owner, "expand_disk", django_capture_on_commit_callbacks,
                       data_disk_gb=instance.data_disk_gb + 10)  # fmt: skip
    instance = operate(instance, owner, "release", django_capture_on_commit_callbacks)
    assert instance.state == InstanceState.RELEASED
    assert not Volume.objects.exists()


def test_the_migration_makes_existing_agent_hosts_data_disks_volumes(agent_world, agent):
    """orders 0012 on this database (SQLite or PostgreSQL, as the run's DATABASE_URL says)."""
    node = agent_world.servers[0].node
    running = InstanceFactory(
        organization=agent_world.organization, region=agent_world.region, node=node,
        pool=agent_world.pool, state=InstanceState.RUNNING, data_disk_gb=25, name="old",
        backend_handle="h-old",
    )  # fmt: skip
    without = InstanceFactory(
        organization=agent_world.organization, region=agent_world.region, node=node,
        pool=agent_world.pool, state=InstanceState.STOPPED, data_disk_gb=0,
    )  # fmt: skip
    released = InstanceFactory(
        organization=agent_world.organization, region=agent_world.region, node=node,
        pool=agent_world.pool, state=InstanceState.RELEASED, data_disk_gb=10,
        released_at=timezone.now(),
    )  # fmt: skip
    migration = import_module("apps.orders.migrations.0012_data_disks_as_volumes")
    migration.data_disks_as_volumes(django_apps, None)
    migration.data_disks_as_volumes(django_apps, None)  # run twice: once each
    (disk,) = Volume.objects.all()
    assert (disk.data_disk_of_id, disk.workload_id, disk.mount_path, disk.size_gb) == (
        running.workload_id, running.workload_id, "/data", 25
    )  # fmt: skip
    assert (disk.node, disk.state, disk.name) == (node, VolumeState.CREATING, "old-data")
    assert not Volume.objects.filter(data_disk_of__in=[without.workload, released.workload])
    # The agent adopts the host's data.img as the volume's image, and is told so.
    assert server_list(agent) == [{"id": disk.public_id, "size_gb": 25, "adopt": "h-old"}]
    assert disk_meters(disk.billed_as_id) == []
    assert Instance.objects.get(pk=running.pk).data_disk_gb == 25
