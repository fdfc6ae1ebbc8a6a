"""Hosts reached from outside (issue 29), the agent's half of the portal: each server's public
address and port range (enrolment, heartbeats), the ports the driver's store allocates to its
hosts (the lowest free, one host's per server and protocol, kept until the host is removed),
the "network" of each host in GET hosts, and where tenants reach a running host."""

import threading

import pytest
from django.db import IntegrityError, connection, transaction

from apps.agents import services
from apps.agents.models import AgentHost, AgentHostPort, AgentServer
from apps.agents.selectors import desired_hosts
from apps.orchestration.backends.base import (
    BackendError,
    HostNetwork,
    IngressRule,
    PortForward,
)
from apps.orchestration.backends.registry import driver_of
from tests.agents.conftest import enrol_body, heartbeat_body, next_report_sequence
from tests.agents.test_hosts import host_of, report, spec
from tests.factories import AgentHostPortFactory, JoinTokenFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

PUBLIC = "198.51.100.2"
GROUP = HostNetwork(
    group="o-7",
    ingress=(
        IngressRule("tcp", 22, 22, "203.0.113.7/24"),  # written as a network: 203.0.113.0/24
        IngressRule("udp", 1, 65535, "0.0.0.0/0"),
    ),
)


def with_mappings(*mappings, network=GROUP) -> HostNetwork:
    return HostNetwork(
        group=network.group,
        ingress=network.ingress,
        mappings=tuple(PortForward(protocol, port) for protocol, port in mappings),
    )


@pytest.fixture
def enrolled(agent_world):
    """gpu-07, four cards, reached on PUBLIC, ports 20000-20004: (server, credential)."""
    return agent_world.enrol("gpu-07", cards=4, public_address=PUBLIC, public_ports=[20000, 20004])


@pytest.fixture
def server(enrolled):
    return enrolled[0]


@pytest.fixture
def driver(agent_world):
    return driver_of(agent_world.backend)


def provision(driver, name="web", indices=(0,), network=GROUP) -> AgentHost:
    return host_of(driver.provision(spec(name=name, indices=indices, network=network)))


def ports_of(host) -> list[tuple]:
    return sorted(
        AgentHostPort.objects.filter(host=host).values_list(
            "purpose", "protocol", "server_port", "host_port"
        )
    )


def listed(server, host) -> dict:
    (found,) = [h for h in desired_hosts(server) if h["id"] == host.handle]
    return found


# --- the desired state ---------------------------------------------------------------------------


def test_a_provisioned_host_gets_ssh_on_the_lowest_free_port_and_its_network(server, driver):
    host = provision(driver)

    assert listed(server, host)["network"] == {
        "group": "o-7",
        "public_ip": "",
        "ports": [{"purpose": "ssh", "protocol": "tcp", "server_port": 20000, "host_port": 22}],
        "ingress": [
            {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "203.0.113.0/24"},
            {"protocol": "udp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
        ],
    }
    second = provision(driver, name="db", indices=(1,))
    assert ports_of(second) == [("ssh", "tcp", 20001, 22)]


def test_the_hosts_list_carries_every_port_ssh_first(enrolled, driver, client):
    _server, credential = enrolled
    host = provision(driver)
    ports = driver.set_network(host.handle, with_mappings(("tcp", 8888), ("udp", 5353)))

    response = client.get("/api/v1/agent/hosts", HTTP_AUTHORIZATION=f"Bearer {credential}")

    (body,) = response.json()["hosts"]
    assert body["generation"] == 2
    assert body["network"] == {
        "group": "o-7",
        "public_ip": "",
        "ports": [
            {"purpose": "ssh", "protocol": "tcp", "server_port": 20000, "host_port": 22},
            # udp has its own numbers: its first mapping takes 20000 too
            {"purpose": "mapping", "protocol": "udp", "server_port": 20000, "host_port": 5353},
            {"purpose": "mapping", "protocol": "tcp", "server_port": 20001, "host_port": 8888},
        ],
        "ingress": [
            {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "203.0.113.0/24"},
            {"protocol": "udp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
        ],
    }
    assert ports.address == PUBLIC
    assert (ports.server_port("tcp", 8888), ports.server_port("udp", 5353)) == (20001, 20000)


def test_a_network_change_is_a_new_generation_the_same_network_is_none(server, driver):
    host = provision(driver)
    report(server, host.handle, 1, "running")
    before = AgentServer.objects.get(pk=server.pk).hosts_version

    driver.set_network(host.handle, with_mappings(("tcp", 8888)))
    host.refresh_from_db()
    assert host.generation == 2 and host.state == "running"  # applied live: no stop, no start
    assert AgentServer.objects.get(pk=server.pk).hosts_version == before + 1

    again = driver.set_network(host.handle, with_mappings(("tcp", 8888)))
    host.refresh_from_db()
    assert host.generation == 2
    assert AgentServer.objects.get(pk=server.pk).hosts_version == before + 1
    assert again.server_port("tcp", 8888) == 20001

    other_rules = HostNetwork(group="o-7", ingress=(IngressRule("tcp", 1, 1024, "10.0.0.0/8"),))
    driver.set_network(host.handle, with_mappings(("tcp", 8888), network=other_rules))
    host.refresh_from_db()
    assert host.generation == 3
    assert listed(server, host)["network"]["ingress"] == [
        {"protocol": "tcp", "from_port": 1, "to_port": 1024, "source": "10.0.0.0/8"}
    ]
    driver.set_network(host.handle, HostNetwork(group="o-8", ingress=other_rules.ingress))
    host.refresh_from_db()
    assert host.generation == 4 and listed(server, host)["network"]["group"] == "o-8"


def test_ports_are_unique_per_server_and_protocol(server, driver, agent_world):
    first = provision(driver)
    second = provision(driver, name="db", indices=(1,))
    driver.set_network(first.handle, with_mappings(("tcp", 80), ("tcp", 443)))
    driver.set_network(second.handle, with_mappings(("tcp", 80)))

    taken = AgentHostPort.objects.filter(server=server, protocol="tcp")
    assert sorted(taken.values_list("server_port", flat=True)) == [
        20000,
        20001,
        20002,
        20003,
        20004,
    ]
    # Another server hands out the same numbers: they are on its own address.
    agent_world.enrol("gpu-08", cards=1, public_address="198.51.100.3")
    elsewhere = host_of(driver.provision(spec(node="gpu-08", name="far", indices=(0,))))
    assert ports_of(elsewhere) == [("ssh", "tcp", 20000, 22)]
    # The database refuses a second holder of one server's port, whatever the code does.
    with pytest.raises(IntegrityError), transaction.atomic():
        AgentHostPortFactory(host=second, server_port=20000, host_port=9999)


def test_ports_are_kept_across_stop_start_resize_and_reports(server, driver):
    host = provision(driver)
    driver.set_network(host.handle, with_mappings(("tcp", 8888)))
    kept = ports_of(host)
    report(server, host.handle, 2, "running")

    driver.stop(host.handle)
    report(server, host.handle, 3, "stopped")
    driver.start(host.handle)
    report(server, host.handle, 4, "running")
    driver.resize(host.handle, spec(indices=(0, 1), vcpu=32, ram_gb=256))
    # An agent restart: nothing new.
    services.record_host_reports(server=server, sequence=next_report_sequence(), reports=[])

    assert ports_of(host) == kept == [("mapping", "tcp", 20001, 8888), ("ssh", "tcp", 20000, 22)]
    assert listed(server, host)["network"]["ports"][0]["server_port"] == 20000


def test_a_removed_mapping_frees_its_port_for_the_next(server, driver):
    host = provision(driver)
    driver.set_network(host.handle, with_mappings(("tcp", 80), ("tcp", 443)))
    assert ports_of(host)[0:2] == [("mapping", "tcp", 20001, 80), ("mapping", "tcp", 20002, 443)]

    driver.set_network(host.handle, with_mappings(("tcp", 443)))
    ports = driver.set_network(host.handle, with_mappings(("tcp", 443), ("tcp", 8080)))

    assert ports.server_port("tcp", 8080) == 20001  # the lowest free: 80's old port
    assert ports.server_port("tcp", 443) == 20002  # kept


def test_a_released_host_frees_its_ports_and_is_not_sent(server, driver):
    first = provision(driver)
    driver.set_network(first.handle, with_mappings(("tcp", 8888)))
    second = provision(driver, name="db", indices=(1,))
    assert ports_of(second) == [("ssh", "tcp", 20002, 22)]

    driver.release(first.handle)

    assert ports_of(first) == []
    assert [h["id"] for h in desired_hosts(server)] == [second.handle]
    third = provision(driver, name="cache", indices=(2,))
    assert ports_of(third) == [("ssh", "tcp", 20000, 22)]  # the released host's, again
    # A removed host has no network to change: nothing is forwarded to it.
    ports = driver.set_network(first.handle, with_mappings(("tcp", 9999)))
    assert ports.ports == () and ports_of(first) == []


def test_an_orphaned_host_removed_by_the_sweep_frees_its_ports(server, driver):
    host = provision(driver)
    AgentHost.objects.filter(pk=host.pk).update(
        created_at=host.created_at.replace(year=2020), public_ip="198.51.100.129"
    )

    assert services.remove_orphaned_hosts() == [host.handle]

    assert ports_of(host) == []
    assert AgentHost.objects.get(pk=host.pk).public_ip is None


def test_no_free_port_refuses_and_changes_nothing(server, driver):
    hosts = [provision(driver, name=f"h{n}", indices=(n,)) for n in range(4)]  # 20000-20003
    generation = AgentHost.objects.get(pk=hosts[1].pk).generation

    with pytest.raises(BackendError) as excinfo:  # 80 would get 20004; 81 none
        driver.set_network(hosts[1].handle, with_mappings(("tcp", 80), ("tcp", 81)))

    assert not excinfo.value.transient
    assert "no free TCP port" in str(excinfo.value) and "20000–20004" in str(excinfo.value)
    assert ports_of(hosts[1]) == [("ssh", "tcp", 20001, 22)]  # 80's port was given back too
    assert AgentHost.objects.get(pk=hosts[1].pk).generation == generation
    assert driver.set_network(hosts[1].handle, with_mappings(("tcp", 80))).ports[1].server_port == (
        20004
    )
    driver.release(hosts[3].handle)  # 20003 free again
    with pytest.raises(BackendError):  # SSH and two mappings: one port short
        provision(driver, name="h5", indices=(3,), network=with_mappings(("tcp", 80), ("tcp", 81)))
    assert not AgentHost.objects.filter(name="h5").exists()
    assert not AgentHostPort.objects.filter(server_port=20003).exists()


def test_a_network_change_while_a_growing_disk_keeps_the_host_stopped_rides_on_the_restart(
    server, driver
):
    host = provision(driver)
    report(server, host.handle, 1, "running")
    request = driver.set_disk(host.handle, 500)  # generation 2 stops it, 3 starts it again

    driver.set_network(host.handle, with_mappings(("tcp", 8888)))

    host.refresh_from_db()
    assert (host.generation, host.start_after) == (2, 2)
    report(server, host.handle, 2, "stopped")
    host.refresh_from_db()
    assert (host.generation, host.state) == (3, "running")
    assert listed(server, host)["network"]["ports"][1]["host_port"] == 8888
    assert not driver.host_request_status(request).done
    report(server, host.handle, 3, "running")
    assert driver.host_request_status(request).done


# --- where tenants reach a host -------------------------------------------------------------------


def test_a_running_host_is_reached_on_its_ssh_port_of_the_public_address(server, driver):
    request = driver.provision(spec(network=GROUP))
    host = host_of(request)
    report(server, host.handle, 1, "running", address="10.213.7.2", ssh_port=22)

    access = driver.host_request_status(request).access

    assert (access.address, access.ssh_port, access.ssh_user) == (PUBLIC, 20000, "root")
    start = driver.stop(host.handle)
    report(server, host.handle, 2, "stopped")
    assert driver.host_request_status(start).access is None
    start = driver.start(host.handle)
    report(server, host.handle, 3, "running", address="10.213.7.9")
    assert driver.host_request_status(start).access.ssh_port == 20000  # kept


def test_without_a_public_address_a_host_is_reached_where_its_sshd_listens(agent_world, driver):
    agent_world.enrol("gpu-07", cards=2)  # an older agent: no public address
    request = driver.provision(spec(indices=(0,)))
    host = host_of(request)
    report(server=AgentServer.objects.get(), host_id=host.handle, generation=1, state="running")

    access = driver.host_request_status(request).access

    assert (access.address, access.ssh_port) == ("10.213.7.2", 22)


# --- what the agent says: enrolment and heartbeats ---------------------------------------------


def enrol(client, **server):
    JoinTokenFactory(secret="loamjt_net")
    body = enrol_body("loamjt_net", **server)
    return client.post("/api/v1/agent/enrol", body, content_type="application/json")


def test_enrolment_stores_the_public_address_and_ports(client):
    response = enrol(client, public_address="2001:DB8::2", public_ports=[30000, 30999])

    assert response.status_code == 201, response.content
    server = AgentServer.objects.get(public_id=response.json()["server_id"])
    assert server.public_address == "2001:db8::2"
    assert server.public_ports == (30000, 30999)


def test_an_older_agents_enrolment_has_the_default_range_and_no_address(client, settings):
    settings.LOAM_AGENT_PUBLIC_PORTS = (21000, 21999)

    response = enrol(client)

    assert response.status_code == 201, response.content
    server = AgentServer.objects.get()
    assert (server.public_address, server.public_ports) == (None, (21000, 21999))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("public_address", "198.51.100.300"),
        ("public_address", "gpu-07.example"),
        ("public_ports", [80, 1000]),
        ("public_ports", [1000, 2000]),
        ("public_ports", [30000, 20000]),
        ("public_ports", [20000, 70000]),
        ("public_ports", [20000]),
        ("public_ports", "20000-29999"),
    ],
)
def test_a_bad_public_address_or_range_is_a_400_naming_the_field(client, field, value):
    response = enrol(client, **{field: value})

    assert response.status_code == 400
    assert f"server.{field}" in response.json()["errors"]
    assert field in response.json()["detail"]
    assert not AgentServer.objects.exists()


def test_a_heartbeat_changes_the_address_and_range_and_one_without_them_keeps_them(
    agent_world, fake_agent
):
    server, credential = agent_world.enrol("gpu-07", cards=1)
    agent = fake_agent(credential, cards=1)

    response = agent.post(
        "heartbeat",
        heartbeat_body(agent.cards, public_address=PUBLIC, public_ports=[40000, 40010]),
    )
    assert response.status_code == 204, response.content
    server.refresh_from_db()
    assert (server.public_address, server.public_ports) == (PUBLIC, (40000, 40010))

    agent.heartbeat()  # an older agent's heartbeat: neither field
    server.refresh_from_db()
    assert (server.public_address, server.public_ports) == (PUBLIC, (40000, 40010))

    response = agent.post(
        "heartbeat", heartbeat_body(agent.cards, public_address=None, public_ports=None)
    )
    assert response.status_code == 204
    server.refresh_from_db()
    assert (server.public_address, server.public_ports) == (None, (20000, 29999))

    response = agent.post("heartbeat", heartbeat_body(agent.cards, public_ports=[9, 10]))
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["public_ports"]


def test_a_rule_or_port_the_agent_could_not_apply_is_refused(server, driver):
    host = provision(driver)

    for network in (
        HostNetwork(group="o-7", ingress=(IngressRule("tcp", 1, 80, "10.0.0.0/33"),)),
        HostNetwork(group="o-7", ingress=(IngressRule("icmp", 1, 80, "0.0.0.0/0"),)),
        HostNetwork(group="o-7", ingress=(IngressRule("tcp", 90, 80, "0.0.0.0/0"),)),
        with_mappings(("tcp", 0)),
        with_mappings(("sctp", 80)),
    ):
        with pytest.raises(BackendError):
            driver.set_network(host.handle, network)

    host.refresh_from_db()
    assert host.generation == 1 and ports_of(host) == [("ssh", "tcp", 20000, 22)]


# --- concurrent allocations (PostgreSQL) ------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_mappings_on_one_server_never_share_a_port(agent_world, driver):
    """Each allocation counts the taken ports under the server's lock: eight hosts mapping two
    ports each at the same moment get sixteen different ports, and nobody fails."""
    agent_world.enrol("gpu-09", cards=8, public_address=PUBLIC, public_ports=[30000, 30099])
    hosts = [
        host_of(driver.provision(spec(node="gpu-09", name=f"h{n}", indices=(n,), network=GROUP)))
        for n in range(8)
    ]
    start, errors = threading.Barrier(len(hosts)), []

    def map_two(host):
        try:
            start.wait(10)
            driver.set_network(host.handle, with_mappings(("tcp", 80), ("tcp", 443)))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=map_two, args=(host,)) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    mapped = AgentHostPort.objects.filter(purpose="mapping").values_list("server_port", flat=True)
    assert len(mapped) == 16 and sorted(mapped) == list(range(30008, 30024))


# --- a public IP per host, where the park routes addresses to the pool -------------------------


@pytest.fixture
def routed_pool(agent_world):
    """The pool's servers are routed 198.51.100.128/30: two usable addresses, .129 and .130."""
    agent_world.backend.config = {
        "pools": [
            {
                "name": "agent-pool",
                "accelerator_model": "h200-sxm",
                "public_ips": "198.51.100.128/30",
            }
        ]
    }
    agent_world.backend.save(update_fields=["config"])
    return agent_world


def test_a_pool_with_public_ips_gives_each_host_one_of_its_own(routed_pool, server):
    driver = driver_of(routed_pool.backend)
    first = driver.provision(spec(name="a", indices=(0,), network=GROUP))
    second = provision(driver, name="b", indices=(1,))

    host = host_of(first)
    assert (host.public_ip, second.public_ip) == ("198.51.100.129", "198.51.100.130")
    assert listed(server, host)["network"]["public_ip"] == "198.51.100.129"
    report(server, host.handle, 1, "running", address="10.213.7.2", ssh_port=22)
    access = driver.host_request_status(first).access
    assert (access.address, access.ssh_port) == ("198.51.100.129", 22)
    assert ports_of(host)[0][:3] == ("ssh", "tcp", 20000)  # the server's port works as well

    with pytest.raises(BackendError, match="every public IP of pool agent-pool"):
        provision(driver, name="c", indices=(2,))
    assert not AgentHost.objects.filter(name="c").exists()

    driver.release(second.handle)  # its address is free for the next host
    assert AgentHost.objects.get(pk=second.pk).public_ip is None
    assert provision(driver, name="d", indices=(3,)).public_ip == "198.51.100.130"


@pytest.mark.parametrize("public_ips", ["2001:db8::/64", "198.51.100.0/33", "a block"])
def test_a_pool_whose_public_ips_are_not_an_ipv4_network_is_refused(agent_world, public_ips):
    pool = {"name": "agent-pool", "accelerator_model": "h200-sxm", "public_ips": public_ips}
    agent_world.backend.config = {"pools": [pool]}
    agent_world.backend.save(update_fields=["config"])

    with pytest.raises(BackendError, match='"public_ips" must be an IPv4 network'):
        driver_of(agent_world.backend).capacity()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_hosts_on_servers_of_one_pool_never_share_a_public_ip(agent_world):
    """The pool's servers share its addresses, so each allocation counts the held ones under
    the pool's lock: eight hosts provisioned at once on four servers get eight addresses."""
    pool = {"name": "agent-pool", "accelerator_model": "h200-sxm", "public_ips": "198.51.100.0/28"}
    agent_world.backend.config = {"pools": [pool]}
    agent_world.backend.save(update_fields=["config"])
    for n in range(4):
        agent_world.enrol(f"gpu-1{n}", cards=2, public_address=PUBLIC)
    driver = driver_of(agent_world.backend)
    start, errors = threading.Barrier(8), []

    def provision_one(n):
        try:
            start.wait(10)
            driver.provision(spec(node=f"gpu-1{n // 2}", name=f"h{n}", indices=(n % 2,)))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=provision_one, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    addresses = sorted(AgentHost.objects.values_list("public_ip", flat=True))
    assert addresses == [f"198.51.100.{n}" for n in range(1, 9)]
