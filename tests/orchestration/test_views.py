"""The training task pages (list, submit, detail with its polling and reason, cancel) and the
back office's scheduling pages (a park's policy with its preview, one decision)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.billing.models import Meter
from apps.core.errors import PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration.models import Node, Placement, Pool, SchedulingPolicy, Task, TaskState
from apps.orchestration.scheduling import set_scheduling_policy
from tests.factories import MeterFactory, ParkFactory, ParkOperatorFactory, UserFactory
from tests.orchestration.test_scheduling import hold_cards, verified_org

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture
def tenant(client, task_world):
    client.force_login(task_world.owner)
    return client


def form_data(world, **fields):
    return {
        "name": "bert",
        "image": world.image.code,
        "command": "python train.py",
        "accelerator_model": "",
        "accelerators": "1",
        "vcpu": "8",
        "ram_gb": "32",
        "max_hourly_price": "",
        "deadline": "",
        "preference": "balanced",
        "priority": "0",
        **fields,
    }


# --- the list --------------------------------------------------------------------------------


def test_the_list_shows_state_queue_position_pool_and_price(tenant, task_world):
    task_world.submit(name="placed-one", accelerator_milli=4000)
    task_world.schedule()
    hold_cards(task_world.nodes["h1"], 4)
    waiting = task_world.submit(name="waiting-one")
    other_org, other_owner = verified_org(task_world)
    task_world.submit(organization=other_org, actor=other_owner, name="theirs")

    response = tenant.get("/tasks/", **ENGLISH)

    html = response.content.decode()
    assert response.status_code == 200
    assert "placed-one" in html and "waiting-one" in html and "theirs" not in html
    assert "east-h100 · East" in html and "¥80.00" in html  # 4 cards × ¥20.00
    row = html[html.index(f'data-task="{waiting.pk}"') :]
    assert '<td class="text-end num">1</td>' in row[: row.index("</tr>")]  # ahead of "theirs"
    assert 'hx-trigger="every 2s"' in html


def test_the_list_is_paged_newest_first(tenant, task_world, monkeypatch):
    monkeypatch.setattr("apps.orchestration.views.TASKS_PER_PAGE", 2)
    for name in ("job-a1", "job-b2", "job-c3"):
        task_world.submit(name=name)

    first = tenant.get("/tasks/", **ENGLISH).content.decode()
    second = tenant.get("/tasks/?page=2", **ENGLISH).content.decode()

    assert "job-c3" in first and "job-b2" in first and "job-a1" not in first
    assert "job-a1" in second and "job-c3" not in second
    assert "Page 1 of 2" in first
    assert 'hx-get="/tasks/?page=2"' in second  # a waiting task polls the page it is on


def test_the_list_for_htmx_is_the_rows_alone(tenant, task_world):
    task_world.submit()
    response = tenant.get("/tasks/", HTTP_HX_REQUEST="true", **ENGLISH)
    assert response.status_code == 200
    assert b"<thead>" in response.content and b"<html" not in response.content


def test_a_visitor_is_sent_to_log_in(client, task_world):
    response = client.get("/tasks/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


# --- submitting ------------------------------------------------------------------------------


def test_the_form_offers_the_parks_images_models_and_regions(tenant, task_world):
    response = tenant.get("/tasks/new/", **ENGLISH)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'value="pytorch"' in html and 'value="h100"' in html
    assert 'value="a10"' not in html  # no pool of the park has it
    assert 'value="east"' in html and 'value="west"' in html
    assert "Any model the image runs on" in html


def test_submitting_queues_the_task_and_shows_it(
    tenant, task_world, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        response = tenant.post(
            "/tasks/new/",
            form_data(
                task_world,
                accelerators="0.25",
                max_hourly_price="12.50",
                allowed_regions=["east"],
                preference="green",
                priority="-1",
            ),
            **ENGLISH,
        )

    task = Task.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/"
    assert (task.accelerator_milli, task.max_hourly_minor) == (250, 1250)
    assert (task.preference, task.priority, task.state) == ("green", -1, TaskState.QUEUED)
    assert [r.code for r in task.allowed_regions.all()] == ["east"]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"accelerators": "1.5"}, "accelerators", "Ask for a share of one accelerator"),
        ({"max_hourly_price": "1.00"}, "max_hourly_price", "The cheapest pool"),
        ({"allowed_regions": ["west"]}, "allowed_regions", "No pool of the park"),
        ({"priority": "3"}, "priority", "less than or equal to 0"),
    ],
)
def test_refusals_land_on_their_fields_with_422(tenant, task_world, fields, field, message):
    response = tenant.post("/tasks/new/", form_data(task_world, **fields), **ENGLISH)

    assert response.status_code == 422
    errors = response.context["form"].errors
    assert list(errors) == [field]
    assert message in errors[field][0]
    assert not Task.objects.exists()


def test_a_viewer_may_not_submit(client, task_world, member_of):
    client.force_login(member_of(task_world.organization, "viewer"))
    assert client.get("/tasks/new/").status_code == 403
    assert client.post("/tasks/new/", form_data(task_world)).status_code == 403
    assert not Task.objects.exists()


# --- the task page ---------------------------------------------------------------------------


def test_a_queued_task_shows_its_place_in_the_queue_and_polls(tenant, task_world):
    hold_cards(task_world.nodes["h1"], 8)
    task_world.submit(name="first")
    task = task_world.submit(name="second")

    response = tenant.get(f"/tasks/{task.pk}/", **ENGLISH)

    html = response.content.decode()
    assert "Queued: number 2 in the park's queue." in html
    assert f'hx-get="/tasks/{task.pk}/"' in html
    assert 'id="cancel-button"' in html
    assert "depends on the model it lands on" in html


def test_a_placed_task_says_why_and_what_it_measures(tenant, task_world):
    task = task_world.submit(accelerator_milli=2000)
    task_world.schedule()

    html = tenant.get(f"/tasks/{task.pk}/", **ENGLISH).content.decode()

    placement = Placement.objects.get(workload__task=task)
    assert "Why here:" in html and placement.plain_reason().replace("'", "&#x27;") in html
    assert placement.describe().replace("'", "&#x27;") not in html  # the figures: operators'
    assert 'id="placement-details"' not in html
    assert "19.79 compute units" in html  # 2 × 9.895
    assert "8 accelerators = 79.16 compute units; 6 free = 59.37 units" in html
    assert "¥40.00 per hour" in html
    assert "All candidates" not in html  # for the park's operators only


def test_an_operator_member_gets_the_link_to_every_candidate(client, task_world, member_of):
    user = member_of(task_world.organization, "member")
    ParkOperatorFactory(park=task_world.park, user=user)
    task = task_world.submit()
    task_world.schedule()
    client.force_login(user)

    html = client.get(f"/tasks/{task.pk}/", **ENGLISH).content.decode()

    placement = Placement.objects.get(workload__task=task)
    assert f'href="/ops/tasks/decisions/{placement.pk}/"' in html


@pytest.fixture
def finished_task(task_world, django_capture_on_commit_callbacks) -> Task:
    """A task the simulator ran at once, to success."""
    task_world.backend.config = {"task_seconds": 0}
    task_world.backend.save()
    with django_capture_on_commit_callbacks(execute=True):
        task = task_world.submit()
    task.refresh_from_db()
    return task


def test_the_htmx_poll_gets_the_status_alone_and_stops_when_done(tenant, finished_task):
    task = finished_task
    response = tenant.get(f"/tasks/{task.pk}/", HTTP_HX_REQUEST="true", **ENGLISH)

    html = response.content.decode()
    assert "<html" not in html and 'data-state="succeeded"' in html
    assert "hx-trigger" not in html  # finished: no more polling
    assert "exit code 0" in html  # the logs
    assert 'id="cancel-button"' not in html


def test_a_finished_task_says_how_long_it_ran_what_it_cost_and_its_state_in_words(
    tenant, finished_task
):
    task = finished_task
    Task.objects.filter(pk=task.pk).update(started_at=task.finished_at - timedelta(seconds=95))
    Meter.objects.filter(workload__task=task).delete()
    MeterFactory(  # ¥36.00 an hour for 95 s, closed and not metered yet
        organization=task.organization,
        instance=None,
        task=task,
        hourly_minor=Decimal(3600),
        started_at=task.finished_at - timedelta(seconds=95),
        ended_at=task.finished_at,
    )

    html = tenant.get(f"/tasks/{task.pk}/", **ENGLISH).content.decode()

    assert 'id="task-ran-for">1 min</dd>' in html
    assert 'id="task-cost">¥0.95</dd>' in html
    assert '<span id="backend-state">Succeeded</span>' in html


def test_another_organizations_task_is_404(tenant, task_world):
    other_org, other_owner = verified_org(task_world)
    theirs = task_world.submit(organization=other_org, actor=other_owner)

    assert tenant.get(f"/tasks/{theirs.pk}/").status_code == 404
    assert tenant.post(f"/tasks/{theirs.pk}/cancel/").status_code == 404
    assert Task.objects.get(pk=theirs.pk).state == TaskState.QUEUED


def test_cancel_from_the_page(tenant, task_world):
    task = task_world.submit()

    response = tenant.post(f"/tasks/{task.pk}/cancel/", **ENGLISH)

    assert response.status_code == 302
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED
    again = tenant.post(f"/tasks/{task.pk}/cancel/", follow=True, **ENGLISH)
    assert "cannot go from" in again.content.decode()


def test_cancel_is_post_only_and_not_for_viewers(client, task_world, member_of):
    task = task_world.submit()
    client.force_login(member_of(task_world.organization, "viewer"))
    assert client.post(f"/tasks/{task.pk}/cancel/").status_code == 403
    client.force_login(task_world.owner)
    assert client.get(f"/tasks/{task.pk}/cancel/").status_code == 405


# --- the park's policy -----------------------------------------------------------------------


@pytest.fixture
def ops(client, task_world, operator):
    client.force_login(operator)
    return client


def policy_data(**fields):
    return {
        "region": "1",
        "performance": "1",
        "energy": "1",
        "price": "1",
        "fragmentation": "1",
        "operator_share": "0.5",
        **fields,
    }


def test_the_policy_page_shows_the_defaults(ops, task_world):
    response = ops.get(f"/ops/tasks/policy/{task_world.park.pk}/", **ENGLISH)

    assert response.status_code == 200
    assert 'id="policy-default"' in response.content.decode()
    assert response.context["form"].initial["price"] == Decimal("1.00")


def test_saving_the_policy(ops, task_world, operator):
    response = ops.post(
        f"/ops/tasks/policy/{task_world.park.pk}/",
        policy_data(price="4", energy="0", operator_share="0.8", action="save"),
        **ENGLISH,
    )

    assert response.status_code == 302
    policy = SchedulingPolicy.objects.get(park=task_world.park)
    assert policy.weights() == {
        "region": 1.0,
        "performance": 1.0,
        "energy": 0.0,
        "price": 4.0,
        "fragmentation": 1.0,
    }
    assert policy.operator_share == Decimal("0.80") and policy.updated_by == operator
    event = AuditEvent.objects.get(action="scheduling_policy.changed")
    assert event.data["from"]["price"] == 1.0 and event.data["to"]["price"] == 4.0
    assert event.park_id == task_world.park.pk


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            {"region": "0", "performance": "0", "energy": "0", "price": "0", "fragmentation": "0"},
            "At least one weight must be above 0.",
        ),
        ({"price": "-1"}, "greater than or equal to 0"),
        ({"operator_share": "1.5"}, "less than or equal to 1"),
    ],
)
def test_a_bad_policy_is_refused(ops, task_world, fields, error):
    response = ops.post(
        f"/ops/tasks/policy/{task_world.park.pk}/", policy_data(**fields), **ENGLISH
    )

    assert response.status_code == 422
    assert error in response.content.decode()
    assert not SchedulingPolicy.objects.exists()


@pytest.fixture
def decided(task_world):
    """Four tasks placed with the default weights on a world of a fast, dear, dirty pool and a
    slow, cheap, clean one where the same work costs about as much (an A10 at ¥3/h does an
    H100's ¥20 hour in 7.9 h): balanced and green land on the clean pool, fast on the fast
    one."""
    hold_cards(task_world.nodes["h1"], 8)
    task_world.pool("fast", region=task_world.east, model=task_world.h100, pue="1.60", carbon=900)
    task_world.node("fast-1", pool="fast")
    task_world.pool(
        "eco", region=task_world.west, model=task_world.a10, price=300, pue="1.10", carbon=30
    )
    task_world.node("eco-1", pool="eco")
    tasks = [
        task_world.submit(name=name, preference=preference)
        for name, preference in (
            ("a", "balanced"),
            ("b", "green"),
            ("c", "fast"),
            ("d", "balanced"),
        )
    ]
    task_world.schedule()
    return {t.name: Placement.objects.get(workload__task=t) for t in tasks}


def test_the_preview_rescores_the_last_decisions_without_saving(ops, task_world, decided):
    chosen = {name: p.chosen_node.hostname for name, p in decided.items()}
    assert chosen == {"a": "eco-1", "b": "eco-1", "c": "fast-1", "d": "eco-1"}

    response = ops.post(
        f"/ops/tasks/policy/{task_world.park.pk}/",
        policy_data(
            region="0",
            energy="0",
            price="0",
            fragmentation="0",
            performance="10",
            operator_share="1",
            action="preview",
        ),
        **ENGLISH,
    )

    assert response.status_code == 200
    rows = {row.placement.workload.task.name: row for row in response.context["preview"]}
    assert {name: row.changes for name, row in rows.items()} == {
        "a": True,
        "b": True,
        "c": False,
        "d": True,
    }
    assert rows["a"].would_choose["node"] == "fast-1"
    assert "3 of the last 4 decisions would have chosen another host." in response.content.decode()
    assert not SchedulingPolicy.objects.exists()


def test_the_preview_for_htmx_is_the_table_alone(ops, task_world, decided):
    response = ops.post(
        f"/ops/tasks/policy/{task_world.park.pk}/",
        policy_data(action="preview"),
        HTTP_HX_REQUEST="true",
        **ENGLISH,
    )

    html = response.content.decode()
    assert "<html" not in html and 'id="preview-rows"' in html
    assert "0 of the last 4 decisions would have chosen another host." in html


def test_the_preview_looks_at_the_last_twenty(task_world):
    from apps.orchestration.selectors import preview_policy

    for _ in range(22):
        task_world.submit(accelerator_milli=100, vcpu=1, ram_gb=1)
    task_world.schedule()

    rows = preview_policy(task_world.park, weights={"price": 1.0}, operator_share=0.5)
    assert len(rows) == 20


@pytest.mark.parametrize("who", ["other_operator", "tenant", "member"])
def test_the_policy_page_is_for_this_parks_operators_only(client, task_world, who):
    if who == "other_operator":
        user = UserFactory()
        ParkOperatorFactory(park=ParkFactory(), user=user)
    elif who == "tenant":
        user = task_world.owner
    else:
        user = UserFactory()
    client.force_login(user)

    url = f"/ops/tasks/policy/{task_world.park.pk}/"
    assert client.get(url).status_code == 404
    assert client.post(url, policy_data(action="save")).status_code == 404
    assert not SchedulingPolicy.objects.exists()


def test_set_scheduling_policy_refuses_non_operators_and_keeps_unnamed_weights(
    task_world, operator
):
    with pytest.raises(PermissionDenied):
        set_scheduling_policy(park=task_world.park, operator=task_world.owner, price=3)

    set_scheduling_policy(park=task_world.park, operator=operator, price=3)
    policy = set_scheduling_policy(park=task_world.park, operator=operator, energy="2.5")

    assert policy.weights()["price"] == 3.0 and policy.weights()["energy"] == 2.5
    with pytest.raises(ValidationError) as excinfo:
        set_scheduling_policy(park=task_world.park, operator=operator, region=101)
    assert set(excinfo.value.message_dict) == {"region"}


def test_the_saved_policy_changes_the_next_placement(task_world, operator):
    hold_cards(task_world.nodes["h1"], 8)
    task_world.pool("fast", region=task_world.east, model=task_world.h100, carbon=900)
    task_world.node("fast-1", pool="fast")
    task_world.pool("eco", region=task_world.west, model=task_world.a10, price=400, carbon=30)
    task_world.node("eco-1", pool="eco")
    set_scheduling_policy(
        park=task_world.park,
        operator=operator,
        operator_share=1,
        region=0,
        performance=1,
        energy=0,
        price=0,
        fragmentation=0,
    )
    task = task_world.submit(preference="cheap")

    task_world.schedule()

    assert Task.objects.get(pk=task.pk).node.hostname == "fast-1"


# --- one decision ----------------------------------------------------------------------------


def test_an_operator_sees_every_candidate_of_a_decision(ops, task_world, decided):
    placement = decided["a"]

    response = ops.get(f"/ops/tasks/decisions/{placement.pk}/", **ENGLISH)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-chosen="yes" data-node="eco-1"' in html
    assert 'data-node="fast-1"' in html
    assert 'data-node="h1" data-reason="gpu_count"' in html
    assert "not enough whole accelerators free" in html
    assert "¥3.00" in html and "¥20.00" in html


def test_a_decision_page_marks_a_host_passed_over_as_poor_value(ops, task_world, decided):
    placement = decided["a"]
    for candidate in placement.candidates:
        candidate["dearer"] = candidate["node"] == "fast-1"
    placement.save(update_fields=["candidates"])

    html = ops.get(f"/ops/tasks/decisions/{placement.pk}/", **ENGLISH).content.decode()

    fast_row = html[html.index('data-node="fast-1"') :].split("</tr>")[0]
    eco_row = html[html.index('data-node="eco-1"') :].split("</tr>")[0]
    assert 'data-dearer="yes"' in fast_row and "Poor value" in fast_row
    assert 'data-dearer="yes"' not in eco_row


def test_a_decision_page_counts_the_hosts_it_did_not_keep(ops, task_world, decided):
    placement = decided["a"]
    placement.weights["considered"] = {"fitted": 7, "rejected": {"gpu_count": 40, "drained": 2}}
    placement.save(update_fields=["weights"])

    html = ops.get(f"/ops/tasks/decisions/{placement.pk}/", **ENGLISH).content.decode()

    shown = len(placement.feasible_candidates())
    assert f"And {7 - shown} more hosts with room, scored lower" in html
    assert "not enough whole accelerators free: 40 hosts" in html
    assert "drained for maintenance: 2 hosts" in html


def test_an_operator_sees_a_hosts_decision_too(ops, task_world):
    from tests.factories import FlavorFactory, FlavorFamilyFactory, PriceFactory
    from tests.orchestration.test_services_place_scored import order_host

    family = FlavorFamilyFactory(park=task_world.park, accelerator_model=task_world.h100)
    task_world.flavor = FlavorFactory(family=family, accelerator_count=1, vcpu=8, ram_gb=64)
    PriceFactory(region=task_world.east, flavor=task_world.flavor, amount_minor=2100)
    _, placement = order_host(task_world)

    response = ops.get(f"/ops/tasks/decisions/{placement.pk}/", **ENGLISH)

    assert response.status_code == 200
    assert 'data-chosen="yes" data-node="h1"' in response.content.decode()


@pytest.mark.parametrize("who", ["other_operator", "tenant"])
def test_a_decision_is_404_to_anyone_but_its_parks_operators(client, task_world, decided, who):
    if who == "other_operator":
        user = UserFactory()
        ParkOperatorFactory(park=ParkFactory(), user=user)
    else:
        user = task_world.owner
    client.force_login(user)

    assert client.get(f"/ops/tasks/decisions/{decided['a'].pk}/").status_code == 404


def test_a_placed_task_gives_the_reason_in_plain_words_and_the_figures_to_operators(
    client, task_world, member_of
):
    user = member_of(task_world.organization, "member")
    ParkOperatorFactory(park=task_world.park, user=user)
    task = task_world.submit()
    task_world.schedule()
    client.force_login(user)

    html = client.get(f"/tasks/{task.pk}/", **ENGLISH).content.decode()

    placement = Placement.objects.get(workload__task=task)
    assert "East: the only place with free cards for it." in html  # one node in the world
    assert 'id="placement-details"' in html
    assert placement.describe().replace("'", "&#x27;") in html


def test_a_task_blocked_by_drained_hosts_says_so(tenant, task_world):
    Node.objects.update(is_drained=True)
    task = task_world.submit(accelerator_model=task_world.h100)
    task_world.schedule()

    html = tenant.get(f"/tasks/{task.pk}/", **ENGLISH).content.decode()

    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    assert 'id="task-blocked"' in html
    assert f"Every {task_world.h100} host it may run on is drained or down" in html


def test_a_task_no_pool_can_take_says_so_and_a_waiting_one_does_not(tenant, task_world):
    nowhere = task_world.submit(accelerator_model=task_world.h100)
    # Its model's only pool is taken out of scheduling after it was queued.
    Pool.objects.filter(accelerator_model=task_world.h100).update(is_schedulable=False)
    task_world.pool("west-a10", region=task_world.west, model=task_world.a10, price=500)
    task_world.node("a1", pool="west-a10")
    hold_cards(task_world.nodes["a1"], 8)
    waiting = task_world.submit(accelerator_model=task_world.a10)  # a full node: it waits
    task_world.schedule()

    blocked = tenant.get(f"/tasks/{nowhere.pk}/", **ENGLISH).content.decode()
    queued = tenant.get(f"/tasks/{waiting.pk}/", **ENGLISH).content.decode()

    assert f"No pool of the park offers {task_world.h100} hosts in the regions" in blocked
    assert 'id="task-blocked"' not in queued
