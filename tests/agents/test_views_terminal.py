"""The web terminal's page and its buttons: for members whose role may operate hosts, on a
running agent host; a 404 for everyone else, as for a host that is not there."""

import pytest
from django.urls import reverse

from apps.orders.models import InstanceState
from tests.factories import InstanceFactory, PoolFactory


def agent_host(organization, state=InstanceState.RUNNING):
    return InstanceFactory(
        organization=organization,
        pool=PoolFactory(backend__driver="agent", backend__park=organization.park),
        state=state,
        access={"address": "203.0.113.7", "ssh_port": 20001, "ssh_user": "root"},
    )


def terminal_url(instance):
    return reverse("agents:instance_terminal", args=[instance.pk])


@pytest.mark.parametrize(
    ("who", "status"),
    [
        ("owner", 200),
        ("admin", 200),
        ("member", 200),
        ("billing", 404),
        ("viewer", 404),
        ("other_owner", 404),
    ],
)
def test_who_gets_the_terminal_page(request, client, organization, who, status):
    instance = agent_host(organization)
    client.force_login(request.getfixturevalue(who))
    response = client.get(terminal_url(instance))
    assert response.status_code == status
    if status == 200:
        page = response.content.decode()
        assert f'data-socket-path="/ws/instances/{instance.pk}/terminal/"' in page
        assert "vendor/xterm/xterm.js" in page and "js/terminal.js" in page
        assert "root@203.0.113.7" in page
        assert response["Cache-Control"] == "no-store"


def test_a_visitor_is_sent_to_sign_in(client, organization):
    response = client.get(terminal_url(agent_host(organization)))
    assert response.status_code == 302 and "login" in response["Location"]


@pytest.mark.parametrize(
    ("who", "state", "driver", "shown"),
    [
        ("member", InstanceState.RUNNING, "agent", True),
        ("owner", InstanceState.RUNNING, "agent", True),
        ("viewer", InstanceState.RUNNING, "agent", False),
        ("member", InstanceState.STOPPED, "agent", False),
        ("member", InstanceState.RUNNING, "simulator", False),
    ],
)
def test_the_terminal_button_on_the_host_page_and_list(
    request, client, organization, who, state, driver, shown
):
    instance = InstanceFactory(
        organization=organization,
        pool=PoolFactory(backend__driver=driver, backend__park=organization.park),
        state=state,
        access={"address": "203.0.113.7", "ssh_port": 20001},
    )
    client.force_login(request.getfixturevalue(who))
    button = f'href="{terminal_url(instance)}"'
    detail = client.get(reverse("orders:instance_detail", args=[instance.pk])).content.decode()
    listing = client.get(reverse("orders:instance_list")).content.decode()
    assert (button in detail, button in listing) == (shown, shown)
