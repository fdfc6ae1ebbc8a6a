"""Multi-node (gang) training tasks on simulator pools: N nodes × M cards placed all or nothing on
one pool, explained, run with the peers' names in the output, billed for every card on every
node; refused up front where the park has no pool that runs a task across nodes."""

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.billing.metering import meter_organization
from apps.billing.models import UsageRecord
from apps.catalog.models import Price
from apps.orchestration.models import Allocation, Placement, Task, TaskState
from apps.quotas.models import QuotaLimit, QuotaResource
from tests.factories import BackendFactory, PoolFactory
from tests.orchestration.test_scheduling import hold_cards, quick, reload
from tests.orchestration.test_views import form_data

pytestmark = pytest.mark.django_db

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}
CARD_HOUR = 3600  # 1 minor unit per card-second: a bill in minor units is card-seconds


@pytest.fixture
def gang_world(task_world):
    """The task world's H100 pool (east-h100) with three 4-card nodes g1–g3 beside its 8-card
    h1, which a host fills; a card-hour costs CARD_HOUR."""
    Price.objects.filter(region=task_world.east).update(amount_minor=CARD_HOUR)
    hold_cards(task_world.nodes["h1"], 8)
    for n in (1, 2, 3):
        task_world.node(f"g{n}", pool="east-h100", accelerators=4)
    return task_world


def gang(world, **fields):
    return world.submit(node_count=2, accelerator_milli=2000, vcpu=4, ram_gb=16, **fields)


def live_allocations(task):
    return list(
        Allocation.objects.filter(workload__task=task, released_at__isnull=True)
        .select_related("node")
        .order_by("node__hostname")
    )


def test_a_gang_is_placed_on_two_nodes_of_one_pool_and_priced_for_all_its_cards(gang_world):
    hold_cards(gang_world.nodes["g1"], 3)  # g1 keeps one card: too few for a member
    task = gang(gang_world)

    result = gang_world.schedule()

    task = reload(task)
    assert result.placed == [task.pk] and task.state == TaskState.PLACED
    allocations = live_allocations(task)
    assert [a.node.hostname for a in allocations] == ["g2", "g3"]
    assert [a.accelerators.count() for a in allocations] == [2, 2]
    assert task.node.hostname == "g2" and task.pool.name == "east-h100"
    assert task.hourly_minor == 4 * CARD_HOUR
    [placement] = Placement.objects.filter(workload__task=task)
    assert placement.gang["nodes"] == ["g2", "g3"]
    assert "2 nodes of east-h100 (g2, g3)" in placement.describe()


def test_a_gang_waits_whole_when_only_one_node_has_room(gang_world):
    for name in ("g1", "g2"):
        hold_cards(gang_world.nodes[name], 3)
    task = gang(gang_world)

    result = gang_world.schedule()

    task = reload(task)
    assert task.state == TaskState.QUEUED and task.pk in result.waiting
    assert live_allocations(task) == []  # nothing held for a gang that cannot start
    assert gang_world.free_cards(gang_world.nodes["g3"]) == 4
    assert "east-h100: 1 of the 2 nodes have room now" in task.logs


def test_a_gang_never_spans_two_pools(gang_world):
    for name in ("g1", "g2"):
        hold_cards(gang_world.nodes[name], 4)
    gang_world.pool("east-h100-b", region=gang_world.east, model=gang_world.h100)
    gang_world.node("b1", pool="east-h100-b", accelerators=4)
    task = gang(gang_world)

    gang_world.schedule()

    assert reload(task).state == TaskState.QUEUED  # one free node in each pool is not a gang


def test_the_quota_counts_every_card_on_every_node(gang_world):
    QuotaLimit.objects.create(
        park=gang_world.park,
        organization=gang_world.organization,
        resource=QuotaResource.ACCELERATORS,
        limit=3,
    )
    task = gang(gang_world)

    result = gang_world.schedule()

    assert result.held_back == {task.pk: "quota"}
    assert "Over your organization's quota for Accelerators" in reload(task).logs


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"node_count": 17}, "Ask for 1–16 nodes."),
        ({"node_count": 2, "accelerator_milli": 500}, "whole accelerators on each"),
        ({"node_count": 5}, "No pool of the park has 5 hosts large enough"),
    ],
)
def test_an_impossible_gang_is_refused_on_its_field(gang_world, fields, message):
    with pytest.raises(ValidationError) as refused:
        gang_world.submit(**{"accelerator_milli": 2000, **fields})
    assert message in " ".join(refused.value.message_dict["node_count"])


def test_an_agent_pool_refuses_a_multi_node_task_at_submit(gang_world):
    agents = BackendFactory(park=gang_world.park, name="servers", driver="agent", config={})
    PoolFactory(backend=agents, region=gang_world.east, accelerator_model=gang_world.a10)

    with pytest.raises(ValidationError) as refused:
        gang(gang_world, accelerator_model=gang_world.a10)

    [message] = refused.value.message_dict["node_count"]
    assert "run a task on one server only" in message and "Ask for 1 node" in message


def test_a_gang_runs_on_the_simulator_sees_its_peers_and_is_billed_for_four_cards(
    gang_world, django_capture_on_commit_callbacks
):
    quick(gang_world, task_seconds=20)
    start = timezone.now().replace(microsecond=0)
    with time_machine.travel(start, tick=False) as traveller:
        with django_capture_on_commit_callbacks(execute=True):
            task = gang(gang_world)
        assert reload(task).state == TaskState.RUNNING
        traveller.shift(timedelta(seconds=30))
        with django_capture_on_commit_callbacks(execute=True):
            from apps.orchestration import tasks

            tasks.schedule_queues()

    task = reload(task)
    assert task.state == TaskState.SUCCEEDED
    assert "SLURM_JOB_NODELIST=g1,g2 NNODES=2 MASTER_ADDR=g1 MASTER_PORT=29500" in task.logs
    assert live_allocations(task) == []
    assert all(gang_world.free_cards(gang_world.nodes[n]) == 4 for n in ("g1", "g2"))
    meter_organization(gang_world.organization.pk, until=start + timedelta(minutes=1))
    records = UsageRecord.objects.filter(workload__task=task)
    assert sum(r.seconds for r in records) == 20
    assert sum(r.amount_minor for r in records) == 20 * 4  # every card on both nodes


def test_the_task_list_page_and_api_show_the_gang(gang_world, client, operator):
    task = gang(gang_world)
    gang_world.schedule()
    client.force_login(gang_world.owner)

    listing = client.get("/tasks/", **ENGLISH).content.decode()
    page = client.get(f"/tasks/{task.pk}/", **ENGLISH).content.decode()

    assert "2 nodes × 2 cards" in listing and "2 nodes × 2 cards" in page
    assert 'id="task-nodes">g1, g2<' in page

    client.force_login(operator)
    placement = Placement.objects.get(workload__task=task)
    decision = client.get(f"/ops/tasks/decisions/{placement.pk}/", **ENGLISH).content.decode()
    assert 'data-node="g1"' in decision and 'data-node="g2"' in decision
    assert 'data-pool="east-h100" ' in decision or 'data-pool="east-h100"' in decision


def test_the_form_takes_a_node_count_and_the_api_schema_lists_it(gang_world, client):
    client.force_login(gang_world.owner)
    form = form_data(gang_world, accelerators="2", node_count="2", vcpu="4", ram_gb="16")
    response = client.post("/tasks/new/", form, **ENGLISH)
    assert response.status_code == 302
    task = Task.objects.get()
    assert (task.node_count, task.accelerator_milli) == (2, 2000)

    refused = client.post("/tasks/new/", {**form, "accelerators": "0.5"}, **ENGLISH)
    assert refused.status_code == 422
    assert "whole accelerators on each" in refused.content.decode()

    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    fields = schema["components"]["schemas"]["TaskRequest"]["properties"]
    assert fields["node_count"]["maximum"] == 16
