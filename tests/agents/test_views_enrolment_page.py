"""The join-token page: a token just issued comes with the commands that install the agent on a
fresh server and enrol it, with this portal's address (LOAM_BASE_URL) and the token in them."""

import pytest
from django.urls import reverse

from apps.agents import services
from apps.agents.models import JoinToken
from tests.agents.conftest import READERS, server_facts

PORTAL = "https://portal.example.cn"


@pytest.fixture
def issued_page(client, agent_world, settings, english_messages):
    settings.LOAM_BASE_URL = PORTAL
    client.force_login(agent_world.operator)
    url = reverse("agents_ops:token_list", args=[agent_world.park.pk])
    response = client.post(url, {"action": "issue", "pool": agent_world.pool.pk, "valid_hours": 24})
    assert response.status_code == 200
    return response


def secret_in(page: str) -> str:
    (token,) = JoinToken.objects.all()
    start = page.index(f"--token {token.prefix}") + len("--token ")
    return page[start : page.index("</code>", start)].split()[0]


def test_an_issued_token_comes_with_the_one_command_install(issued_page):
    page = issued_page.content.decode()
    secret = secret_in(page)
    options = f"--portal {PORTAL} --token {secret}"

    assert f"curl -fsSL {PORTAL}/agent/install.sh | sudo bash -s -- {options}</code>" in page
    assert (
        f"curl -fsSL --cacert portal-ca.pem {PORTAL}/agent/install.sh "
        f"| sudo bash -s -- {options} --ca-file portal-ca.pem</code>" in page
    )
    assert f"sudo loam-agent enrol {options}</code>" in page
    assert 'data-copy="#install-command"' in page
    assert issued_page["Cache-Control"] == "no-store"


def test_the_commands_name_a_token_that_enrols(issued_page, agent_world):
    secret = secret_in(issued_page.content.decode())
    server, _credential = services.enrol_server(
        token=secret, server=server_facts(), readers=READERS, cards=[]
    )
    assert server.node.pool == agent_world.pool


def test_the_page_without_a_new_token_shows_no_command(client, agent_world, english_messages):
    client.force_login(agent_world.operator)
    response = client.get(reverse("agents_ops:token_list", args=[agent_world.park.pk]))

    assert response.status_code == 200
    assert "install.sh" not in response.content.decode()
