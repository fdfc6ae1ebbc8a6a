"""A host's web services from the portal's side: nginx's check (`views.host_service_auth`,
role × organization × state) and the instance page's buttons that open them."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from apps.agents.models import AgentHost, AgentHostPort, PortPurpose
from apps.orders.models import InstanceState
from apps.orders.operations import request_operation
from tests.orders.agent_hosts import PUBLIC
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host
from tests.orders.agent_hosts import pytorch_image as pytorch_image

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

AUTH = "/internal/host-service-auth/"


@pytest.fixture
def pytorch_host(pytorch_image, order_host):
    """A running host of the `pytorch` image (JupyterLab and TensorBoard) on gpu-07."""
    return order_host(name="nb")


def signed_in(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def ask(user, uri: str):
    return signed_in(user).get(AUTH, HTTP_X_ORIGINAL_URI=uri)


def host_of(instance) -> AgentHost:
    return AgentHost.objects.get(handle=instance.backend_handle)


def service_port(instance, port: int) -> int:
    return AgentHostPort.objects.get(
        host=host_of(instance), purpose=PortPurpose.SERVICE, host_port=port
    ).server_port


def test_the_owner_gets_the_upstream_and_the_secret_of_each_service(pytorch_host, owner):
    host = host_of(pytorch_host)
    assert [s["base_url"] for s in host.services] == [
        f"/instances/{pytorch_host.pk}/jupyter/",
        f"/instances/{pytorch_host.pk}/tensorboard/",
    ]

    jupyter = ask(owner, f"/instances/{pytorch_host.pk}/jupyter/lab/tree/x.ipynb?reset")
    tensorboard = ask(owner, f"/instances/{pytorch_host.pk}/tensorboard/")

    assert jupyter.status_code == 200
    assert jupyter["X-Loam-Upstream"] == f"{PUBLIC}:{service_port(pytorch_host, 8888)}"
    assert jupyter["X-Loam-Service-Token"] == host.service_token
    assert jupyter["Cache-Control"] == "no-store"
    assert tensorboard["X-Loam-Upstream"] == f"{PUBLIC}:{service_port(pytorch_host, 6006)}"


@pytest.mark.parametrize(
    ("role", "status"),
    [("owner", 200), ("admin", 200), ("member", 200), ("billing", 403), ("viewer", 403)],
)
def test_only_roles_that_operate_hosts_open_them(pytorch_host, request, role, status):
    response = ask(request.getfixturevalue(role), f"/instances/{pytorch_host.pk}/jupyter/")

    assert response.status_code == status
    if status != 200:
        assert "X-Loam-Service-Token" not in response and "X-Loam-Upstream" not in response


def test_signed_out_is_a_401_naming_the_sign_in_page_and_the_way_back(pytorch_host, settings):
    settings.LOAM_BASE_URL = "https://portal.example"
    response = ask(None, f"/instances/{pytorch_host.pk}/jupyter/lab?a=1&b=2")

    assert response.status_code == 401
    # The portal's sign-in, then the host's page there: never back to the services' origin.
    assert response["X-Loam-Sign-In"] == (
        f"https://portal.example/accounts/login/?next=/instances/{pytorch_host.pk}/"
    )
    assert "X-Loam-Upstream" not in response


def test_another_organization_s_owner_is_refused(pytorch_host, other_owner):
    assert ask(other_owner, f"/instances/{pytorch_host.pk}/jupyter/").status_code == 403


@pytest.mark.parametrize(
    "uri",
    ["", "/instances/999999/jupyter/", "/instances/{pk}/vscode/", "/instances/{pk}/jupyter"],
)
def test_an_unknown_host_or_service_is_refused(pytorch_host, owner, uri):
    assert ask(owner, uri.format(pk=pytorch_host.pk)).status_code == 403


def test_a_stopped_host_is_refused(pytorch_host, owner, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        request_operation(instance=pytorch_host, actor=owner, kind="stop")
    pytorch_host.refresh_from_db()
    assert pytorch_host.state == InstanceState.STOPPED

    assert ask(owner, f"/instances/{pytorch_host.pk}/jupyter/").status_code == 403


def test_a_host_whose_image_has_no_services_is_refused(order_host, owner):
    instance = order_host(name="plain")  # debian-12

    assert ask(owner, f"/instances/{instance.pk}/jupyter/").status_code == 403


def test_only_get_is_answered(pytorch_host, owner):
    client = signed_in(owner)
    response = client.post(AUTH, HTTP_X_ORIGINAL_URI=f"/instances/{pytorch_host.pk}/jupyter/")

    assert response.status_code == 405


def test_the_starting_page_names_the_service_and_retries(client):
    response = client.get(
        "/internal/host-service-starting/",
        HTTP_X_ORIGINAL_URI="/instances/7/tensorboard/#scalars",
        HTTP_ACCEPT_LANGUAGE="en",
    )

    assert response.status_code == 503
    assert response["Refresh"] == response["Retry-After"] == "3"
    assert "TensorBoard isn't answering yet" in response.content.decode()


def test_the_starting_page_is_no_page_but_for_a_service_s_path(client):
    for uri in ("", "/instances/7/", "/billing/"):
        response = client.get("/internal/host-service-starting/", HTTP_X_ORIGINAL_URI=uri)

        assert response.status_code == 404


# --- the instance page ---------------------------------------------------------------------------


def buttons(user, instance) -> dict[str, str]:
    response = signed_in(user).get(
        reverse("orders:instance_detail", args=[instance.pk]), HTTP_ACCEPT_LANGUAGE="en"
    )
    assert response.status_code == 200
    return dict(
        re.findall(
            r'<a [^>]*id="open-(\w+)" href="([^"]+)" target="_blank" rel="noopener"',
            response.content.decode(),
        )
    )


def test_the_page_opens_jupyterlab_and_tensorboard_in_a_new_tab_on_their_origin(
    pytorch_host, owner, settings
):
    settings.LOAM_SERVICES_URL = "https://portal.example:8444"
    assert buttons(owner, pytorch_host) == {
        "jupyter": f"https://portal.example:8444/instances/{pytorch_host.pk}/jupyter/",
        "tensorboard": f"https://portal.example:8444/instances/{pytorch_host.pk}/tensorboard/",
    }


def test_no_buttons_for_a_viewer_or_a_stopped_host(
    pytorch_host, owner, viewer, django_capture_on_commit_callbacks
):
    assert buttons(viewer, pytorch_host) == {}
    with django_capture_on_commit_callbacks(execute=True):
        request_operation(instance=pytorch_host, actor=owner, kind="stop")
    assert buttons(owner, pytorch_host) == {}


def test_no_buttons_for_an_image_without_services(order_host, owner):
    assert buttons(owner, order_host(name="plain")) == {}  # debian-12
