"""`/api/v1/saved-images/`: list, save a stopped host, delete (refused while in use), and
another organization's image a 404; in the OpenAPI schema."""

import pytest

from apps.agents.models import SavedImage, SavedImageState
from apps.tenants import services
from apps.tenants.models import ApiKeyScope
from tests.agents.test_saved_images import agent as agent  # the fixtures, shared
from tests.agents.test_saved_images import agent_world as agent_world
from tests.agents.test_saved_images import converging as converging
from tests.agents.test_saved_images import fake_agent as fake_agent
from tests.agents.test_saved_images import operate as operate
from tests.agents.test_saved_images import order_host as order_host
from tests.agents.test_saved_images import saved as saved

pytestmark = pytest.mark.django_db
PATH = "/api/v1/saved-images/"


def bearer(organization, owner) -> dict:
    _key, secret = services.create_api_key(
        organization=organization, actor=owner, name="k", scope=ApiKeyScope.WRITE
    )
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}", "HTTP_ACCEPT_LANGUAGE": "en"}


def test_a_stopped_host_is_saved_listed_and_deleted_through_the_api(
    client, agent_world, agent, order_host, operate, owner
):
    auth = bearer(agent_world.organization, owner)
    running = order_host("a")
    refused = client.post(
        PATH, {"instance": running.pk, "name": "env"}, content_type="application/json", **auth
    )
    assert refused.status_code == 409
    assert refused.json()["type"].endswith("/host_not_stopped")

    stopped = operate(running, "stop")
    created = client.post(
        PATH,
        {"instance": stopped.pk, "name": "env", "description": "mine"},
        content_type="application/json",
        **auth,
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["name"], body["state"], body["server"], body["hosts"]) == (
        "env",
        "saving",
        "gpu-07",
        0,
    )
    agent.converge()
    (listed,) = client.get(PATH, **auth).json()["results"]
    assert listed["state"] == "ready" and listed["code"] == body["code"]

    gone = client.delete(f"{PATH}{body['id']}/", **auth)
    assert gone.status_code == 204
    assert SavedImage.objects.get().state == SavedImageState.DELETED
    assert client.get(f"{PATH}{body['id']}/", **auth).status_code == 404


def test_bad_input_is_a_400_naming_the_field(client, agent_world, owner):
    auth = bearer(agent_world.organization, owner)
    response = client.post(PATH, {"name": ""}, content_type="application/json", **auth)
    assert response.status_code == 400
    assert {"instance", "name"} <= set(response.json()["errors"]), response.json()


def test_another_organizations_image_is_a_404(client, saved, other_organization, other_owner):
    auth = bearer(other_organization, other_owner)
    assert client.get(f"{PATH}{saved.pk}/", **auth).status_code == 404
    assert client.delete(f"{PATH}{saved.pk}/", **auth).status_code == 404
    assert client.get(PATH, **auth).json()["results"] == []
    saved.refresh_from_db()
    assert saved.state == SavedImageState.READY


def test_the_schema_documents_the_routes(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/saved-images/{id}/" in schema
