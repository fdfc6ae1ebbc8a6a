"""apps.orders.shared_storage: the organization's shared file system made as its first host in a
region starts on an agent server (gpu-07, tests/orders/agent_hosts.py), named in every host's
spec there; none for hosts on servers that mount none; a host whose region's storage can't be
reached fails with that reason rather than start without /shared."""

import pytest

from apps.agents.models import AgentHost, AgentServer
from apps.agents.selectors import desired_hosts
from apps.core.models import AuditEvent
from apps.orders.models import Instance, InstanceState
from apps.orders.services import HostRequest, submit_create
from apps.orders.shared_storage import hosts_mounting
from apps.sharedfs.models import SharedFileSystem
from apps.sharedfs.services import delete_file_system
from tests.agents.conftest import SSH_KEY
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host
from tests.sharedfs.conftest import storage_server as storage_server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def shared_fs_of_hosts() -> dict[str, dict | None]:
    (server,) = AgentServer.objects.all()
    return {host["id"]: host["shared_fs"] for host in desired_hosts(server)}


def test_the_first_host_in_a_region_makes_it_and_every_host_there_mounts_it(
    storage_server, agent_world, order_host
):
    first = order_host("a1")

    (file_system,) = SharedFileSystem.objects.all()
    assert (file_system.organization, file_system.region) == (
        agent_world.organization,
        agent_world.region,
    )
    assert shared_fs_of_hosts()[first.backend_handle]["name"] == file_system.name
    second = order_host("a2")
    assert SharedFileSystem.objects.count() == 1
    specs = shared_fs_of_hosts()
    assert specs[second.backend_handle] == specs[first.backend_handle]
    (created,) = AuditEvent.objects.filter(action="sharedfs.created")
    assert created.data["host"] == "a1"
    assert hosts_mounting(agent_world.organization.pk, agent_world.region.pk) == ["a1", "a2"]


def test_a_start_after_its_deletion_makes_a_new_one(
    storage_server, agent_world, order_host, operate, owner, django_capture_on_commit_callbacks
):
    host = order_host("a1")
    operate(host, "stop")
    with django_capture_on_commit_callbacks(execute=True):
        delete_file_system(actor=owner, file_system=SharedFileSystem.objects.get())
    assert not SharedFileSystem.objects.exists()

    operate(host, "start")

    assert Instance.objects.get(pk=host.pk).state == InstanceState.RUNNING
    (made_again,) = SharedFileSystem.objects.all()
    assert shared_fs_of_hosts()[host.backend_handle]["name"] == made_again.name


def test_without_a_storage_server_hosts_start_without_shared_storage(order_host):
    host = order_host("a1")  # the tests' default: LOAM_SHARED_FS_SERVER empty

    assert not SharedFileSystem.objects.exists()
    assert shared_fs_of_hosts()[host.backend_handle] is None


def test_a_host_on_a_server_that_mounts_none_makes_none(storage_server, world, running_host):
    running_host(1)  # the simulator's

    assert not SharedFileSystem.objects.exists()


def test_a_host_whose_storage_cant_be_reached_fails_with_the_reason(
    settings, monkeypatch, agent_world, agent, owner, django_capture_on_commit_callbacks
):
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_eager_propagates", False)  # eager retries run again
    settings.LOAM_SHARED_FS_SERVER = "postgres://postgres@127.0.0.1:9/postgres?connect_timeout=2"
    request = HostRequest(
        flavor=agent_world.flavors[1],
        image=agent_world.image,
        region=agent_world.region,
        system_disk_gb=50,
        name="a1",
        ssh_public_key=SSH_KEY,
    )
    with django_capture_on_commit_callbacks(execute=True):
        (order,) = submit_create(
            organization=agent_world.organization, actor=owner, request=request
        )

    host = Instance.objects.get(pk=order.instance_id)
    assert host.state == InstanceState.ERROR
    assert "file storage can't be reached" in host.error_message  # after its retries
    assert not SharedFileSystem.objects.exists() and not AgentHost.objects.exists()
