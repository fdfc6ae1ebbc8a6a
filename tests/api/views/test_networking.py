"""`/api/v1/instances/{id}/port-mappings/`, `/api/v1/instances/{id}/security-group/` and
`/api/v1/security-groups/` (with rules): the services of apps/orders/networking.py behind the
API's rules (keys' scopes, problem+json naming the field, another organization's objects 404).
Hosts run on the simulator, whose forwarded ports are the host's own on its made-up address."""

import pytest

from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orders.models import Instance, PortMapping, SecurityGroup
from apps.orders.networking import default_security_group
from tests.api.conftest import ENGLISH, assert_field_errors, assert_problem, bearer, results
from tests.factories import (
    InstanceFactory,
    PortMappingFactory,
    SecurityGroupFactory,
    SecurityGroupRuleFactory,
)
from tests.orders.conftest import SSH_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


@pytest.fixture
def call(client, write_key):
    """call(method, path, data=None, key=write_key) with JSON and the key."""

    def send(method, path, data=None, *, key=None):
        return getattr(client, method)(
            path,
            data if data is not None else ({} if method != "get" else None),
            content_type="application/json",
            **{**ENGLISH, **bearer(key or write_key)},
        )

    return send


@pytest.fixture
def host(running_host):
    return running_host()


def mappings_url(instance, mapping=None) -> str:
    path = f"/api/v1/instances/{instance.pk}/port-mappings/"
    return f"{path}{mapping.pk}/" if mapping is not None else path


# --- port mappings ------------------------------------------------------------------------------


def test_a_mapping_is_added_listed_read_and_removed(call, host):
    assert results(call("get", mappings_url(host)), 0) == []

    response = call("post", mappings_url(host), {"protocol": "tcp", "host_port": 8888})

    assert response.status_code == 201, response.content
    body = response.json()
    address = host.access["address"]  # the simulator's made-up address, its port the host's
    assert body | {"id": 0, "created_at": ""} == {
        "id": 0,
        "protocol": "tcp",
        "host_port": 8888,
        "address": address,
        "server_port": 8888,
        "endpoint": f"{address}:8888",
        "url": f"http://{address}:8888/",
        "created_at": "",
    }
    mapping = PortMapping.objects.get(pk=body["id"])
    assert results(call("get", mappings_url(host)), 1)[0]["id"] == mapping.pk
    assert call("get", mappings_url(host, mapping)).json()["endpoint"] == f"{address}:8888"

    assert call("delete", mappings_url(host, mapping)).status_code == 204

    assert not PortMapping.objects.exists()
    assert_problem(call("get", mappings_url(host, mapping)), 404)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"host_port": 22}, "host_port"),
        ({"host_port": 0}, "host_port"),
        ({"host_port": 65536}, "host_port"),
        ({"host_port": "x"}, "host_port"),
        ({}, "host_port"),
        ({"host_port": 80, "protocol": "icmp"}, "protocol"),
    ],
)
def test_a_bad_mapping_is_a_400_naming_the_field(call, host, body, field):
    assert_field_errors(call("post", mappings_url(host), body), field)
    assert not PortMapping.objects.exists()


def test_a_port_mapped_twice_or_past_the_limit_is_a_400(call, host, settings):
    settings.LOAM_MAX_PORT_MAPPINGS = 1
    assert call("post", mappings_url(host), {"host_port": 80}).status_code == 201

    assert_field_errors(call("post", mappings_url(host), {"host_port": 80}), "host_port")
    body = assert_field_errors(
        call("post", mappings_url(host), {"host_port": 81}), "non_field_errors"
    )
    assert "at most 1 port mapping" in body["detail"]
    assert PortMapping.objects.count() == 1


def test_a_backend_refusal_is_a_409_and_leaves_no_mapping(call, host, monkeypatch):
    def refuse(self, handle, network):
        raise BackendError("agent: gpu-07 has no free TCP port left on its public address")

    monkeypatch.setattr(SimulatorDriver, "set_network", refuse)

    body = assert_problem(
        call("post", mappings_url(host), {"host_port": 8888}), 409, "backend_refused"
    )

    assert "no free TCP port" in body["detail"]
    assert not PortMapping.objects.exists()


def test_a_released_host_takes_no_mapping(call, host, operate):
    operate(host, "release")

    assert_problem(call("post", mappings_url(host), {"host_port": 8888}), 409, "invalid_transition")


def test_a_read_key_lists_mappings_but_cannot_change_them(call, host, read_key):
    mapping = PortMappingFactory(instance=host)

    assert results(call("get", mappings_url(host), key=read_key), 1)
    assert_problem(call("post", mappings_url(host), {"host_port": 80}, key=read_key), 403)
    assert_problem(call("delete", mappings_url(host, mapping), key=read_key), 403)
    assert PortMapping.objects.count() == 1


def test_another_organizations_instance_or_mapping_is_404(call, host, other_organization):
    theirs = InstanceFactory(organization=other_organization, running=True)
    their_mapping = PortMappingFactory(instance=theirs)

    assert_problem(call("get", mappings_url(theirs)), 404)
    assert_problem(call("post", mappings_url(theirs), {"host_port": 80}), 404)
    assert_problem(call("delete", mappings_url(theirs, their_mapping)), 404)
    # Their mapping through one of our instances is no more ours.
    assert_problem(
        call("delete", f"/api/v1/instances/{host.pk}/port-mappings/{their_mapping.pk}/"), 404
    )
    assert PortMapping.objects.filter(pk=their_mapping.pk).exists()


# --- an instance's security group ----------------------------------------------------------------


def test_a_host_moves_to_another_group(call, host, world):
    group = SecurityGroupFactory(organization=world.organization, name="office")

    response = call(
        "post", f"/api/v1/instances/{host.pk}/security-group/", {"security_group": group.pk}
    )

    assert response.status_code == 200, response.content
    assert response.json()["security_group"] == group.pk
    assert Instance.objects.get(pk=host.pk).security_group == group
    other = SecurityGroupFactory()  # another organization's: not a group we know
    assert_field_errors(
        call("post", f"/api/v1/instances/{host.pk}/security-group/", {"security_group": other.pk}),
        "security_group",
    )


def test_an_order_chooses_its_group(call, world):
    group = SecurityGroupFactory(organization=world.organization, name="office")
    order = {
        "flavor": "g1.1x",
        "image": "ubuntu-cuda",
        "region": "center",
        "ssh_public_key": SSH_KEY,
        "name": "web",
        "security_group": group.pk,
    }

    response = call("post", "/api/v1/orders/", order)

    assert response.status_code == 201, response.content
    instance = Instance.objects.get(pk=response.json()[0]["instance"])
    assert instance.security_group == group
    other = SecurityGroupFactory()
    assert_field_errors(
        call("post", "/api/v1/orders/", {**order, "security_group": other.pk}), "security_group"
    )
    assert call("get", f"/api/v1/instances/{instance.pk}/").json()["security_group"] == group.pk


# --- security groups ---------------------------------------------------------------------------


def test_the_list_has_the_default_group_open_to_all(call, host):
    (group,) = results(call("get", "/api/v1/security-groups/"), 1)

    assert (group["name"], group["is_default"], group["hosts"]) == ("default", True, 1)
    assert [
        (rule["protocol"], rule["from_port"], rule["to_port"], rule["source"])
        for rule in group["rules"]
    ] == [("tcp", 1, 65535, "0.0.0.0/0"), ("udp", 1, 65535, "0.0.0.0/0")]


def test_a_group_is_created_renamed_given_rules_and_deleted(call, world):
    response = call("post", "/api/v1/security-groups/", {"name": "office", "description": "HQ"})
    assert response.status_code == 201, response.content
    group = response.json()
    assert (group["name"], group["rules"], group["hosts"]) == ("office", [], 0)
    path = f"/api/v1/security-groups/{group['id']}/"

    assert call("patch", path, {"name": "hq"}).json()["name"] == "hq"
    rule = call(
        "post",
        f"{path}rules/",
        {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "203.0.113.9/24"},
    )
    assert rule.status_code == 201, rule.content
    assert rule.json()["source"] == "203.0.113.0/24"
    assert results(call("get", f"{path}rules/"), 1)[0]["id"] == rule.json()["id"]
    assert call("get", f"{path}rules/{rule.json()['id']}/").json()["to_port"] == 22
    assert call("delete", f"{path}rules/{rule.json()['id']}/").status_code == 204
    assert results(call("get", f"{path}rules/"), 0) == []

    assert call("delete", path).status_code == 204
    assert not SecurityGroup.objects.filter(pk=group["id"]).exists()


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"source": "10.0.0.0/33"}, "source"),
        ({"source": "abc"}, "source"),
        ({"from_port": 0}, "from_port"),
        ({"to_port": 70000}, "to_port"),
        ({"from_port": 9000, "to_port": 8000}, "to_port"),
        ({"protocol": "icmp"}, "protocol"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field(call, world, rule, field):
    group = SecurityGroupFactory(organization=world.organization)
    body = {"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "0.0.0.0/0", **rule}

    assert_field_errors(call("post", f"/api/v1/security-groups/{group.pk}/rules/", body), field)
    assert not group.rules.exists()


def test_a_group_in_use_and_the_default_are_not_deleted(call, host, world):
    group = SecurityGroupFactory(organization=world.organization, name="office")
    call("post", f"/api/v1/instances/{host.pk}/security-group/", {"security_group": group.pk})
    default = default_security_group(world.organization)

    body = assert_problem(call("delete", f"/api/v1/security-groups/{group.pk}/"), 409)
    assert "in use by" in body["detail"] and host.name in body["detail"]
    assert_problem(call("delete", f"/api/v1/security-groups/{default.pk}/"), 409)
    assert SecurityGroup.objects.count() == 2


def test_a_read_key_sees_groups_but_cannot_change_them(call, world, read_key):
    group = SecurityGroupFactory(organization=world.organization)
    rule = SecurityGroupRuleFactory(group=group)

    assert call("get", f"/api/v1/security-groups/{group.pk}/", key=read_key).status_code == 200
    assert_problem(call("post", "/api/v1/security-groups/", {"name": "x"}, key=read_key), 403)
    assert_problem(call("delete", f"/api/v1/security-groups/{group.pk}/", key=read_key), 403)
    assert_problem(
        call("delete", f"/api/v1/security-groups/{group.pk}/rules/{rule.pk}/", key=read_key), 403
    )


def test_another_organizations_group_and_rules_are_404(call, world, other_organization):
    theirs = SecurityGroupFactory(organization=other_organization)
    rule = SecurityGroupRuleFactory(group=theirs)
    mine = SecurityGroupFactory(organization=world.organization)

    for method, path in (
        ("get", f"/api/v1/security-groups/{theirs.pk}/"),
        ("patch", f"/api/v1/security-groups/{theirs.pk}/"),
        ("delete", f"/api/v1/security-groups/{theirs.pk}/"),
        ("get", f"/api/v1/security-groups/{theirs.pk}/rules/"),
        ("post", f"/api/v1/security-groups/{theirs.pk}/rules/"),
        ("delete", f"/api/v1/security-groups/{theirs.pk}/rules/{rule.pk}/"),
        ("delete", f"/api/v1/security-groups/{mine.pk}/rules/{rule.pk}/"),
    ):
        assert_problem(call(method, path), 404)
    assert SecurityGroup.objects.filter(pk=theirs.pk).exists() and rule.pk
    assert theirs.rules.count() == 1
    assert [g["id"] for g in results(call("get", "/api/v1/security-groups/"))] != [theirs.pk]
