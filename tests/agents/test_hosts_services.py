"""A host's web services in the agent driver's store (apps/agents/hosts.py): a server port per
service allocated with the host and kept until it is removed, a secret per host, ingress on
those ports from the portal's networks only, and all of it in the spec the agent polls."""

import pytest

from apps.agents.hosts import host_ingress
from apps.agents.models import AgentHost, AgentHostPort
from apps.agents.selectors import desired_hosts
from apps.orchestration.backends.base import (
    OPEN_INGRESS,
    BackendError,
    HostNetwork,
    HostService,
    IngressRule,
    PortForward,
)
from tests.agents.test_hosts import driver as driver  # the fixtures, shared
from tests.agents.test_hosts import report, spec
from tests.agents.test_hosts import server as server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

SERVICES = (
    HostService(name="jupyter", port=8888, base_url="/instances/41/jupyter/"),
    HostService(name="tensorboard", port=6006, base_url="/instances/41/tensorboard/"),
)


def pytorch(name="nb-1", indices=(0,), **changes):
    return spec(name=name, indices=indices, image="pytorch", services=SERVICES, **changes)


def host_of(request: str) -> AgentHost:
    return AgentHost.objects.get(handle=request.split("@")[0])


def listed(server, host: AgentHost) -> dict:
    (found,) = [h for h in desired_hosts(server) if h["id"] == host.handle]
    return found


def ports_of(host: AgentHost) -> dict:
    return {
        (port.purpose, port.host_port): port.server_port
        for port in AgentHostPort.objects.filter(host=host)
    }


def test_a_host_with_services_gets_a_server_port_for_each_and_the_spec_lists_them(server, driver):
    host = host_of(driver.provision(pytorch()))

    assert ports_of(host) == {
        ("ssh", 22): 20000,
        ("service", 6006): 20001,
        ("service", 8888): 20002,
    }
    found = listed(server, host)
    assert found["services"] == [
        {
            "name": "jupyter",
            "port": 8888,
            "base_url": "/instances/41/jupyter/",
            "token": host.service_token,
        },
        {
            "name": "tensorboard",
            "port": 6006,
            "base_url": "/instances/41/tensorboard/",
            "token": host.service_token,
        },
    ]
    assert len(host.service_token) >= 43  # 256 random bits
    assert [p["purpose"] for p in found["network"]["ports"]] == ["ssh", "service", "service"]


def test_a_host_without_services_gets_none_and_no_secret(server, driver):
    host = host_of(driver.provision(spec()))

    assert listed(server, host)["services"] == []
    assert host.service_token == ""
    assert list(ports_of(host)) == [("ssh", 22)]


def test_the_secret_stays_across_generations_and_is_each_host_s_own(server, driver):
    first = host_of(driver.provision(pytorch()))
    token = first.service_token
    report(server, first.handle, 1, "running")
    driver.stop(first.handle)
    driver.start(first.handle)
    driver.set_network(first.handle, HostNetwork(group="o-1", ingress=OPEN_INGRESS))
    second = host_of(driver.provision(pytorch(name="nb-2", indices=(1,))))

    first.refresh_from_db()
    assert first.generation == 4
    assert listed(server, first)["services"][0]["token"] == token
    assert second.service_token not in ("", token)
    assert listed(server, second)["services"][0]["token"] == second.service_token


def test_service_ports_stay_across_stops_and_network_changes_and_are_freed_with_the_host(
    server, driver
):
    host = host_of(driver.provision(pytorch()))
    before = ports_of(host)
    driver.stop(host.handle)
    driver.start(host.handle)
    driver.set_network(
        host.handle,
        HostNetwork(group="o-1", ingress=OPEN_INGRESS, mappings=(PortForward("tcp", 80),)),
    )
    after = ports_of(host)
    assert {key: port for key, port in after.items() if key[0] != "mapping"} == before

    driver.release(host.handle)

    assert ports_of(host) == {}
    taken = host_of(driver.provision(pytorch(name="nb-2", indices=(1,))))
    assert sorted(ports_of(taken).values()) == [20000, 20001, 20002]


def test_a_mapping_to_a_service_port_is_refused_and_changes_nothing(server, driver):
    host = host_of(driver.provision(pytorch()))
    before = ports_of(host)

    with pytest.raises(BackendError, match="web service"):
        driver.set_network(
            host.handle,
            HostNetwork(group="o-1", ingress=OPEN_INGRESS, mappings=(PortForward("tcp", 8888),)),
        )

    assert ports_of(host) == before
    # UDP 8888 is no service's: mapped as any port.
    driver.set_network(
        host.handle,
        HostNetwork(group="o-1", ingress=OPEN_INGRESS, mappings=(PortForward("udp", 8888),)),
    )
    assert ports_of(host)[("mapping", 8888)] == 20000


def test_the_tenant_s_rules_never_open_a_service_port_and_the_portal_s_networks_do(
    server, driver, settings
):
    settings.LOAM_PORTAL_SOURCE_NETWORKS = ("192.0.2.10/32",)
    host = host_of(driver.provision(pytorch()))

    assert listed(server, host)["network"]["ingress"] == [
        {"protocol": "tcp", "from_port": 1, "to_port": 6005, "source": "0.0.0.0/0"},
        {"protocol": "tcp", "from_port": 6007, "to_port": 8887, "source": "0.0.0.0/0"},
        {"protocol": "tcp", "from_port": 8889, "to_port": 65535, "source": "0.0.0.0/0"},
        {"protocol": "udp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
        {"protocol": "tcp", "from_port": 6006, "to_port": 6006, "source": "192.0.2.10/32"},
        {"protocol": "tcp", "from_port": 8888, "to_port": 8888, "source": "192.0.2.10/32"},
    ]

    # A security group naming exactly a service port opens nothing there.
    driver.set_network(
        host.handle,
        HostNetwork(
            group="o-1",
            ingress=(
                IngressRule(protocol="tcp", from_port=8888, to_port=8888, source="0.0.0.0/0"),
                IngressRule(protocol="tcp", from_port=22, to_port=22, source="0.0.0.0/0"),
            ),
        ),
    )
    assert listed(server, host)["network"]["ingress"] == [
        {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "0.0.0.0/0"},
        {"protocol": "tcp", "from_port": 6006, "to_port": 6006, "source": "192.0.2.10/32"},
        {"protocol": "tcp", "from_port": 8888, "to_port": 8888, "source": "192.0.2.10/32"},
    ]


@pytest.mark.parametrize(
    ("from_port", "to_port", "kept"),
    [
        (6006, 8888, [(6007, 8887)]),
        (6000, 6006, [(6000, 6005)]),
        (8888, 9000, [(8889, 9000)]),
        (7000, 7000, [(7000, 7000)]),
        (6006, 6006, []),
    ],
)
def test_a_rule_is_cut_around_the_service_ports(settings, from_port, to_port, kept):
    settings.LOAM_PORTAL_SOURCE_NETWORKS = ()
    rule = IngressRule(protocol="tcp", from_port=from_port, to_port=to_port, source="10.0.0.0/8")
    services = [{"name": s.name, "port": s.port, "base_url": s.base_url} for s in SERVICES]

    rows = host_ingress([rule], services)

    assert [(row["from_port"], row["to_port"]) for row in rows] == kept
