"""Port mappings beside a host's web services (apps/orders/networking.py): a service's port is
the portal's to reach, so a tenant can't map it."""

import pytest
from django.core.exceptions import ValidationError

from apps.orders import networking
from apps.orders.models import PortMapping
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host
from tests.orders.agent_hosts import pytorch_image as pytorch_image

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def test_a_service_port_is_not_mapped_and_says_why(pytorch_image, order_host, owner):
    instance = order_host(name="nb")

    with pytest.raises(ValidationError) as refused:
        networking.add_port_mapping(instance=instance, actor=owner, protocol="tcp", host_port=8888)

    assert "JupyterLab" in refused.value.message_dict["host_port"][0]
    assert not PortMapping.objects.exists()
    mapping = networking.add_port_mapping(
        instance=instance, actor=owner, protocol="tcp", host_port=8080
    )
    assert mapping.server_port is not None
