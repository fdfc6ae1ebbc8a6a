"""Preemption on simulator pools: a task that may not be preempted and fits nowhere requeues the
preemptible tasks that lose the fewest seconds, which are billed up to then and say so, and
takes their room; a preemptible task pays the park's discounted price."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.billing.models import Meter
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.models import Placement, Preemption, SchedulingPolicy, Task, TaskState
from apps.orchestration.preemption import preempt_for_waiting
from apps.orchestration.scheduling import set_scheduling_policy
from apps.quotas.models import QuotaLimit, QuotaResource
from tests.orchestration.test_scheduling import live, reload, verified_org

pytestmark = pytest.mark.django_db


def running(world, capture, **fields) -> Task:
    with capture(execute=True):
        task = world.submit(accelerator_milli=4000, **fields)
    task = reload(task)
    assert task.state == TaskState.RUNNING
    return task


def ran_for(task, seconds) -> None:
    started = timezone.now() - timedelta(seconds=seconds)
    Task.objects.filter(pk=task.pk).update(started_at=started)
    Meter.objects.filter(workload_id=task.workload_id).update(
        started_at=started, metered_until=started, known_until=started
    )


@pytest.fixture
def stopped(monkeypatch):
    """The handles of the jobs the simulator was told to stop."""
    told = []
    monkeypatch.setattr(SimulatorDriver, "cancel_task", lambda self, handle: told.append(handle))
    return told


def test_a_task_that_fits_nowhere_requeues_the_preemptible_task_that_lost_least(
    task_world, django_capture_on_commit_callbacks, stopped
):
    old = running(task_world, django_capture_on_commit_callbacks, name="old", preemptible=True)
    young = running(task_world, django_capture_on_commit_callbacks, name="young", preemptible=True)
    ran_for(old, 7200)
    ran_for(young, 600)
    young_handle = young.backend_handle

    with django_capture_on_commit_callbacks(execute=True):
        urgent = task_world.submit(name="urgent", accelerator_milli=4000)

    urgent, young, old = reload(urgent), reload(young), reload(old)
    assert urgent.state == TaskState.RUNNING and urgent.node == task_world.nodes["h1"]
    assert old.state == TaskState.RUNNING  # two hours of run are not thrown away
    assert young.state == TaskState.QUEUED and live(young) is None
    assert young.backend_handle == "" and young.pool is None
    assert stopped == [young_handle]
    [preemption] = Preemption.objects.filter(task=young)
    assert preemption.preempted_by == urgent and preemption.nodes == ["h1"]
    assert 600 <= preemption.billed_seconds <= 602
    [meter] = Meter.objects.filter(workload_id=young.workload_id)
    assert meter.ended_at == preemption.at  # billed up to the preemption, not further
    assert "Preempted, requeued: stopped after" in young.logs
    [placement] = Placement.objects.filter(workload__task=urgent)
    assert f"#{young.pk}" in placement.describe() and "fewest" in placement.describe()


def test_a_requeued_task_starts_again_when_room_comes_back(
    task_world, django_capture_on_commit_callbacks, stopped
):
    victim = running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    older = running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    ran_for(older, 3600)  # the victim lost fewer seconds
    with django_capture_on_commit_callbacks(execute=True):
        urgent = task_world.submit(accelerator_milli=4000)
    victim = reload(victim)
    assert victim.state == TaskState.QUEUED

    task_world.node("h2", pool="east-h100")
    task_world.schedule()

    assert reload(victim).state == TaskState.PLACED
    assert reload(urgent).state == TaskState.RUNNING


def test_preemptible_tasks_never_preempt_and_nothing_is_preempted_when_room_is_free(
    task_world, django_capture_on_commit_callbacks, stopped
):
    running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    with django_capture_on_commit_callbacks(execute=True):
        cheap = task_world.submit(accelerator_milli=4000, preemptible=True)

    assert reload(cheap).state == TaskState.QUEUED
    assert preempt_for_waiting(park=task_world.park) == []
    assert stopped == []


def test_a_task_of_higher_priority_is_not_preempted_by_a_lower_one(
    task_world, django_capture_on_commit_callbacks, stopped
):
    running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    with django_capture_on_commit_callbacks(execute=True):
        low = task_world.submit(accelerator_milli=4000, priority=-5)

    assert reload(low).state == TaskState.QUEUED
    assert not Preemption.objects.exists()


def test_no_preemption_for_a_task_its_quota_holds_back(
    task_world, django_capture_on_commit_callbacks, stopped
):
    running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    other, other_owner = verified_org(task_world)
    QuotaLimit.objects.create(
        park=task_world.park, organization=other, resource=QuotaResource.ACCELERATORS, limit=2
    )
    with django_capture_on_commit_callbacks(execute=True):
        over = task_world.submit(organization=other, actor=other_owner, accelerator_milli=4000)

    assert reload(over).state == TaskState.QUEUED
    assert not Preemption.objects.exists() and stopped == []


def test_a_gang_preempts_on_as_many_nodes_as_it_needs(
    task_world, django_capture_on_commit_callbacks, stopped
):
    from tests.orchestration.test_scheduling import hold_cards

    hold_cards(task_world.nodes["h1"], 8)
    for name in ("g1", "g2"):
        task_world.node(name, pool="east-h100", accelerators=4)
    first = running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    second = running(task_world, django_capture_on_commit_callbacks, preemptible=True)

    with django_capture_on_commit_callbacks(execute=True):
        gang = task_world.submit(node_count=2, accelerator_milli=2000, vcpu=4, ram_gb=16)

    assert reload(gang).state == TaskState.RUNNING
    assert {reload(first).state, reload(second).state} == {TaskState.QUEUED}
    assert Preemption.objects.filter(preempted_by=gang).count() == 2


def test_a_preemptible_task_pays_the_parks_discounted_price(task_world, operator):
    set_scheduling_policy(park=task_world.park, operator=operator, preemptible_discount_pct=40)
    cheap = task_world.submit(accelerator_milli=2000, preemptible=True)
    full = task_world.submit(accelerator_milli=2000)

    task_world.schedule()

    assert reload(full).hourly_minor == 4000  # 2000 per card-hour × 2 cards
    assert reload(cheap).hourly_minor == 2400  # 40 % less
    assert SchedulingPolicy.objects.get(park=task_world.park).preemptible_discount_pct == 40


def test_a_preemptible_tasks_maximum_price_is_weighed_at_the_discount(task_world):
    # 2000 per card-hour, 30 % off by default: 1400 is under a maximum of 1500.
    cheap = task_world.submit(preemptible=True, max_hourly_minor=1500)

    task_world.schedule()

    assert reload(cheap).state == TaskState.PLACED and reload(cheap).hourly_minor == 1400


@pytest.mark.parametrize("discount", [-1, 91, "x", 12.5])
def test_the_discount_is_a_whole_percent_up_to_90(task_world, operator, discount):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as error:
        set_scheduling_policy(
            park=task_world.park, operator=operator, preemptible_discount_pct=discount
        )
    assert "preemptible_discount_pct" in error.value.message_dict


def test_the_task_page_and_the_api_show_the_preemption(
    task_world, django_capture_on_commit_callbacks, stopped, client
):
    victim = running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    older = running(task_world, django_capture_on_commit_callbacks, preemptible=True)
    ran_for(older, 3600)  # the victim lost fewer seconds
    with django_capture_on_commit_callbacks(execute=True):
        urgent = task_world.submit(accelerator_milli=4000)
    client.force_login(task_world.owner)

    page = client.get(f"/tasks/{victim.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()

    assert "Preempted, requeued at" in page and f"task #{urgent.pk}" in page
    from apps.api.serializers.tasks import TaskSerializer

    data = TaskSerializer(reload(victim)).data
    assert data["preemptible"] is True
    assert [p["preempted_by"] for p in data["preemptions"]] == [urgent.pk]
