"""The agent API (/api/v1/agent/, docs/agent-protocol.md) over HTTP: every endpoint's answers,
and every bad request a 4xx problem+json whose `detail` says what to do."""

import json

import pytest

from apps.agents import services
from apps.agents.models import AgentServer, CardSample
from apps.orchestration.backends.registry import driver_of
from apps.orchestration.models import Node
from tests.agents.conftest import card, enrol_body, heartbeat_body, sample
from tests.agents.test_hosts import spec
from tests.factories import JoinTokenFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

PROBLEM = "application/problem+json"


def post(client, path, body, credential=None, **headers):
    if credential is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {credential}"
    headers.setdefault("HTTP_ACCEPT_LANGUAGE", "en")
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(f"/api/v1/agent/{path}", data, content_type="application/json", **headers)


def assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["detail"]
    return body


# --- enrol ------------------------------------------------------------------------------------


def test_enrol(client, agent_world):
    JoinTokenFactory(pool=agent_world.pool, secret="loamjt_good")

    response = post(client, "enrol", enrol_body("loamjt_good", cards=2))

    assert response.status_code == 201, response.content
    body = response.json()
    server = AgentServer.objects.get(public_id=body["server_id"])
    assert server.credential_hash == services.secret_hash(body["credential"])
    assert server.node.pool == agent_world.pool and server.cards.count() == 2
    assert server.images_reported_at is None  # an older agent's enrolment: none said


def test_enrol_says_which_images_the_server_holds(client, agent_world):
    """With its cards: a catalog proposed right after enrolment already knows its images."""
    JoinTokenFactory(pool=agent_world.pool, secret="loamjt_good")
    images = [{"name": "pytorch", "digest": "sha256:" + "a" * 64}]

    response = post(client, "enrol", {**enrol_body("loamjt_good", cards=1), "images": images})

    assert response.status_code == 201, response.content
    server = AgentServer.objects.get(public_id=response.json()["server_id"])
    assert server.images == images and server.image_names == {"pytorch"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b.update(images=[{"name": "pytorch", "digest": "md5:0"}]), "images.0.digest"),
        (lambda b: b["server"].pop("hostname"), "server.hostname"),
        (lambda b: b["server"].update(hostname="bad host!"), "server.hostname"),
        (lambda b: b["server"].update(cpu_count="many"), "server.cpu_count"),
        (lambda b: b.pop("join_token"), "join_token"),
        (lambda b: b.update(cards="GPU-0"), "cards"),
        (lambda b: b["cards"][1].update(uuid=b["cards"][0]["uuid"]), "cards.1.uuid"),
        (lambda b: b["cards"][0].update(memory_total_mib=-1), "cards.0.memory_total_mib"),
        (lambda b: b["cards"][0].update(uuid="GPU-\x00"), "cards.0.uuid"),
        (lambda b: b["readers"].append({"state": "ok"}), "readers.2.vendor"),
    ],
)
def test_enrol_with_a_bad_field_is_a_400_naming_it(client, agent_world, change, field):
    JoinTokenFactory(pool=agent_world.pool, secret="loamjt_good")
    body = enrol_body("loamjt_good", cards=2)
    change(body)

    response = post(client, "enrol", body)

    problem = assert_problem(response, 400)
    assert field in problem["errors"]
    assert field in problem["detail"] and problem["detail"].startswith("Fix these fields")
    assert not AgentServer.objects.exists()


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '"text"', ""])
def test_enrol_with_a_body_that_is_not_a_json_object_is_a_400(client, agent_world, body):
    assert_problem(post(client, "enrol", body), 400)


def test_enrol_with_a_bad_token_is_a_401(client, agent_world):
    JoinTokenFactory(pool=agent_world.pool, secret="loamjt_used", used=True)

    for token in ("loamjt_used", "loamjt_unknown"):
        problem = assert_problem(post(client, "enrol", enrol_body(token)), 401)
        assert "join token" in problem["detail"] and "loam-agent enrol" in problem["detail"]


# --- heartbeat --------------------------------------------------------------------------------


@pytest.fixture
def enrolled(agent_world):
    return agent_world.enrol("gpu-07", cards=2)


def test_heartbeat(client, enrolled):
    server, credential = enrolled
    cards = [card(0), card(1), card(2)]

    response = post(client, "heartbeat", heartbeat_body(cards), credential)

    assert response.status_code == 204
    assert response.content == b""
    server.refresh_from_db()
    assert server.last_heartbeat_at is not None
    assert server.cards.count() == 3
    assert CardSample.objects.count() == 3


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer loamsc_wrong", "Token loamsc_x", "Bearer nul\u0000"],
)
def test_heartbeat_without_a_valid_credential_is_a_401(client, enrolled, authorization):
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}

    response = post(client, "heartbeat", heartbeat_body([card(0)]), **headers)

    problem = assert_problem(response, 401)
    assert "credential" in problem["detail"]
    assert response["WWW-Authenticate"] == "Bearer"


def test_heartbeat_with_a_revoked_credential_is_a_401_saying_to_enrol_again(
    client, agent_world, enrolled
):
    server, credential = enrolled
    services.revoke_server(server=server, operator=agent_world.operator)

    response = post(client, "heartbeat", heartbeat_body([card(0)]), credential)

    problem = assert_problem(response, 401)
    assert "enrol --force" in problem["detail"]
    assert not CardSample.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["samples"][0].update(utilization_pct=101), "samples.0.utilization_pct"),
        (lambda b: b["samples"][0].update(health="melted"), "samples.0.health"),
        (lambda b: b["samples"][0].update(uuid="GPU-elsewhere"), "samples.0.uuid"),
        (lambda b: b["samples"][0].update(power_w="hot"), "samples.0.power_w"),
        (lambda b: b.update(taken_at="yesterday"), "taken_at"),
        (lambda b: b.pop("samples"), "samples"),
    ],
)
def test_heartbeat_with_a_bad_field_is_a_400_naming_it(client, enrolled, change, field):
    _server, credential = enrolled
    body = heartbeat_body([card(0), card(1)])
    change(body)

    problem = assert_problem(post(client, "heartbeat", body, credential), 400)

    assert field in problem["errors"] and field in problem["detail"]
    assert not CardSample.objects.exists()


DIGEST = "sha256:" + "0f" * 32


def test_heartbeat_images_are_kept_until_the_agent_sends_others(client, enrolled):
    server, credential = enrolled
    images = [{"name": "debian-12", "digest": DIGEST}, {"name": "pytorch", "digest": DIGEST}]

    assert (
        post(client, "heartbeat", heartbeat_body([card(0)], images=images), credential).status_code
        == 204
    )
    server.refresh_from_db()
    assert server.images == images
    reported_at = server.images_reported_at
    assert reported_at is not None and server.image_names == {"debian-12", "pytorch"}

    # Left out (as public_address): unchanged.
    assert post(client, "heartbeat", heartbeat_body([card(0)]), credential).status_code == 204
    server.refresh_from_db()
    assert (server.images, server.images_reported_at) == (images, reported_at)

    # An empty list: none built any more.
    assert (
        post(client, "heartbeat", heartbeat_body([card(0)], images=[]), credential).status_code
        == 204
    )
    server.refresh_from_db()
    assert server.images == [] and server.image_names == set()


def test_a_server_whose_agent_never_reported_images_holds_the_base_image(enrolled):
    server, _credential = enrolled
    assert server.images_reported_at is None
    assert server.image_names == {"debian-12"}


@pytest.mark.parametrize(
    ("images", "field"),
    [
        ("pytorch", "images"),
        ([{"name": "pytorch"}], "images.0.digest"),
        ([{"name": "pytorch", "digest": "md5:abc"}], "images.0.digest"),
        ([{"name": "Py Torch!", "digest": DIGEST}], "images.0.name"),
        ([{"name": "pytorch", "digest": DIGEST}] * 2, "images.1.name"),
        ([{"name": f"image-{n}", "digest": DIGEST} for n in range(101)], "images"),
    ],
)
def test_heartbeat_with_bad_images_is_a_400_naming_the_field(client, enrolled, images, field):
    server, credential = enrolled
    body = heartbeat_body([card(0)], images=images)

    problem = assert_problem(post(client, "heartbeat", body, credential), 400)

    assert field in problem["errors"] and field in problem["detail"]
    server.refresh_from_db()
    assert server.images_reported_at is None


def test_a_null_figure_is_accepted_and_kept_null(client, enrolled):
    _server, credential = enrolled
    cards = [card(0)]
    samples = [sample(cards[0]["uuid"], utilization_pct=None, power_w=None, temperature_c=None)]

    assert post(client, "heartbeat", heartbeat_body(cards, samples), credential).status_code == 204

    assert CardSample.objects.get().utilization_pct is None


# --- hosts ------------------------------------------------------------------------------------


def get_hosts(client, credential, **headers):
    return client.get("/api/v1/agent/hosts", HTTP_AUTHORIZATION=f"Bearer {credential}", **headers)


def test_hosts_with_etag_and_304(client, agent_world, enrolled):
    server, credential = enrolled

    first = get_hosts(client, credential)

    assert first.status_code == 200 and first.json() == {
        "hosts": [],
        "saved_images": [],
        "image_transfers": [],
        "volumes": [],
    }
    etag = first["ETag"]
    unchanged = get_hosts(client, credential, HTTP_IF_NONE_MATCH=etag)
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert unchanged["ETag"] == etag
    assert get_hosts(client, credential, HTTP_IF_NONE_MATCH=f"W/{etag}").status_code == 304

    request = driver_of(agent_world.backend).provision(spec(node=server.node.hostname))

    changed = get_hosts(client, credential, HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag
    (host,) = changed.json()["hosts"]
    assert f"{host['id']}@{host['generation']}" == request


def test_hosts_of_another_server_are_not_listed(client, agent_world, enrolled):
    server, _credential = enrolled
    _other, other_credential = agent_world.enrol("gpu-08", cards=2)
    driver_of(agent_world.backend).provision(spec(node=server.node.hostname))

    assert get_hosts(client, other_credential).json() == {
        "hosts": [],
        "saved_images": [],
        "image_transfers": [],
        "volumes": [],
    }


def test_hosts_needs_a_credential(client, enrolled):
    assert_problem(client.get("/api/v1/agent/hosts"), 401)


# --- host reports -----------------------------------------------------------------------------


def test_report(client, agent_world, enrolled):
    server, credential = enrolled
    driver = driver_of(agent_world.backend)
    request = driver.provision(spec(node=server.node.hostname))
    host_id = request.split("@")[0]
    body = {
        "sequence": 1,
        "hosts": [
            {"id": host_id, "generation": 1, "state": "running", "address": "10.213.7.2",
             "ssh_port": 22, "message": ""},
            {"id": "h-unknown", "generation": 3, "state": "removed"},
        ]
    }  # fmt: skip

    response = post(client, "hosts/report", body, credential)

    assert response.status_code == 204
    status = driver.host_request_status(request)
    assert status.done and status.access.address == "10.213.7.2"


@pytest.mark.parametrize(
    ("host", "field"),
    [
        ({"id": "h-1", "generation": 1, "state": "exploded"}, "hosts.0.state"),
        ({"id": "h-1", "generation": -1, "state": "running"}, "hosts.0.generation"),
        ({"id": "h-1", "generation": 1, "state": "running", "address": "nowhere"},
         "hosts.0.address"),
        ({"id": "h-1", "generation": 1, "state": "running", "ssh_port": 70000},
         "hosts.0.ssh_port"),
        ({"generation": 1, "state": "running"}, "hosts.0.id"),
    ],
)  # fmt: skip
def test_report_with_a_bad_field_is_a_400_naming_it(client, enrolled, host, field):
    _server, credential = enrolled

    body = {"sequence": 1, "hosts": [host]}

    problem = assert_problem(post(client, "hosts/report", body, credential), 400)

    assert field in problem["errors"]


@pytest.mark.parametrize(
    "body",
    [
        {"hosts": []},  # an agent older than report sequences
        {"sequence": None, "hosts": []},
        {"sequence": 0, "hosts": []},
        {"sequence": 1.5, "hosts": []},
        {"sequence": 2**63, "hosts": []},
    ],
)
def test_report_without_a_good_sequence_is_a_400_naming_it(client, enrolled, body):
    _server, credential = enrolled

    problem = assert_problem(post(client, "hosts/report", body, credential), 400)

    assert list(problem["errors"]) == ["sequence"]


def test_report_needs_a_credential(client, enrolled):
    body = {"sequence": 1, "hosts": []}
    assert_problem(post(client, "hosts/report", body, "loamsc_nope"), 401)


# --- around -----------------------------------------------------------------------------------


def test_the_agent_api_is_not_in_the_partner_schema(client, owner):
    client.force_login(owner)
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    assert not [path for path in response.json()["paths"] if "/agent/" in path]


def test_a_wrong_method_is_a_405_problem(client, enrolled):
    _server, credential = enrolled
    response = client.get("/api/v1/agent/heartbeat", HTTP_AUTHORIZATION=f"Bearer {credential}")
    assert_problem(response, 405)


def test_enrolment_from_a_browser_session_needs_no_csrf_token(client, agent_world, owner):
    JoinTokenFactory(pool=agent_world.pool, secret="loamjt_csrf")
    client.handler.enforce_csrf_checks = True
    client.force_login(owner)

    assert post(client, "enrol", enrol_body("loamjt_csrf")).status_code == 201
    assert Node.objects.filter(pool=agent_world.pool).count() == 1
