"""The agent driver (apps/orchestration/backends/agent.py) over its store (apps/agents/hosts.py):
desired state by generations, request status from the agents' reports, capacity and
telemetry from enrolled servers."""

import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone

from apps.agents import services
from apps.agents.host_ca import ca_public_key
from apps.agents.models import AGENT_HOST_TRANSITIONS, AgentHost, AgentServer, WantedState
from apps.agents.selectors import desired_hosts, hosts_etag
from apps.core.errors import InvalidTransition
from apps.core.models import AuditEvent
from apps.core.transactions import lock
from apps.core.transitions import transition
from apps.orchestration.backends.base import BackendError, HostNetwork, HostSpec
from apps.orchestration.backends.registry import driver_of, get_driver
from apps.orchestration.models import Accelerator, Allocation, Node, NodeHealth
from apps.orchestration.services import probe_backend
from apps.orders.hosts import network_group
from apps.orders.models import InstanceState
from apps.quotas.models import QuotaResource
from tests.agents.conftest import SSH_KEY, card, next_report_sequence, sample
from tests.factories import (
    AgentHostFactory,
    InstanceFactory,
    OrganizationFactory,
    QuotaLimitFactory,
    SharedFileSystemFactory,
)
from tests.locks import wait_for_a_blocked_lock

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def spec(node="gpu-07", indices=(0, 1), **changes) -> HostSpec:
    values = {
        "name": "train-1",
        "node": node,
        "accelerator_indices": tuple(indices),
        "vcpu": 16,
        "ram_gb": 128,
        "system_disk_gb": 50,
        "data_disk_gb": 100,
        "bandwidth_mbps": 50,
        "image": "debian-12",
        "ssh_public_key": SSH_KEY + "\n\n",
        **changes,
    }
    return HostSpec(**values)


def report(server, host_id, generation, state, **fields):
    services.record_host_reports(
        server=server,
        sequence=next_report_sequence(),
        reports=[
            {
                "id": host_id,
                "generation": generation,
                "state": state,
                "address": fields.get("address", "10.213.7.2" if state == "running" else None),
                "ssh_port": fields.get("ssh_port", 22 if state == "running" else None),
                "message": fields.get("message", ""),
            }
        ],
    )


@pytest.fixture
def server(agent_world):
    enrolled, _credential = agent_world.enrol("gpu-07", cards=4)
    return enrolled


@pytest.fixture
def driver(agent_world):
    return driver_of(agent_world.backend)


def host_of(request: str) -> AgentHost:
    return AgentHost.objects.get(handle=request.split("@")[0])


# --- provisioning ------------------------------------------------------------------------------


def test_provision_writes_the_desired_host(server, driver):
    before = server.hosts_version

    request = driver.provision(spec(indices=(1, 2)))

    host = host_of(request)
    assert request == f"{host.handle}@1"
    assert host.handle.startswith("h-")
    (listed,) = desired_hosts(server)
    assert listed == {
        "id": host.handle,
        "generation": 1,
        "state": "running",
        "card_uuids": [card(1)["uuid"], card(2)["uuid"]],
        "vcpu": 16,
        "memory_mib": 131072,
        "system_disk_gb": 50,
        "data_disk_gb": 100,
        "bandwidth_mbps": 50,
        "image": "debian-12",
        "ssh_public_keys": [SSH_KEY],
        # The web terminal's CA (apps.agents.host_ca), for root's certificate logins.
        "ssh_user_ca_keys": [ca_public_key()],
        # No network asked for: a private network of its own, SSH on the lowest free port of
        # the default range, everything forwarded open to all.
        "network": {
            "group": host.handle,
            "public_ip": "",
            "ports": [{"purpose": "ssh", "protocol": "tcp", "server_port": 20000, "host_port": 22}],
            "ingress": [
                {"protocol": "tcp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
                {"protocol": "udp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
            ],
        },
        "services": [],  # its image starts no web service
        "shared_fs": None,  # its organization has no shared file storage in the region
        "volumes": [],  # none attached
    }
    server.refresh_from_db()
    assert server.hosts_version == before + 1


def test_the_hosts_of_an_organization_with_shared_storage_mount_it(
    agent_world, server, driver, settings
):
    settings.LOAM_SHARED_FS_SERVER = "postgres://portal@storage.edge/postgres?sslmode=require"
    other = OrganizationFactory(park=agent_world.park)

    def provisioned(name, index, organization):
        network = HostNetwork(group=network_group(organization.pk))
        return host_of(driver.provision(spec(name=name, indices=(index,), network=network)))

    # Just provisioned: no instance names the host yet, its network says whose it is.
    mine = provisioned("mine", 0, agent_world.organization)
    theirs = provisioned("theirs", 1, other)
    etag = hosts_etag(server)
    QuotaLimitFactory(
        park=agent_world.park,
        organization=agent_world.organization,
        resource=QuotaResource.SHARED_STORAGE_GB,
        limit=20,
    )
    file_system = SharedFileSystemFactory(
        organization=agent_world.organization, region=agent_world.region
    )

    assert hosts_etag(server) != etag  # the agent hears of it at its next poll
    listed = {host["id"]: host["shared_fs"] for host in desired_hosts(server)}
    assert listed[theirs.handle] is None
    shared = listed[mine.handle]
    assert shared["name"] == file_system.name
    assert shared["capacity_gb"] == 20
    assert shared["storage"] == "postgres"
    assert shared["meta_url"] == shared["bucket"]
    assert shared["meta_url"].startswith(f"postgres://{file_system.name}:")
    assert f"/{file_system.database}?" in shared["meta_url"]


def test_provisioning_the_same_host_again_is_the_same_request(server, driver):
    first = driver.provision(spec())

    assert driver.provision(spec()) == first
    assert AgentHost.objects.count() == 1


def test_provisioning_on_an_unknown_server_or_card_is_refused(server, driver):
    with pytest.raises(BackendError) as excinfo:
        driver.provision(spec(node="gpu-99"))
    assert not excinfo.value.transient
    with pytest.raises(BackendError) as excinfo:
        driver.provision(spec(indices=(7,)))
    assert "index 7" in str(excinfo.value)


def test_status_is_done_once_the_agent_reports_the_generation_running(server, driver):
    request = driver.provision(spec())
    host = host_of(request)
    assert not driver.host_request_status(request).done

    report(server, host.handle, 1, "creating")
    assert not driver.host_request_status(request).done

    report(server, host.handle, 1, "running", address="10.213.7.9", ssh_port=2222)
    status = driver.host_request_status(request)
    assert status.done
    assert (status.access.handle, status.access.address, status.access.ssh_port) == (
        host.handle,
        "10.213.7.9",
        2222,
    )
    assert status.access.ssh_user == "root"


def test_a_failed_provisioning_is_a_permanent_error_and_the_host_is_removed(server, driver):
    request = driver.provision(spec())
    host = host_of(request)
    report(server, host.handle, 1, "failed", message="image debian-12 is not built here")

    with pytest.raises(BackendError) as excinfo:
        driver.host_request_status(request)

    assert not excinfo.value.transient
    assert str(excinfo.value) == "image debian-12 is not built here"
    host.refresh_from_db()
    assert (host.state, host.generation) == (WantedState.REMOVED, 2)
    assert desired_hosts(server) == []  # the server gives its cards back too


def test_a_silent_server_is_a_transient_error(server, driver, settings):
    settings.LOAM_AGENT_SILENT_AFTER_S = 20
    request = driver.provision(spec())

    with (
        time_machine.travel(timezone.now() + timedelta(seconds=30)),
        pytest.raises(BackendError) as excinfo,
    ):
        driver.host_request_status(request)

    assert excinfo.value.transient
    assert "gpu-07" in str(excinfo.value)


def test_an_unknown_request_is_a_permanent_error(server, driver):
    for request in ("nonsense", "h-nothere@1", f"{host_of(driver.provision(spec())).handle}@9"):
        with pytest.raises(BackendError) as excinfo:
            driver.host_request_status(request)
        assert not excinfo.value.transient


def test_a_report_for_an_unknown_or_older_generation_is_ignored(server, driver):
    host = host_of(driver.provision(spec()))
    services.record_host_reports(
        server=server,
        sequence=next_report_sequence(),
        reports=[{"id": "h-unknown", "generation": 1, "state": "running"}],
    )
    report(server, host.handle, 1, "running")
    driver.stop(host.handle)
    report(server, host.handle, 2, "stopped")

    report(server, host.handle, 1, "running")  # late

    host.refresh_from_db()
    assert (host.reported_generation, host.reported_state) == (2, "stopped")
    report(server, host.handle, 7, "running")  # from the future
    host.refresh_from_db()
    assert host.reported_generation == 2


# --- changes: one generation each -------------------------------------------------------------


@pytest.fixture
def running(server, driver):
    host = host_of(driver.provision(spec()))
    report(server, host.handle, 1, "running")
    return host


def test_stop_wants_the_host_stopped_without_cards(server, driver, running):
    request = driver.stop(running.handle)

    assert request == f"{running.handle}@2"
    (listed,) = desired_hosts(server)
    assert (listed["state"], listed["generation"], listed["card_uuids"]) == ("stopped", 2, [])
    assert driver.stop(running.handle) == request  # asked again: the same request
    assert not driver.host_request_status(request).done
    report(server, running.handle, 2, "stopped")
    status = driver.host_request_status(request)
    assert status.done and status.access is None


def test_start_binds_the_cards_the_portal_allocated_again(agent_world, server, driver, running):
    driver.stop(running.handle)
    report(server, running.handle, 2, "stopped")
    instance = InstanceFactory(
        organization=agent_world.organization,
        node=server.node,
        pool=agent_world.pool,
        state=InstanceState.STARTING,
        backend_handle=running.handle,
    )
    allocation = Allocation.objects.create(
        node=server.node, workload=instance.workload, vcpu=16, ram_gb=128
    )
    Accelerator.objects.filter(node=server.node, index__in=[2, 3]).update(allocation=allocation)

    request = driver.start(running.handle)

    assert request == f"{running.handle}@3"
    (listed,) = desired_hosts(server)
    assert listed["state"] == "running"
    assert listed["card_uuids"] == [card(2)["uuid"], card(3)["uuid"]]
    report(server, running.handle, 3, "running", address="10.213.7.3")
    status = driver.host_request_status(request)
    assert status.done and status.access.address == "10.213.7.3"


def test_a_start_without_cards_binds_none_on_a_small_share_and_a_later_start_restores_it(
    server, driver, running
):
    driver.stop(running.handle)
    report(server, running.handle, 2, "stopped")

    request = driver.start(running.handle, spec(indices=(), vcpu=2, ram_gb=4))

    assert request == f"{running.handle}@3"
    (listed,) = desired_hosts(server)
    assert (listed["state"], listed["card_uuids"]) == ("running", [])
    assert (listed["vcpu"], listed["memory_mib"]) == (2, 4096)
    driver.stop(running.handle)
    report(server, running.handle, 4, "stopped")

    driver.start(running.handle, spec(indices=(0, 1)))

    (listed,) = desired_hosts(server)
    assert listed["card_uuids"] == [card(0)["uuid"], card(1)["uuid"]]
    assert (listed["vcpu"], listed["memory_mib"]) == (16, 131072)


def test_resize_is_a_new_generation_with_the_new_shape(server, driver, running):
    request = driver.resize(running.handle, spec(indices=(0, 1, 2, 3), vcpu=32, ram_gb=256))

    assert request == f"{running.handle}@2"
    (listed,) = desired_hosts(server)
    assert (listed["vcpu"], listed["memory_mib"]) == (32, 262144)
    assert listed["card_uuids"] == [card(i)["uuid"] for i in range(4)]


def test_growing_the_disk_of_a_running_host_stops_it_then_starts_it(
    agent_world, server, driver, running
):
    instance = InstanceFactory(
        organization=agent_world.organization,
        node=server.node,
        pool=agent_world.pool,
        state=InstanceState.RUNNING,
        backend_handle=running.handle,
    )
    allocation = Allocation.objects.create(
        node=server.node, workload=instance.workload, vcpu=16, ram_gb=128
    )
    Accelerator.objects.filter(node=server.node, index__in=[0, 1]).update(allocation=allocation)

    request = driver.set_disk(running.handle, 500)

    assert request == f"{running.handle}@3"  # done when generation 3 runs
    (listed,) = desired_hosts(server)
    assert (listed["generation"], listed["state"], listed["data_disk_gb"]) == (2, "stopped", 500)
    assert listed["card_uuids"] == []
    assert not driver.host_request_status(request).done
    assert driver.set_disk(running.handle, 500) == request  # asked again

    report(server, running.handle, 2, "stopped")  # the agent grew the disk while stopped

    (listed,) = desired_hosts(server)
    assert (listed["generation"], listed["state"]) == (3, "running")
    assert listed["card_uuids"] == [card(0)["uuid"], card(1)["uuid"]]
    assert not driver.host_request_status(request).done
    report(server, running.handle, 3, "running")
    assert driver.host_request_status(request).done


def test_growing_the_disk_of_a_stopped_host_is_one_generation(server, driver, running):
    driver.stop(running.handle)

    request = driver.set_disk(running.handle, 300)

    assert request == f"{running.handle}@3"
    (listed,) = desired_hosts(server)
    assert (listed["state"], listed["data_disk_gb"]) == ("stopped", 300)


def test_a_failed_change_is_a_permanent_error_with_the_agents_message(server, driver, running):
    request = driver.set_bandwidth(running.handle, 200)
    report(server, running.handle, 2, "failed", message="tc: device busy")

    with pytest.raises(BackendError) as excinfo:
        driver.host_request_status(request)

    assert not excinfo.value.transient and str(excinfo.value) == "tc: device busy"
    running.refresh_from_db()
    assert running.state == WantedState.RUNNING  # only a provisioning that failed is removed


def test_release_leaves_the_host_out_of_the_list(server, driver, running):
    request = driver.release(running.handle)

    assert desired_hosts(server) == []
    assert driver.release(running.handle) == request
    assert not driver.host_request_status(request).done
    report(server, running.handle, 1, "removed")  # the last generation the agent had
    assert driver.host_request_status(request).done
    with pytest.raises(BackendError):
        driver.start(running.handle)


def moves_of(host: AgentHost) -> list[tuple[str, str]]:
    """The wanted-state moves audited for `host`, in order."""
    events = AuditEvent.objects.filter(
        object_type="agents.agenthost", object_id=str(host.pk)
    ).order_by("pk")
    return [(event.data["from"], event.data["to"]) for event in events]


def test_every_change_of_the_wanted_state_is_an_audited_move(server, driver, running):
    driver.stop(running.handle)
    driver.start(running.handle)
    driver.set_disk(running.handle, 500)  # stopped, then started once the agent says stopped
    report(server, running.handle, 4, "stopped")
    driver.release(running.handle)

    assert moves_of(running) == [
        ("running", "stopped"),
        ("stopped", "running"),
        ("running", "stopped"),
        ("stopped", "running"),
        ("running", "removed"),
    ]
    assert AgentHost.objects.get(pk=running.pk).generation == 6


@pytest.mark.parametrize("target", WantedState.values)
def test_a_removed_host_moves_no_further(server, driver, running, target):
    driver.release(running.handle)

    with pytest.raises(InvalidTransition), transaction.atomic():
        transition(running, target, table=AGENT_HOST_TRANSITIONS)

    assert AgentHost.objects.get(pk=running.pk).state == WantedState.REMOVED
    with pytest.raises(BackendError):
        driver.start(running.handle)


def test_a_revoked_server_refuses_changes_but_a_release_is_done(agent_world, server, driver):
    host = host_of(driver.provision(spec()))
    services.revoke_server(server=server, operator=agent_world.operator)

    with pytest.raises(BackendError) as excinfo:
        driver.stop(host.handle)
    assert not excinfo.value.transient and "revoked" in str(excinfo.value)

    request = driver.release(host.handle)
    assert driver.host_request_status(request).done


def test_the_hosts_of_another_backend_are_not_this_drivers(agent_world, server, driver):
    foreign = AgentHostFactory()

    with pytest.raises(BackendError):
        driver.stop(foreign.handle)


# --- inventory ----------------------------------------------------------------------------------


def test_capacity_reports_the_configured_pools_and_enrolled_servers(agent_world, server, driver):
    (pool,) = driver.capacity()

    assert (pool.name, pool.accelerator_model) == ("agent-pool", "h200-sxm")
    (node,) = pool.nodes
    assert (node.hostname, node.accelerators, node.vcpu, node.ram_gb) == ("gpu-07", 4, 64, 503)
    # Being registered (no backend row yet): the configured pools, no servers.
    unbound = get_driver("agent", agent_world.backend.config)
    assert [p.nodes for p in unbound.capacity()] == [()]


def test_a_config_without_valid_pools_is_refused():
    with pytest.raises(BackendError):
        get_driver("agent", {"pools": [{"name": ""}]}).capacity()


def test_telemetry_is_what_the_agent_measured(agent_world, server, driver):
    cards = [card(i) for i in range(4)]
    services.record_heartbeat(
        server=server,
        agent_version="0.1.0",
        taken_at=timezone.now(),
        readers=[],
        cards=cards,
        samples=[
            sample(cards[0]["uuid"], utilization_pct=0, power_w=71.0),
            sample(cards[1]["uuid"], utilization_pct=88, power_w=None),
            sample(cards[2]["uuid"], utilization_pct=None),
        ],
    )

    (reading,) = driver.telemetry({"gpu-07": 4, "elsewhere": 2})

    assert reading.hostname == "gpu-07" and reading.healthy and not reading.simulated
    assert [(a.index, a.utilization_pct, a.power_w) for a in reading.accelerators] == [
        (0, 0.0, 71.0),
        (1, 88.0, None),
    ]  # a card without a utilization figure is left out, not read as 0


def test_a_probe_keeps_the_nodes_cards_and_records_the_measured_figures(
    agent_world, server, settings
):
    cards = [card(i) for i in range(4)]
    services.record_heartbeat(
        server=server,
        agent_version="0.1.0",
        taken_at=timezone.now(),
        readers=[],
        cards=cards,
        samples=[sample(c["uuid"], utilization_pct=2, power_w=80.0) for c in cards],
    )

    backend = probe_backend(backend=agent_world.backend)

    assert backend.last_error == ""
    node = Node.objects.get(pk=server.node_id)
    assert node.accelerators.count() == 4
    assert sorted(node.accelerators.values_list("serial", flat=True)) == sorted(
        c["uuid"] for c in cards
    )
    assert node.telemetry["accelerators"]["0"]["util"] == 2.0
    assert node.telemetry["accelerators"]["0"]["power_w"] == 80.0
    assert node.telemetry["accelerators"]["0"]["idle_since"] is not None
    assert node.health == NodeHealth.HEALTHY
    # A silent server reads unhealthy: the probe agrees with the silent marking.
    settings.LOAM_AGENT_SILENT_AFTER_S = 20
    with time_machine.travel(timezone.now() + timedelta(seconds=30)):
        probe_backend(backend=agent_world.backend)
    assert Node.objects.get(pk=server.node_id).health == NodeHealth.DOWN


def test_orphaned_hosts_are_removed(agent_world, server, driver, settings):
    settings.LOAM_HOST_REQUEST_TIMEOUT_S = 240
    orphan = host_of(driver.provision(spec(name="given-up")))
    owned = host_of(driver.provision(spec(name="owned", indices=(2,))))
    InstanceFactory(
        organization=agent_world.organization,
        node=server.node,
        state=InstanceState.RUNNING,
        backend_handle=owned.handle,
    )

    assert services.remove_orphaned_hosts() == []  # too recent to tell
    with time_machine.travel(timezone.now() + timedelta(seconds=301)):
        assert services.remove_orphaned_hosts() == [orphan.handle]

    assert [h["id"] for h in desired_hosts(server)] == [owned.handle]
    assert moves_of(orphan) == [("running", "removed")]
    assert moves_of(owned) == []


# --- a change crossing a report -----------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_stop_asked_while_the_agent_reports_waits_for_the_report(server, driver, running):
    """Both lock the server before the host: the stop waits for the report instead of one of
    them deadlocking (the report would wait on the host the stop had locked)."""
    report_holds_the_server, errors = threading.Event(), []

    def report_while_a_stop_arrives():
        try:
            with transaction.atomic():
                lock(AgentServer, server.pk)
                report_holds_the_server.set()
                wait_for_a_blocked_lock()  # the stop is waiting now
                report(server, running.handle, 1, "running")
        except Exception as exc:  # a deadlock is what this looks for
            errors.append(exc)
        finally:
            connection.close()

    reporter = threading.Thread(target=report_while_a_stop_arrives)
    reporter.start()
    assert report_holds_the_server.wait(10)
    request = driver.stop(running.handle)
    reporter.join(20)

    assert errors == []
    assert request == f"{running.handle}@2"
    host = AgentHost.objects.get(pk=running.pk)
    assert (host.state, host.generation, host.reported_state) == ("stopped", 2, "running")


def test_a_probe_keeps_the_nodes_measured_power_and_its_cards_out_of_service(agent_world, server):
    """Placement ranks nodes by what their loaded cards draw and counts what they have free
    from the node's row: the probe and the heartbeat keep both."""
    cards = [card(i) for i in range(4)]
    services.record_heartbeat(
        server=server,
        agent_version="0.1.0",
        taken_at=timezone.now(),
        readers=[],
        cards=cards,
        samples=[
            sample(cards[0]["uuid"], utilization_pct=90, power_w=300.0),
            sample(cards[1]["uuid"], utilization_pct=70, power_w=340.0),
            sample(cards[2]["uuid"], utilization_pct=2, power_w=80.0),  # not under load
            sample(cards[3]["uuid"], health="ecc_errors", health_message="ECC"),
        ],
    )

    probe_backend(backend=agent_world.backend)

    node = Node.objects.get(pk=server.node_id)
    assert node.loaded_watts == 320.0
    assert node.loaded_watts_at is not None
    assert (node.room_cards, node.room_idle, node.room_free_milli) == (4, 3, 3000)
