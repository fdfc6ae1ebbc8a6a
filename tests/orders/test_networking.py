"""Reaching hosts from outside (apps/orders/networking.py): a host on an agent server is reached
on its SSH port of the server's public address; port mappings get the server's lowest free
port, at once and all or nothing; security groups are each host's ingress rules, and a change
to one is a new generation of every host in it. Hosts run on the real agent driver and store,
with a fake agent (tests/agents/conftest.py) converging as the real one would."""

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from apps.agents.models import AgentHost, AgentHostPort
from apps.agents.selectors import desired_hosts
from apps.core.errors import DomainError, InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration.backends import registry
from apps.orchestration.backends.base import Capability
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orders import networking
from apps.orders.models import Instance, InstanceState, PortMapping, SecurityGroup
from tests.agents.conftest import HOST_KEY
from tests.factories import (
    BackendFactory,
    InstanceFactory,
    NodeFactory,
    PoolFactory,
    SecurityGroupFactory,
    SecurityGroupRuleFactory,
)
from tests.orders.agent_hosts import PUBLIC
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

REACHED = {"address": PUBLIC, "ssh_port": 20000, "ssh_user": "root"}

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

OPEN = [
    {"protocol": "tcp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
    {"protocol": "udp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
]


def agent_host(instance) -> AgentHost:
    return AgentHost.objects.get(handle=instance.backend_handle)


def network_of(instance) -> dict:
    """The host's "network" as GET /api/v1/agent/hosts lists it."""
    host = agent_host(instance)
    (listed,) = [h for h in desired_hosts(host.server) if h["id"] == host.handle]
    return listed["network"]


def add(instance, actor, host_port, protocol="tcp") -> PortMapping:
    return networking.add_port_mapping(
        instance=instance, actor=actor, protocol=protocol, host_port=host_port
    )


# --- the SSH port ---------------------------------------------------------------------------------


def test_a_host_is_reached_on_its_ssh_port_of_its_servers_public_address(agent_world, order_host):
    instance = order_host()

    assert instance.access == {**REACHED, "ssh_host_keys": [HOST_KEY]}
    assert network_of(instance) == {
        "group": f"o-{agent_world.organization.pk}",
        "public_ip": "",
        "ports": [{"purpose": "ssh", "protocol": "tcp", "server_port": 20000, "host_port": 22}],
        "ingress": OPEN,  # the organization's default group
    }
    assert order_host("db").access["ssh_port"] == 20001


def test_the_access_stays_across_stop_start_and_resize(agent_world, order_host, operate):
    instance = order_host()

    for kind, params in (
        ("stop", {}),
        ("start", {}),
        ("resize", {"flavor": agent_world.flavors[2]}),
    ):
        order = operate(Instance.objects.get(pk=instance.pk), kind, **params)
        assert order.state == "done", order.reason

    instance.refresh_from_db()
    assert instance.state == InstanceState.RUNNING
    assert instance.access == {**REACHED, "ssh_host_keys": [HOST_KEY]}


def test_a_released_host_frees_its_ports_and_mappings(order_host, operate, owner):
    instance = order_host()
    add(instance, owner, 8888)

    assert operate(instance, "release").state == "done"

    assert not PortMapping.objects.filter(instance=instance).exists()
    assert not AgentHostPort.objects.exists()
    assert order_host("next").access["ssh_port"] == 20000  # the lowest free, again


# --- port mappings --------------------------------------------------------------------------------


def test_a_mapping_gets_the_lowest_free_port_at_once(order_host, owner):
    instance = order_host()
    generation = agent_host(instance).generation

    mapping = add(instance, owner, 8888)

    assert (mapping.address, mapping.server_port) == (PUBLIC, 20001)
    assert (mapping.endpoint, mapping.url) == (f"{PUBLIC}:20001", f"http://{PUBLIC}:20001/")
    assert network_of(instance)["ports"][1] == {
        "purpose": "mapping",
        "protocol": "tcp",
        "server_port": 20001,
        "host_port": 8888,
    }
    host = agent_host(instance)
    assert (host.generation, host.state) == (generation + 1, "running")  # live: no restart
    udp = add(instance, owner, 8888, protocol="udp")
    assert (udp.server_port, udp.url) == (20000, "")  # udp's own numbers; no http link
    event = AuditEvent.objects.filter(action="instance.port_mapping_added").order_by("pk").first()
    assert event.data["server_port"] == 20001 and event.object_id == str(instance.pk)


def test_a_removed_mapping_frees_its_port_for_the_next(order_host, owner):
    instance = order_host()
    first, second = add(instance, owner, 80), add(instance, owner, 443)

    networking.remove_port_mapping(mapping=first, actor=owner)

    assert list(instance.port_mappings.values_list("host_port", flat=True)) == [443]
    assert add(instance, owner, 8080).server_port == first.server_port == 20001
    assert PortMapping.objects.get(pk=second.pk).server_port == 20002
    assert AuditEvent.objects.filter(action="instance.port_mapping_removed").count() == 1


def test_a_stopped_host_keeps_its_mappings_and_takes_new_ones(order_host, operate, owner):
    instance = order_host()
    add(instance, owner, 8888)
    operate(instance, "stop")

    mapping = add(Instance.objects.get(pk=instance.pk), owner, 9000)

    assert mapping.server_port == 20002
    assert [p["server_port"] for p in network_of(instance)["ports"]] == [20000, 20001, 20002]
    operate(Instance.objects.get(pk=instance.pk), "start")
    assert [p["server_port"] for p in network_of(instance)["ports"]] == [20000, 20001, 20002]


@pytest.mark.parametrize(
    ("protocol", "port", "field"),
    [
        ("tcp", 22, "host_port"),
        ("udp", 22, "host_port"),
        ("tcp", 0, "host_port"),
        ("tcp", 65536, "host_port"),
        ("tcp", "http", "host_port"),
        ("icmp", 80, "protocol"),
    ],
)
def test_a_bad_mapping_is_refused_naming_the_field(order_host, owner, protocol, port, field):
    instance = order_host()

    with pytest.raises(ValidationError) as excinfo:
        add(instance, owner, port, protocol=protocol)

    assert list(excinfo.value.message_dict) == [field]
    assert not PortMapping.objects.exists()


def test_a_port_mapped_twice_or_past_the_limit_is_refused(order_host, owner, settings):
    settings.LOAM_MAX_PORT_MAPPINGS = 2
    instance = order_host()
    add(instance, owner, 80)

    with pytest.raises(ValidationError) as excinfo:
        add(instance, owner, 80)
    assert "mapped already" in excinfo.value.message_dict["host_port"][0]

    add(instance, owner, 81)
    with pytest.raises(ValidationError) as excinfo:
        add(instance, owner, 82)
    assert "at most 2 port mappings" in " ".join(excinfo.value.messages)
    assert instance.port_mappings.count() == 2


def test_no_free_port_refuses_the_mapping_and_nothing_is_half_applied(order_host, owner):
    instance = order_host()
    order_host("db")  # 20000 and 20001: SSH
    add(instance, owner, 80)  # 20002
    add(instance, owner, 81)  # 20003: the range is full
    generation = agent_host(instance).generation

    with pytest.raises(DomainError) as excinfo:
        add(instance, owner, 82)

    assert (excinfo.value.status, excinfo.value.code) == (409, "backend_refused")
    assert "no free TCP port" in excinfo.value.message
    assert sorted(instance.port_mappings.values_list("host_port", flat=True)) == [80, 81]
    assert agent_host(instance).generation == generation
    assert AgentHostPort.objects.count() == 4


def test_mappings_need_a_running_or_stopped_host_on_a_networking_backend(
    agent_world, order_host, owner, operate, monkeypatch
):
    instance = order_host()
    operate(instance, "release")
    with pytest.raises(InvalidTransition) as excinfo:
        add(Instance.objects.get(pk=instance.pk), owner, 80)
    assert "Released" in excinfo.value.message

    class PlainDriver(SimulatorDriver):  # hosts, but no network of its own
        name = "plain"
        capabilities = frozenset({Capability.INVENTORY, Capability.HOSTS})

    monkeypatch.setitem(registry._DRIVERS, "plain", PlainDriver)
    pool = PoolFactory(backend=BackendFactory(park=agent_world.park, driver="plain"))
    elsewhere = InstanceFactory(
        organization=agent_world.organization,
        running=True,
        pool=pool,
        node=NodeFactory(pool=pool),
        backend_handle="sim-0a0b0c0d0e0f",
    )
    with pytest.raises(DomainError) as excinfo:
        add(elsewhere, owner, 80)
    assert (excinfo.value.status, excinfo.value.code) == (409, "not_supported")
    assert "does not forward ports" in excinfo.value.message
    group = SecurityGroupFactory(organization=agent_world.organization)
    with pytest.raises(DomainError) as excinfo:
        networking.set_instance_security_group(instance=elsewhere, actor=owner, group=group)
    assert excinfo.value.status == 409
    assert not PortMapping.objects.exists()


@pytest.mark.parametrize(
    ("role", "allowed"),
    [("admin", True), ("member", True), ("billing", False), ("viewer", False)],
)
def test_who_may_map_ports(order_host, member_of, agent_world, role, allowed):
    instance = order_host()
    actor = member_of(agent_world.organization, role)

    if allowed:
        assert add(instance, actor, 8080).server_port == 20001
    else:
        with pytest.raises(PermissionDenied):
            add(instance, actor, 8080)


# --- security groups ------------------------------------------------------------------------------


def test_every_organization_has_a_default_group_open_to_all(agent_world):
    group = networking.default_security_group(agent_world.organization)

    assert (group.name, group.is_default) == ("default", True)
    assert list(group.rules.values("protocol", "from_port", "to_port", "source")) == OPEN
    assert networking.default_security_group(agent_world.organization) == group


@pytest.mark.parametrize(
    ("fields", "wrong"),
    [
        ({"source": "10.0.0.0/33"}, "source"),
        ({"source": "abc"}, "source"),
        ({"source": ""}, "source"),
        ({"from_port": 0}, "from_port"),
        ({"to_port": 65536}, "to_port"),
        ({"from_port": 9000, "to_port": 8000}, "to_port"),
        ({"protocol": "icmp"}, "protocol"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field(agent_world, owner, fields, wrong):
    group = SecurityGroupFactory(organization=agent_world.organization)
    rule = {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "0.0.0.0/0", **fields}

    with pytest.raises(ValidationError) as excinfo:
        networking.add_security_group_rule(group=group, actor=owner, **rule)

    assert list(excinfo.value.message_dict) == [wrong]
    assert not group.rules.exists()


def test_a_rule_source_is_kept_as_its_network(agent_world, owner):
    group = SecurityGroupFactory(organization=agent_world.organization)

    rule = networking.add_security_group_rule(
        group=group, actor=owner, protocol="tcp", from_port=22, to_port=22, source=" 10.1.2.3/8"
    )

    assert rule.source == "10.0.0.0/8"
    with pytest.raises(ValidationError):  # the same rule again
        networking.add_security_group_rule(
            group=group, actor=owner, protocol="tcp", from_port=22, to_port=22, source="10.0.0.0/8"
        )


def test_a_rule_change_is_a_new_generation_of_every_host_in_the_group(
    agent_world, order_host, owner
):
    web, db = order_host("web"), order_host("db")
    office = SecurityGroupFactory(organization=agent_world.organization, name="office")
    SecurityGroupRuleFactory(group=office, from_port=22, to_port=22, source="203.0.113.0/24")
    networking.set_instance_security_group(instance=db, actor=owner, group=office)
    before = {host.handle: host.generation for host in AgentHost.objects.all()}
    default = networking.default_security_group(agent_world.organization)

    rule = networking.add_security_group_rule(
        group=default, actor=owner, protocol="udp", from_port=53, to_port=53, source="::/0"
    )

    assert network_of(web)["ingress"] == [
        *OPEN,
        {"protocol": "udp", "from_port": 53, "to_port": 53, "source": "::/0"},
    ]
    assert agent_host(web).generation == before[web.backend_handle] + 1
    assert agent_host(db).generation == before[db.backend_handle]  # another group's host
    assert agent_host(web).state == "running"

    networking.remove_security_group_rule(rule=rule, actor=owner)
    assert network_of(web)["ingress"] == OPEN
    assert agent_host(web).generation == before[web.backend_handle] + 2
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"security_group.rule_added", "security_group.rule_removed"} <= actions


def test_moving_a_host_to_another_group_changes_its_ingress_live(agent_world, order_host, owner):
    instance = order_host()
    generation = agent_host(instance).generation
    office = SecurityGroupFactory(organization=agent_world.organization, name="office")
    SecurityGroupRuleFactory(group=office, from_port=22, to_port=22, source="203.0.113.0/24")

    networking.set_instance_security_group(instance=instance, actor=owner, group=office)

    assert Instance.objects.get(pk=instance.pk).security_group == office
    assert network_of(instance)["ingress"] == [
        {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "203.0.113.0/24"}
    ]
    assert agent_host(instance).generation == generation + 1
    event = AuditEvent.objects.get(action="instance.security_group_changed")
    assert event.data["to"] == "office"
    other = SecurityGroupFactory()  # another organization's
    with pytest.raises(ValidationError):
        networking.set_instance_security_group(instance=instance, actor=owner, group=other)


def test_a_host_ordered_in_a_group_starts_with_its_rules(agent_world, order_host):
    office = SecurityGroupFactory(organization=agent_world.organization, name="office")
    SecurityGroupRuleFactory(group=office, protocol="tcp", from_port=22, to_port=22)

    instance = order_host(security_group=office)

    assert instance.security_group == office
    assert agent_host(instance).generation == 1  # created with them, not changed after
    assert network_of(instance)["ingress"] == [
        {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "0.0.0.0/0"}
    ]


def test_a_host_cannot_be_ordered_in_another_organizations_group(agent_world, order_host):
    with pytest.raises(ValidationError) as excinfo:
        order_host(security_group=SecurityGroupFactory())
    assert "security_group" in excinfo.value.message_dict


def test_a_group_in_use_or_the_default_cannot_be_deleted(agent_world, order_host, owner):
    instance = order_host()
    office = networking.create_security_group(
        organization=agent_world.organization, actor=owner, name="office"
    )
    networking.set_instance_security_group(instance=instance, actor=owner, group=office)

    with pytest.raises(InvalidTransition) as excinfo:
        networking.delete_security_group(group=office, actor=owner)
    assert "in use by web" in excinfo.value.message
    default = networking.default_security_group(agent_world.organization)
    with pytest.raises(InvalidTransition):
        networking.delete_security_group(group=default, actor=owner)

    networking.set_instance_security_group(instance=instance, actor=owner, group=default)
    networking.delete_security_group(group=office, actor=owner)
    assert list(SecurityGroup.objects.values_list("name", flat=True)) == ["default"]


def test_group_names_are_unique_and_the_default_keeps_its_own(agent_world, owner):
    networking.create_security_group(organization=agent_world.organization, actor=owner, name="a")

    with pytest.raises(ValidationError) as excinfo:
        networking.create_security_group(
            organization=agent_world.organization, actor=owner, name="A"
        )
    assert "name" in excinfo.value.message_dict
    with pytest.raises(ValidationError):
        networking.create_security_group(
            organization=agent_world.organization, actor=owner, name="default"
        )
    default = networking.default_security_group(agent_world.organization)
    with pytest.raises(ValidationError):
        networking.update_security_group(group=default, actor=owner, name="open")
    networking.update_security_group(group=default, actor=owner, name="default", description="x")
    assert SecurityGroup.objects.get(pk=default.pk).description == "x"


# --- changes crossing each other (PostgreSQL) --------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_rule_change_and_a_mapping_crossing_each_other_both_reach_the_host(
    agent_world, order_host, owner
):
    """Each writes the host's whole network under the host's lock (a rule change takes the
    group's first): whichever goes second sees the first's rows, so neither is lost, and
    neither deadlocks."""
    instance = order_host()
    default = networking.default_security_group(agent_world.organization)
    start, errors = threading.Barrier(2), []

    def run(change):
        try:
            start.wait(10)
            change()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    changes = [
        lambda: networking.add_security_group_rule(
            group=default, actor=owner, protocol="udp", from_port=53, to_port=53, source="::/0"
        ),
        lambda: add(instance, owner, 8888),
    ]
    threads = [threading.Thread(target=run, args=(change,)) for change in changes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    network = network_of(instance)
    assert {"protocol": "udp", "from_port": 53, "to_port": 53, "source": "::/0"} in network[
        "ingress"
    ]
    assert [port["host_port"] for port in network["ports"]] == [22, 8888]


def _race(steps: dict) -> tuple[dict, list]:
    """Run the named steps at once, each in its own thread and connection: each step's
    outcome ("done", or "refused" with a domain reason), and any other exception."""
    start, results, errors = threading.Barrier(len(steps)), {}, []

    def run(name, step):
        try:
            start.wait(10)
            step()
            results[name] = "done"
        except (ValidationError, InvalidTransition):
            results[name] = "refused"
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in steps.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results, errors


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_order_and_the_delete_of_its_group_crossing_end_cleanly(agent_world, agent, owner):
    """An order names a group while the group is deleted: the order holds the group's key
    until it commits, and the delete locks it FOR UPDATE, so one of them wins and the other is
    refused with its reason (the host in use, or the group gone), never an IntegrityError at
    COMMIT (where the foreign key is checked). The delete starts a little later each round."""
    from apps.orders.services import HostRequest, submit_create
    from tests.agents.conftest import SSH_KEY

    outcomes = []
    for round_number in range(4):
        group = networking.create_security_group(
            organization=agent_world.organization, actor=owner, name=f"race-{round_number}"
        )
        request = HostRequest(
            flavor=agent_world.flavors[1],
            image=agent_world.image,
            region=agent_world.region,
            system_disk_gb=50,
            ssh_public_key=SSH_KEY,
            name=f"race-{round_number}",
            security_group=group,
        )

        def delete(group=group, delay=round_number * 0.03):
            time.sleep(delay)
            networking.delete_security_group(group=group, actor=owner)

        results, errors = _race(
            {
                "order": lambda request=request: submit_create(
                    organization=agent_world.organization, actor=owner, request=request
                ),
                "delete": delete,
            }
        )

        assert errors == []
        assert sorted(results.values()) == ["done", "refused"], results
        ordered = Instance.objects.filter(name=f"race-{round_number}").exists()
        assert ordered == (results["order"] == "done")
        assert SecurityGroup.objects.filter(pk=group.pk).exists() == ordered
        outcomes.append(results["order"])
    print("order won:", outcomes.count("done"), "of", len(outcomes))
