"""The console's side of reaching hosts: the instance page's SSH command on the server's public
address and its network section (port mappings, the security group; HTMX, 422 on refusal),
and the security groups page (`/security-groups/`). Hosts run on a real agent backend
(tests/orders/agent_hosts.py)."""

import re

import pytest
from django.urls import reverse

from apps.orders import networking
from apps.orders.models import Instance, PortMapping, SecurityGroup
from tests.factories import SecurityGroupFactory, SecurityGroupRuleFactory
from tests.orders.agent_hosts import PUBLIC
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}
HTMX = {"HTTP_HX_REQUEST": "true", **ENGLISH}


@pytest.fixture
def browser(client, owner):
    client.force_login(owner)
    return client


def page(browser, instance) -> str:
    response = browser.get(reverse("orders:instance_detail", args=[instance.pk]), **ENGLISH)
    assert response.status_code == 200
    return response.content.decode()


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_instance_page_shows_ssh_on_the_public_address_and_the_network(
    browser, order_host, owner
):
    instance = order_host()
    networking.add_port_mapping(instance=instance, actor=owner, protocol="tcp", host_port=8888)

    html = page(browser, instance)

    ssh = re.search(r'id="ssh-command"><code>([^<]*)</code>', html).group(1)
    assert ssh == f"ssh -p 20000 root@{PUBLIC}"
    assert 'id="instance-network"' in html and 'id="port-mapping-form"' in html
    assert f'href="http://{PUBLIC}:20001/"' in html
    assert f"{PUBLIC}:20001" in text(html)
    assert "default" in text(html.split('id="instance-security-group"')[1])


def test_a_mapping_added_through_htmx_shows_its_endpoint(browser, order_host):
    instance = order_host()
    url = reverse("orders:instance_port_mappings", args=[instance.pk])

    response = browser.post(url, {"protocol": "tcp", "host_port": "8888"}, **HTMX)

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html  # the section only
    assert f"http://{PUBLIC}:20001/" in html
    mapping = PortMapping.objects.get(instance=instance)
    assert (mapping.host_port, mapping.server_port) == (8888, 20001)

    delete = reverse("orders:instance_port_mapping_delete", args=[instance.pk, mapping.pk])
    response = browser.post(delete, **HTMX)
    assert response.status_code == 200 and 'id="port-mappings-none"' in response.content.decode()
    assert not PortMapping.objects.exists()


@pytest.mark.parametrize(
    ("port", "message"),
    [("22", "SSH port"), ("0", "Ensure this value is greater than or equal to 1")],
)
def test_a_refused_mapping_re_renders_the_section_with_422(browser, order_host, port, message):
    instance = order_host()

    response = browser.post(
        reverse("orders:instance_port_mappings", args=[instance.pk]),
        {"protocol": "tcp", "host_port": port},
        **HTMX,
    )

    assert response.status_code == 422
    assert message in response.content.decode()
    assert 'id="port-mapping-form"' in response.content.decode()
    assert not PortMapping.objects.exists()


def test_without_htmx_a_mapping_redirects_to_the_page_with_a_message(browser, order_host):
    instance = order_host()

    response = browser.post(
        reverse("orders:instance_port_mappings", args=[instance.pk]),
        {"protocol": "tcp", "host_port": "9000"},
        follow=True,
        **ENGLISH,
    )

    assert response.redirect_chain[-1][0] == reverse("orders:instance_detail", args=[instance.pk])
    assert f"Port 9000 is reachable at {PUBLIC}:20001." in response.content.decode()


def test_the_host_moves_to_another_group_from_its_page(browser, order_host, agent_world):
    instance = order_host()
    office = SecurityGroupFactory(organization=agent_world.organization, name="office")

    response = browser.post(
        reverse("orders:instance_security_group", args=[instance.pk]),
        {"security_group": office.pk},
        **HTMX,
    )

    assert response.status_code == 200
    assert Instance.objects.get(pk=instance.pk).security_group == office
    assert ">office</a>" in response.content.decode()


def test_the_move_form_is_offered_only_when_there_is_another_group(
    browser, order_host, agent_world
):
    """With no group but the one it is in, the page offers to create one, not an empty choice
    that every submit would refuse."""
    instance = order_host()
    SecurityGroup.objects.filter(organization=agent_world.organization).exclude(
        is_default=True
    ).delete()

    html = page(browser, instance)
    assert 'id="security-group-form"' not in html and 'id="security-group-create"' in html

    SecurityGroupFactory(organization=agent_world.organization, name="office")
    html = page(browser, instance)
    assert 'id="security-group-form"' in html and ">office</option>" in html


def test_a_viewer_sees_the_network_but_no_form_and_may_not_post(
    client, order_host, member_of, agent_world
):
    instance = order_host()
    client.force_login(member_of(agent_world.organization, "viewer"))

    html = page(client, instance)

    assert 'id="instance-network"' in html and 'id="port-mapping-form"' not in html
    assert 'id="security-group-form"' not in html
    response = client.post(
        reverse("orders:instance_port_mappings", args=[instance.pk]),
        {"protocol": "tcp", "host_port": "80"},
        **HTMX,
    )
    assert response.status_code == 403
    assert not PortMapping.objects.exists()


# --- the security groups page ---------------------------------------------------------------


def test_the_security_groups_page_lists_the_default_group_and_creates_one(
    browser, order_host, agent_world
):
    order_host()
    response = browser.get(reverse("orders:security_group_list"), **ENGLISH)

    assert response.status_code == 200
    rows = text(response.content.decode().split('id="security-groups"')[1])
    assert "default" in rows and "TCP 1–65535 ← 0.0.0.0/0" in rows
    response = browser.post(reverse("orders:security_group_list"), {"name": "office"}, **ENGLISH)
    group = SecurityGroup.objects.get(name="office")
    assert response.status_code == 302
    assert response["Location"] == reverse("orders:security_group_detail", args=[group.pk])
    response = browser.post(reverse("orders:security_group_list"), {"name": "office"}, **ENGLISH)
    assert response.status_code == 422 and "has a group of that name" in response.content.decode()


def test_a_rule_is_added_and_a_bad_cidr_is_a_form_error(browser, agent_world):
    group = SecurityGroupFactory(organization=agent_world.organization, name="office")
    url = reverse("orders:security_group_rule_add", args=[group.pk])
    rule = {"protocol": "tcp", "from_port": "22", "to_port": "22", "source": "10.0.0.0/33"}

    response = browser.post(url, rule, **HTMX)

    assert response.status_code == 422
    assert "CIDR form" in response.content.decode()
    assert not group.rules.exists()
    response = browser.post(url, {**rule, "source": "203.0.113.0/24"}, **HTMX)
    assert response.status_code == 200
    assert "203.0.113.0/24" in response.content.decode()
    (added,) = group.rules.all()
    delete = reverse("orders:security_group_rule_delete", args=[group.pk, added.pk])
    assert browser.post(delete, **HTMX).status_code == 200
    assert not group.rules.exists()


def test_a_group_in_use_is_not_deleted_and_says_why(browser, order_host, agent_world, owner):
    instance = order_host()
    office = SecurityGroupFactory(organization=agent_world.organization, name="office")
    SecurityGroupRuleFactory(group=office)
    networking.set_instance_security_group(instance=instance, actor=owner, group=office)

    response = browser.post(
        reverse("orders:security_group_delete", args=[office.pk]), follow=True, **ENGLISH
    )

    assert "office is in use by web" in response.content.decode()
    assert SecurityGroup.objects.filter(pk=office.pk).exists()
    spare = SecurityGroupFactory(organization=agent_world.organization, name="spare")
    response = browser.post(reverse("orders:security_group_delete", args=[spare.pk]))
    assert response["Location"] == reverse("orders:security_group_list")
    assert not SecurityGroup.objects.filter(pk=spare.pk).exists()


def test_the_pages_read_in_chinese(browser, order_host):
    instance = order_host()

    detail = browser.get(reverse("orders:instance_detail", args=[instance.pk]))
    groups = browser.get(reverse("orders:security_group_list"))

    assert "端口映射" in detail.content.decode() and "安全组" in detail.content.decode()
    assert "安全组" in groups.content.decode() and "默认" in groups.content.decode()


def test_the_order_form_offers_the_organizations_groups(browser, agent_world, other_organization):
    office = SecurityGroupFactory(organization=agent_world.organization, name="office")
    SecurityGroupFactory(organization=other_organization, name="theirs")

    html = browser.get(reverse("orders:instance_create"), **ENGLISH).content.decode()

    select = html.split('name="security_group"')[1].split("</select>")[0]
    assert "The organization&#x27;s default group" in select
    assert f'value="{office.pk}"' in select and "theirs" not in select
