"""A queue pass at scale: its queries do not grow with the tasks it places, and the quota it
counts once per organization (and keeps up to date in memory) refuses exactly what reserve()
refused task by task: organization and park-wide limits, shares summed to whole cards, the
monthly spend limit."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.core.models import AuditEvent
from apps.orchestration.models import Allocation, Placement, Task, TaskState
from apps.orchestration.reservations import HeldByTasks
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.quotas.services import QuotaExceeded, Usage, reserve
from apps.workloads.models import Workload, WorkloadKind
from tests.factories import OrganizationFactory, UsageRecordFactory

pytestmark = pytest.mark.django_db

SHAPES = (250, 500, 1000, 2000)


def limit(world, resource, value, *, organization=None, model=None):
    return QuotaLimit.objects.create(
        park=world.park,
        organization=organization,
        resource=resource,
        accelerator_model=model,
        limit=value,
    )


@pytest.fixture
def roomy(task_world):
    """Room for well over 25 tasks of mixed shapes, in two pools, under generous limits of the
    organization and the park, and a second organization refused every accelerator."""
    task_world.pool("west-h100", region=task_world.west, model=task_world.h100, price=1800)
    for n in range(4):
        task_world.node(f"w{n}", pool="west-h100")
    limit(task_world, QuotaResource.ACCELERATORS, 200, organization=task_world.organization)
    limit(task_world, QuotaResource.VCPU, 2000, organization=task_world.organization)
    limit(task_world, QuotaResource.ACCELERATORS, 300)
    refused = OrganizationFactory(park=task_world.park, verified=True)
    limit(task_world, QuotaResource.ACCELERATORS, 0, organization=refused)
    task_world.refused_organization = refused
    return task_world


def queue(world, count: int, organization=None) -> list[Task]:
    organization = organization or world.organization
    return [
        Task.objects.create(
            organization=organization,
            workload=Workload.objects.create(organization=organization, kind=WorkloadKind.TASK),
            name=f"t{n}",
            image=world.image,
            command="python train.py",
            accelerator_milli=SHAPES[n % len(SHAPES)],
            vcpu=4,
            ram_gb=16,
        )
        for n in range(count)
    ]


def queries_of_a_pass(world, count: int) -> int:
    placing = queue(world, count)
    (refused,) = queue(world, 1, organization=world.refused_organization)
    with CaptureQueriesContext(connection) as captured:
        result = world.schedule()
    assert sorted(result.placed) == sorted(t.pk for t in placing)
    assert result.held_back[refused.pk] == "quota"  # and noted in its log
    return len(captured)


def test_a_pass_takes_the_same_queries_for_5_or_20_placements(roomy):
    # A first pass leaves shared cards and held tasks behind, whose reads a pass skips when
    # there are none: both measured passes find them.
    queries_of_a_pass(roomy, 4)
    five = queries_of_a_pass(roomy, 5)
    twenty = queries_of_a_pass(roomy, 20)

    assert twenty == five
    assert Placement.objects.filter(workload__task__isnull=False).count() == 29
    placed = Task.objects.filter(state=TaskState.PLACED)
    assert placed.count() == 29
    assert AuditEvent.objects.filter(action="task.placed").count() == 29
    for task in placed:
        allocation = Allocation.objects.get(workload__task=task, released_at__isnull=True)
        assert allocation.node_id == task.node_id
        if task.accelerator_milli < 1000:
            assert allocation.shared_accelerator.node_id == task.node_id
        else:
            assert allocation.accelerators.count() == task.accelerator_milli // 1000


def test_shares_on_one_card_never_pass_it_within_a_pass(task_world):
    tasks = [task_world.submit(accelerator_milli=300, vcpu=1, ram_gb=1) for _ in range(30)]

    task_world.schedule()

    for card in task_world.nodes["h1"].accelerators.all():
        assert task_world.share_used(card) <= 1000
    placed = [t for t in tasks if Task.objects.get(pk=t.pk).state == TaskState.PLACED]
    assert len(placed) == 24  # three 300-shares a card, eight cards


def test_quarter_shares_count_as_one_card_against_the_quota_within_a_pass(task_world):
    limit(task_world, QuotaResource.ACCELERATORS, 1, organization=task_world.organization)
    quarters = [task_world.submit(accelerator_milli=250) for _ in range(4)]
    fifth = task_world.submit(accelerator_milli=250)

    result = task_world.schedule()

    assert sorted(result.placed) == sorted(t.pk for t in quarters)
    assert result.held_back == {fifth.pk: "quota"}
    assert (
        "Over your organization's quota for Accelerators (all models): 1 in use + 1 asked "
        "exceeds the limit of 1." in Task.objects.get(pk=fifth.pk).logs
    )


def test_a_park_wide_limit_holds_across_organizations_within_a_pass(task_world):
    limit(task_world, QuotaResource.ACCELERATORS, 3)
    other = OrganizationFactory(park=task_world.park, verified=True)
    ours = queue(task_world, 2)
    theirs = queue(task_world, 2, organization=other)
    for task in [*ours, *theirs]:
        Task.objects.filter(pk=task.pk).update(accelerator_milli=1000)

    result = task_world.schedule()

    assert len(result.placed) == 3
    (refused,) = result.held_back
    assert result.held_back[refused] == "quota"
    assert "The park's capacity limit for Accelerators (all models) is reached (3 in use + 1 " in (
        Task.objects.get(pk=refused).logs
    )


def test_a_reached_monthly_spend_limit_refuses_tasks(task_world):
    limit(task_world, QuotaResource.MONTHLY_SPEND, 1000, organization=task_world.organization)
    UsageRecordFactory(
        organization=task_world.organization, started_at=timezone.now(), amount_minor=1000
    )
    task = task_world.submit()

    result = task_world.schedule()

    assert result.held_back == {task.pk: "quota"}
    assert "Monthly spend" in Task.objects.get(pk=task.pk).logs


@pytest.mark.parametrize("park_wide", [False, True], ids=["organization", "park"])
def test_a_reached_monthly_spend_limit_refuses_a_task_as_reserve_refuses_an_order(
    task_world, park_wide
):
    """The pass and reserve check with one checker: the same spend, counted over the same
    organizations (the park's: another organization's spend), refused in the same words."""
    ours = task_world.organization
    spender = OrganizationFactory(park=task_world.park, verified=True) if park_wide else ours
    limit(task_world, QuotaResource.MONTHLY_SPEND, 1000, organization=None if park_wide else ours)
    UsageRecordFactory(organization=spender, started_at=timezone.now(), amount_minor=1000)
    with transaction.atomic(), pytest.raises(QuotaExceeded) as refused:
        reserve(organization=ours, demand=Usage(accelerators=1, vcpu=8))
    task = task_world.submit()

    result = task_world.schedule()

    assert result.held_back == {task.pk: "quota"}
    assert refused.value.message in Task.objects.get(pk=task.pk).logs
    assert refused.value.message == (
        "The park's capacity limit for Monthly spend (minor units) is reached (¥10.00 in use + "
        "¥0.00 asked, limit ¥10.00). Try again later or choose another resource."
        if park_wide
        else "Over your organization's quota for Monthly spend (minor units): ¥10.00 in use + "
        "¥0.00 asked exceeds the limit of ¥10.00. Release something or ask the park for more."
    )


def test_a_models_limit_holds_within_a_pass(task_world):
    limit(
        task_world,
        QuotaResource.MODEL_ACCELERATORS,
        1,
        organization=task_world.organization,
        model=task_world.h100,
    )
    first, second = task_world.submit(), task_world.submit()

    result = task_world.schedule()

    assert result.placed == [first.pk]
    assert result.held_back == {second.pk: "quota"}
    assert (
        f"Over your organization's quota for {task_world.h100}: 1 in use + 1 asked exceeds the "
        "limit of 1. Release something or ask the park for more."
    ) in Task.objects.get(pk=second.pk).logs


def test_what_tasks_hold_grows_by_whole_cards_only_when_shares_pass_one():
    class Model:
        pk, compute_units = 1, 10

    class Share:
        accelerator_milli, vcpu, ram_gb, node_count = 600, 2, 8, 1

    held = HeldByTasks()
    assert held.growth(Share, Model).accelerators == 1
    held.add(Share, Model)
    assert held.growth(Share, Model).accelerators == 1  # 1.2 cards: a second one
    held.add(Share, Model)
    assert held.usage().accelerators == 2 and held.usage().vcpu == 4
