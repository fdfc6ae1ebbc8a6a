"""Hosts of the orders tests on a real agent backend: gpu-07, an enrolled server with four cards
reached on PUBLIC (ports 20000-20003), whose fake agent (tests/agents/conftest.py) converges
whenever a host job looks again, and `order_host` to order one there and have it running
(`pytorch_image` first: of the image with web services)."""

import pytest
from django.utils import timezone

from apps.agents.models import AgentServer
from apps.orders.models import Instance, InstanceState
from apps.orders.services import HostRequest, submit_create
from tests.agents.conftest import SSH_KEY
from tests.agents.conftest import agent_world as agent_world  # the fixtures, shared
from tests.agents.conftest import converging as converging
from tests.agents.conftest import fake_agent as fake_agent

PUBLIC = "198.51.100.2"


@pytest.fixture
def agent(agent_world, fake_agent, converging):
    """gpu-07 (four cards, public address PUBLIC, ports 20000-20003) and its agent, which
    converges whenever a host job looks again."""
    _server, credential = agent_world.enrol(
        "gpu-07", cards=4, public_address=PUBLIC, public_ports=[20000, 20003]
    )
    return converging(fake_agent(credential, cards=4))


@pytest.fixture
def pytorch_image(agent_world, agent):
    """The world's image is `pytorch` (JupyterLab and TensorBoard), which gpu-07 has built."""
    agent_world.image.code = "pytorch"
    agent_world.image.save(update_fields=["code"])
    AgentServer.objects.update(
        images=[{"name": "pytorch", "digest": "sha256:" + "0" * 64}],
        images_reported_at=timezone.now(),
    )
    return agent_world.image


@pytest.fixture
def order_host(agent_world, agent, owner, django_capture_on_commit_callbacks):
    """order_host(name="web", **fields) -> the Instance, provisioned on gpu-07 and running."""

    def order(name="web", **fields) -> Instance:
        request = HostRequest(
            flavor=agent_world.flavors[1],
            image=agent_world.image,
            region=agent_world.region,
            system_disk_gb=50,
            name=name,
            **{"ssh_public_key": SSH_KEY, **fields},
        )
        with django_capture_on_commit_callbacks(execute=True):
            (placed,) = submit_create(
                organization=agent_world.organization, actor=owner, request=request
            )
        instance = Instance.objects.select_related("pool__backend").get(pk=placed.instance_id)
        assert instance.state == InstanceState.RUNNING, instance.error_message
        return instance

    return order
