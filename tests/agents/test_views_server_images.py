"""The operator's servers page says which host images each server holds and which of the park's
images for its cards it lacks (hosts of those can't start there), for another park's operator
nothing."""

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.agents.models import AgentServer
from apps.agents.selectors import missing_images
from tests.factories import AcceleratorModelFactory, ImageFactory, ParkOperatorFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

DIGEST = "sha256:" + "77" * 32


def report(server, *names):
    AgentServer.objects.filter(pk=server.pk).update(
        images=[{"name": name, "digest": DIGEST} for name in names],
        images_reported_at=timezone.now(),
    )


@pytest.fixture
def park_images(agent_world):
    """debian-12 (the world's), pytorch, one withdrawn and one for other cards."""
    model = agent_world.model
    ImageFactory(park=agent_world.park, code="pytorch", compatible_accelerators=[model])
    ImageFactory(
        park=agent_world.park, code="old-cuda", is_active=False, compatible_accelerators=[model]
    )
    ImageFactory(
        park=agent_world.park, code="cann", compatible_accelerators=[AcceleratorModelFactory()]
    )


def section(page: str, server) -> str:
    start = page.index(f'id="server-{server.pk}"')
    return page[start : page.index("</section>", start)]


def test_the_servers_page_shows_held_and_missing_images(client, agent_world, park_images):
    full, _ = agent_world.enrol("gpu-07")
    bare, _ = agent_world.enrol("gpu-08")
    older, _ = agent_world.enrol("gpu-09")  # an older agent: taken to hold the base image
    report(full, "debian-12", "pytorch")
    report(bare)

    client.force_login(agent_world.operator)
    page = client.get(
        reverse("agents_ops:server_list", args=[agent_world.park.pk]), HTTP_ACCEPT_LANGUAGE="en"
    )
    assert page.status_code == 200
    page = page.content.decode()

    def images(server, kind):
        return re.findall(rf'class="[^"]*{kind}" data-image="([^"]+)"', section(page, server))

    assert images(full, "held-image") == ["debian-12", "pytorch"]
    assert images(full, "missing-image") == []
    assert DIGEST in section(page, full)
    assert images(bare, "held-image") == []
    assert "none built" in section(page, bare)
    assert images(bare, "missing-image") == ["debian-12", "pytorch"]
    assert "not reported (an older agent)" in section(page, older)
    assert images(older, "missing-image") == ["pytorch"]
    assert "loam-agent image build --name CODE" in section(page, bare)


def test_missing_images_are_the_parks_active_images_for_the_servers_cards(agent_world, park_images):
    server, _ = agent_world.enrol("gpu-07")
    report(server, "pytorch", "ascend-cann")
    assert {
        pk: [i.code for i in images] for pk, images in missing_images(agent_world.park).items()
    } == {server.pk: ["debian-12"]}


def test_another_parks_operator_gets_404(client, agent_world):
    agent_world.enrol("gpu-07")
    stranger = UserFactory()
    ParkOperatorFactory(user=stranger)
    client.force_login(stranger)
    response = client.get(reverse("agents_ops:server_list", args=[agent_world.park.pk]))
    assert response.status_code == 404
