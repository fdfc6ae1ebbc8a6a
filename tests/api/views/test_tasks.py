"""Training tasks through the partner API (/api/v1/tasks/): list, create, retrieve and cancel,
the same services as the pages; refusals as problem+json (400 with field errors, 403, 404, 409)
and another organization's task a 404."""

import pytest

from apps.orchestration.models import Placement, Pool, Task, TaskState
from apps.orchestration.scheduling import schedule_queue_pass
from apps.tenants.models import ApiKeyScope
from tests.api.conftest import ENGLISH, assert_field_errors, assert_problem, bearer, results
from tests.factories import (
    BackendFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    UserFactory,
)
from tests.orchestration.conftest import TaskWorld
from tests.orchestration.conftest import task_world as task_world  # the fixture, shared

pytestmark = pytest.mark.django_db


def body(**fields) -> dict:
    return {"name": "bert", "image": "pytorch", "command": "python train.py", **fields}


@pytest.fixture
def theirs(task_world: TaskWorld):
    organization = OrganizationFactory(park=task_world.park, verified=True)
    user = UserFactory()
    MembershipFactory(organization=organization, user=user, role="owner")
    return task_world.submit(organization=organization, actor=user, name="theirs")


def test_create_answers_201_with_the_queued_task(
    api, task_world, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = api.post(
            "/api/v1/tasks/",
            body(
                accelerator_model="h100",
                accelerator_milli=250,
                vcpu=4,
                ram_gb=16,
                max_hourly_minor=900,
                allowed_regions=["east"],
                preference="cheap",
                priority=-1,
            ),
        )

    assert response.status_code == 201, response.content
    task = response.json()
    assert task["state"] == "queued" and task["queue_position"] == 1
    assert {k: task[k] for k in ("image", "accelerator_model", "accelerator_milli")} == {
        "image": "pytorch",
        "accelerator_model": "h100",
        "accelerator_milli": 250,
    }
    assert (task["allowed_regions"], task["preference"], task["priority"]) == (
        ["east"],
        "cheap",
        -1,
    )
    assert (task["pool"], task["node"], task["placement"], task["currency"]) == (
        None,
        None,
        None,
        "CNY",
    )
    assert Task.objects.get(pk=task["id"]).organization == task_world.organization


def test_a_created_task_is_placed_and_runs(api, task_world, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/tasks/", body(accelerator_milli=2000))
    task_id = response.json()["id"]

    task = api.get(f"/api/v1/tasks/{task_id}/").json()

    assert task["state"] == "running"
    assert (task["pool"], task["region"], task["node"]) == ("east-h100", "east", "h1")
    assert task["hourly_minor"] == 4000
    assert task["placement"] == Placement.objects.get(workload__task=task_id).describe()
    assert task["placement"].startswith("Placed on h1 in East")
    assert "started" in task["logs"]


def test_a_gang_task_runs_on_two_nodes_and_an_agent_only_model_refuses_it(
    api, task_world, django_capture_on_commit_callbacks
):
    task_world.node("h2", pool="east-h100")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/tasks/", body(accelerator_milli=2000, node_count=2))
    assert response.status_code == 201, response.content

    task = api.get(f"/api/v1/tasks/{response.json()['id']}/").json()

    assert (task["state"], task["node_count"], task["nodes"]) == ("running", 2, ["h1", "h2"])
    assert task["hourly_minor"] == 8000  # 4 cards
    assert task["placement"].startswith("Placed all or nothing on 2 nodes of east-h100")

    agents = BackendFactory(park=task_world.park, name="servers", driver="agent", config={})
    PoolFactory(backend=agents, region=task_world.east, accelerator_model=task_world.a10)
    refused = api.post("/api/v1/tasks/", body(accelerator_model="a10", node_count=2))
    errors = assert_field_errors(refused, "node_count")["errors"]["node_count"]
    assert "run a task on one server only" in str(errors)


def test_an_image_its_pool_cannot_run_is_a_400_naming_both_and_a_run_says_its_digest(
    api, task_world, django_capture_on_commit_callbacks
):
    pool = task_world.pools["east-h100"]
    Pool.objects.filter(pk=pool.pk).update(images={"debian-12": "sha256:d3ef"})
    refused = api.post("/api/v1/tasks/", body(), **ENGLISH)
    errors = assert_field_errors(refused, "image")["errors"]["image"]
    assert "(east-h100) cannot run the image pytorch" in str(errors)

    Pool.objects.filter(pk=pool.pk).update(images={"pytorch": "sha256:70c4"})
    with django_capture_on_commit_callbacks(execute=True):
        created = api.post("/api/v1/tasks/", body())
    task = api.get(f"/api/v1/tasks/{created.json()['id']}/").json()
    assert (task["image"], task["image_digest"]) == ("pytorch", "sha256:70c4")


def test_the_same_idempotency_key_creates_one_task(api, task_world):
    first = api.post("/api/v1/tasks/", body(), HTTP_IDEMPOTENCY_KEY="job-1")
    again = api.post("/api/v1/tasks/", body(), HTTP_IDEMPOTENCY_KEY="job-1")

    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Task.objects.count() == 1


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        ({"image": "nope"}, ("image",)),
        ({"accelerator_milli": 1500}, ("accelerator_milli",)),
        ({"accelerator_milli": 0}, ("accelerator_milli",)),
        ({"max_hourly_minor": 100}, ("max_hourly_minor",)),
        ({"allowed_regions": ["west"]}, ("allowed_regions",)),
        ({"allowed_regions": ["nowhere"]}, ("allowed_regions",)),
        ({"priority": 5}, ("priority",)),
        ({"deadline": "2020-01-01T00:00:00Z"}, ("deadline",)),
        ({"command": ""}, ("command",)),
        ({"preference": "fastest"}, ("preference",)),
    ],
)
def test_invalid_fields_are_400_with_the_field_named(api, task_world, fields, errors):
    response = api.post("/api/v1/tasks/", body(**fields))
    assert_field_errors(response, *errors)
    assert not Task.objects.exists()


def test_list_shows_only_the_organizations_tasks_and_filters_by_state(api, task_world, theirs):
    queued = task_world.submit(name="queued")
    cancelled = task_world.submit(name="cancelled")
    api.post(f"/api/v1/tasks/{cancelled.pk}/cancel/")

    assert [t["name"] for t in results(api.get("/api/v1/tasks/"))] == ["cancelled", "queued"]
    assert [t["id"] for t in results(api.get("/api/v1/tasks/", {"state": "queued"}))] == [queued.pk]


def test_queue_positions_count_every_organization_of_the_park(api, task_world, theirs):
    mine = task_world.submit(name="mine")

    (task,) = results(api.get("/api/v1/tasks/"))

    assert task["id"] == mine.pk and task["queue_position"] == 2  # "theirs" came first


def test_another_organizations_task_is_404(api, task_world, theirs):
    assert_problem(api.get(f"/api/v1/tasks/{theirs.pk}/"), 404)
    assert_problem(api.post(f"/api/v1/tasks/{theirs.pk}/cancel/"), 404)
    assert Task.objects.get(pk=theirs.pk).state == TaskState.QUEUED


def test_cancel_then_cancel_again_is_409(api, task_world):
    task = task_world.submit()
    schedule_queue_pass(park=task_world.park)

    response = api.post(f"/api/v1/tasks/{task.pk}/cancel/")

    assert response.status_code == 200, response.content
    assert response.json()["state"] == "cancelled"
    assert task_world.free_cards(task_world.nodes["h1"]) == 8
    assert_problem(api.post(f"/api/v1/tasks/{task.pk}/cancel/"), 409, "invalid_transition")


def test_a_read_key_reads_but_may_not_create_or_cancel(client, task_world, make_key):
    key = make_key(ApiKeyScope.READ)
    task = task_world.submit()

    listed = client.get("/api/v1/tasks/", **ENGLISH, **bearer(key))
    assert results(listed, 1)[0]["id"] == task.pk
    assert client.get(f"/api/v1/tasks/{task.pk}/", **bearer(key)).status_code == 200
    created = client.post(
        "/api/v1/tasks/", body(), content_type="application/json", **ENGLISH, **bearer(key)
    )
    assert_problem(created, 403)
    assert_problem(client.post(f"/api/v1/tasks/{task.pk}/cancel/", **bearer(key)), 403)
    assert Task.objects.get().state == TaskState.QUEUED


@pytest.mark.parametrize(("role", "status"), [("member", 201), ("billing", 403), ("viewer", 403)])
def test_a_session_acts_by_its_role(client, task_world, member_of, role, status):
    client.force_login(member_of(task_world.organization, role))
    response = client.post("/api/v1/tasks/", body(), content_type="application/json", **ENGLISH)
    assert response.status_code == status, response.content


def test_without_a_key_it_is_401(client, task_world):
    assert_problem(client.get("/api/v1/tasks/"), 401)


def test_the_schema_documents_the_task_routes(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert {"/api/v1/tasks/", "/api/v1/tasks/{id}/", "/api/v1/tasks/{id}/cancel/"} <= set(
        schema["paths"]
    )
    create = schema["paths"]["/api/v1/tasks/"]["post"]
    assert "201" in create["responses"] and "400" in create["responses"]
