"""An agent pool starts only the images its servers built and report: the order form offers
those, and ordering another is refused when ordered (the form and the API, with the reason),
not when the host starts. A simulator's pool starts any image, as before."""

import uuid

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.agents import services as agents
from apps.agents.models import AgentServer
from apps.catalog.selectors import offered_images
from apps.orchestration.services import plan_placement
from apps.orders.forms import InstanceOrderForm
from apps.orders.models import Instance, Order
from apps.orders.services import HostRequest, submit_create, validate_host_request
from apps.tenants.models import ApiKeyScope
from apps.tenants.services import create_api_key
from tests.agents.conftest import SSH_KEY
from tests.agents.conftest import agent_world as agent_world  # the fixtures, shared
from tests.factories import BackendFactory, ImageFactory, PoolFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

DIGEST = "sha256:" + "5a" * 32
PYTORCH = "PyTorch 2.13 · Python 3.11 · JupyterLab"


@pytest.fixture
def pytorch(agent_world):
    return ImageFactory(
        park=agent_world.park,
        code="pytorch",
        name=PYTORCH,
        compatible_accelerators=[agent_world.model],
    )


def report(server, *names):
    AgentServer.objects.filter(pk=server.pk).update(
        images=[{"name": name, "digest": DIGEST} for name in names],
        images_reported_at=timezone.now(),
    )


def request_for(world, image) -> HostRequest:
    return HostRequest(
        flavor=world.flavors[1],
        image=image,
        region=world.region,
        system_disk_gb=50,
        ssh_public_key=SSH_KEY,
        name="lab",
    )


def codes(images) -> list[str]:
    return sorted(image.code for image in images)


def test_a_pool_offers_the_images_its_servers_report(agent_world, pytorch):
    gpu07, _ = agent_world.enrol("gpu-07")
    gpu08, _ = agent_world.enrol("gpu-08")
    flavor = agent_world.flavors[1]
    report(gpu07, "debian-12")
    report(gpu08)
    assert codes(offered_images(flavor)) == ["debian-12"]

    report(gpu08, "pytorch", "ascend-cann")  # an image the catalog doesn't sell: not offered
    assert codes(offered_images(flavor)) == ["debian-12", "pytorch"]

    agents.revoke_server(server=gpu08, operator=agent_world.operator)
    assert codes(offered_images(flavor)) == ["debian-12"]


def test_an_older_agent_is_taken_to_hold_the_base_image_only(agent_world, pytorch):
    agent_world.enrol("gpu-07")  # has never reported images
    assert codes(offered_images(agent_world.flavors[1])) == ["debian-12"]


def test_ordering_an_image_no_server_holds_is_refused_with_the_reason(agent_world, pytorch):
    server, _ = agent_world.enrol("gpu-07")
    report(server, "debian-12")

    with pytest.raises(ValidationError) as refused:
        validate_host_request(agent_world.organization, request_for(agent_world, pytorch))
    (message,) = refused.value.message_dict["image"]
    assert message == (
        f"No server for {agent_world.model} ({agent_world.region.name}) has {PYTORCH} built; "
        "choose one they have: "
        f"{agent_world.image.name}."
    )
    validate_host_request(agent_world.organization, request_for(agent_world, agent_world.image))

    report(server)
    with pytest.raises(ValidationError, match="nor any other image, built yet"):
        validate_host_request(agent_world.organization, request_for(agent_world, pytorch))


def test_a_simulators_pool_starts_any_image_as_before(agent_world, pytorch):
    """A pool of another driver for the same cards: no server there reports images."""
    server, _ = agent_world.enrol("gpu-07")
    report(server, "debian-12")
    simulator = BackendFactory(park=agent_world.park, name="simulated", driver="simulator")
    PoolFactory(backend=simulator, region=agent_world.region, accelerator_model=agent_world.model)

    assert codes(offered_images(agent_world.flavors[1])) == ["debian-12", "pytorch"]
    validate_host_request(agent_world.organization, request_for(agent_world, pytorch))


def test_the_order_form_offers_only_held_images_and_refuses_another_on_ordering(
    client, agent_world, pytorch, owner
):
    server, _ = agent_world.enrol("gpu-07")
    report(server, "debian-12")
    form = InstanceOrderForm(park=agent_world.park, flavor=agent_world.flavors[1])
    assert [code for code, _label in form.fields["image"].choices] == ["debian-12"]

    client.force_login(owner)
    response = client.post(
        "/instances/new/",
        {
            "flavor": agent_world.flavors[1].code,
            "image": "pytorch",
            "region": agent_world.region.code,
            "name": "lab",
            "system_disk_gb": 50,
            "data_disk_gb": 0,
            "bandwidth_mbps": 0,
            "count": 1,
            "ssh_public_key": SSH_KEY,
            "idempotency_key": uuid.uuid4().hex,
        },
        HTTP_ACCEPT_LANGUAGE="en",
    )

    assert response.status_code == 422
    assert "has PyTorch 2.13 · Python 3.11 · JupyterLab built; choose one they have" in (
        response.content.decode()
    )
    assert not Order.objects.exists()


def test_the_api_refuses_an_image_no_server_holds_with_a_400(client, agent_world, pytorch, owner):
    server, _ = agent_world.enrol("gpu-07")
    report(server, "debian-12")
    _key, secret = create_api_key(
        organization=agent_world.organization, actor=owner, name="ci", scope=ApiKeyScope.WRITE
    )

    response = client.post(
        "/api/v1/orders/",
        {
            "flavor": agent_world.flavors[1].code,
            "image": "pytorch",
            "region": agent_world.region.code,
            "system_disk_gb": 50,
            "ssh_public_key": SSH_KEY,
            "name": "lab",
        },
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_ACCEPT_LANGUAGE="en",
    )

    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert set(errors) == {"image"}
    assert "choose one they have: " in errors["image"][0]
    assert not Order.objects.exists()


def test_a_host_is_placed_on_a_server_that_holds_its_image(agent_world, pytorch, owner):
    """Two servers of one pool: the pool holds pytorch, but only gpu-08 does."""
    gpu07, _ = agent_world.enrol("gpu-07")
    gpu08, _ = agent_world.enrol("gpu-08")
    report(gpu07, "debian-12")
    report(gpu08, "debian-12", "pytorch")
    flavor = agent_world.flavors[1]

    plan = plan_placement(park=agent_world.park, flavor=flavor, image_code="pytorch")
    assert {view.node.pk for view in plan.ranked} == {gpu08.node_id}
    plan = plan_placement(park=agent_world.park, flavor=flavor, image_code="debian-12")
    assert {view.node.pk for view in plan.ranked} == {gpu07.node_id, gpu08.node_id}

    for _ in range(2):  # the second host too, scored again with the first placed
        (order,) = submit_create(
            organization=agent_world.organization,
            actor=owner,
            request=request_for(agent_world, pytorch),
        )
        assert Instance.objects.get(pk=order.instance_id).node_id == gpu08.node_id
