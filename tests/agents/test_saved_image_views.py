"""The images page (镜像): the organization's saved images, saving a stopped host, deleting one
refused while a host uses it; another organization's a 404."""

import pytest
from django.urls import reverse

from apps.agents.models import SavedImage, SavedImageState
from tests.agents.test_saved_images import agent as agent  # the fixtures, shared
from tests.agents.test_saved_images import agent_world as agent_world
from tests.agents.test_saved_images import converging as converging
from tests.agents.test_saved_images import fake_agent as fake_agent
from tests.agents.test_saved_images import operate as operate
from tests.agents.test_saved_images import order_host as order_host
from tests.agents.test_saved_images import saved as saved

pytestmark = pytest.mark.django_db
LIST = reverse("saved_images:image_list")


def test_a_stopped_host_is_saved_from_the_page(client, agent_world, order_host, operate, owner):
    stopped = operate(order_host("a"), "stop")
    client.force_login(owner)
    page = client.get(LIST)
    assert page.status_code == 200 and stopped.name in page.content.decode()
    response = client.post(LIST, {"instance": stopped.pk, "name": "my env", "description": ""})
    assert response.status_code == 302
    saved = SavedImage.objects.get()
    assert saved.state == SavedImageState.SAVING and saved.image.name == "my env"
    page = client.get(LIST).content.decode()
    assert "my env" in page and "gpu-07" in page


def test_deleting_an_image_in_use_is_refused_with_the_reason(
    client, saved, agent_world, order_host, owner
):
    agent_world.image = saved.image
    order_host("b")
    client.force_login(owner)
    url = reverse("saved_images:image_delete", args=[saved.pk])
    response = client.post(url, follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "my env 正被 b 使用，请先释放这些主机。" in response.content.decode()
    saved.refresh_from_db()
    assert saved.state == SavedImageState.READY


def test_another_organizations_image_is_a_404(client, saved, other_owner):
    client.force_login(other_owner)
    url = reverse("saved_images:image_delete", args=[saved.pk])
    assert client.post(url).status_code == 404
    assert "my env" not in client.get(LIST).content.decode()
