"""move_instance / move_order / move_task: every allowed transition of the tables in
apps.orders.models moves the row and writes an audit event; every other pair is refused with
InvalidTransition and leaves the row and the audit log as they were."""

import pytest
from django.utils import timezone

from apps.core.errors import InvalidTransition
from apps.core.models import AuditEvent
from apps.orchestration.models import TASK_TRANSITIONS, Task, TaskState
from apps.orchestration.scheduling import move_task
from apps.orders.models import (
    INSTANCE_TRANSITIONS,
    ORDER_TRANSITIONS,
    Instance,
    InstanceState,
    Order,
    OrderState,
)
from apps.orders.services import move_instance, move_order
from tests.factories import InstanceFactory, OrderFactory, TaskFactory, UserFactory

pytestmark = pytest.mark.django_db


def allowed_pairs(table):
    return sorted((str(src), str(dst)) for src, targets in table.items() for dst in targets)


def refused_pairs(table, states):
    return sorted(
        (str(src), str(dst)) for src in states for dst in states if dst not in table.get(src, ())
    )


def events_for(obj):
    return AuditEvent.objects.filter(object_type=obj._meta.label_lower, object_id=str(obj.pk))


def assert_one_event(obj, *, action, data, actor):
    event = events_for(obj).get()
    assert event.action == action
    assert event.data == data
    assert event.actor == actor
    assert event.actor_label == (str(actor) if actor else "system")
    assert event.organization_id == obj.organization_id
    assert event.park_id == obj.organization.park_id
    assert event.object_repr == str(obj)
    return event


def test_tables_cover_every_state():
    assert set(INSTANCE_TRANSITIONS) == set(InstanceState.values)
    assert set(ORDER_TRANSITIONS) == set(OrderState.values)
    assert set(TASK_TRANSITIONS) == set(TaskState.values)


# --- instances -------------------------------------------------------------------------------


def instance_in(state):
    released_at = timezone.now() if state == InstanceState.RELEASED else None
    return InstanceFactory(state=state, released_at=released_at)


@pytest.mark.parametrize(("source", "target"), allowed_pairs(INSTANCE_TRANSITIONS))
def test_instance_allowed_transition(source, target):
    actor = UserFactory()
    instance = instance_in(source)

    moved = move_instance(instance=instance, to=target, actor=actor)

    assert moved.state == target
    assert Instance.objects.get(pk=instance.pk).state == target
    assert_one_event(
        instance, action=f"instance.{target}", data={"from": source, "to": target}, actor=actor
    )


@pytest.mark.parametrize(
    ("source", "target"), refused_pairs(INSTANCE_TRANSITIONS, InstanceState.values)
)
def test_instance_refused_transition(source, target):
    instance = instance_in(source)
    before = Instance.objects.get(pk=instance.pk)

    with pytest.raises(InvalidTransition) as excinfo:
        move_instance(instance=instance, to=target, actor=UserFactory(), error_message="boom")

    assert excinfo.value.code == "invalid_transition"
    instance.refresh_from_db()
    assert instance.state == source
    assert instance.updated_at == before.updated_at
    assert instance.released_at == before.released_at
    assert instance.error_message == ""
    assert not events_for(instance).exists()


def test_release_sets_released_at():
    instance = instance_in(InstanceState.RELEASING)
    start = timezone.now()

    move_instance(instance=instance, to=InstanceState.RELEASED)

    instance.refresh_from_db()
    assert instance.state == InstanceState.RELEASED
    assert start <= instance.released_at <= timezone.now()


@pytest.mark.parametrize("target", [InstanceState.RUNNING, InstanceState.ERROR])
def test_other_transitions_leave_released_at_empty(target):
    instance = instance_in(InstanceState.PROVISIONING)
    move_instance(instance=instance, to=target)
    instance.refresh_from_db()
    assert instance.released_at is None


def test_error_records_the_message():
    actor = UserFactory()
    instance = instance_in(InstanceState.PROVISIONING)

    move_instance(instance=instance, to=InstanceState.ERROR, actor=actor, error_message="no GPU")

    instance.refresh_from_db()
    assert instance.state == InstanceState.ERROR
    assert instance.error_message == "no GPU"
    assert_one_event(
        instance,
        action="instance.error",
        data={"from": "provisioning", "to": "error", "error": "no GPU"},
        actor=actor,
    )


def test_error_message_is_kept_when_leaving_error():
    instance = instance_in(InstanceState.PROVISIONING)
    move_instance(instance=instance, to=InstanceState.ERROR, error_message="no GPU")
    move_instance(instance=instance, to=InstanceState.RELEASING)
    instance.refresh_from_db()
    assert (instance.state, instance.error_message) == (InstanceState.RELEASING, "no GPU")


def test_transition_bumps_updated_at():
    instance = instance_in(InstanceState.PENDING)
    before = Instance.objects.get(pk=instance.pk).updated_at
    move_instance(instance=instance, to=InstanceState.PROVISIONING)
    assert Instance.objects.get(pk=instance.pk).updated_at > before


def test_transition_without_actor_is_recorded_as_system():
    instance = instance_in(InstanceState.PENDING)
    move_instance(instance=instance, to=InstanceState.PROVISIONING)
    assert_one_event(
        instance,
        action="instance.provisioning",
        data={"from": "pending", "to": "provisioning"},
        actor=None,
    )


def test_transition_reads_the_state_in_the_database_not_the_stale_object():
    instance = instance_in(InstanceState.PENDING)
    Instance.objects.filter(pk=instance.pk).update(state=InstanceState.RUNNING)
    assert instance.state == InstanceState.PENDING  # the object in hand is stale

    with pytest.raises(InvalidTransition):
        move_instance(instance=instance, to=InstanceState.PROVISIONING)
    moved = move_instance(instance=instance, to=InstanceState.STOPPING)

    assert moved.state == InstanceState.STOPPING
    assert events_for(instance).get().data == {"from": "running", "to": "stopping"}


# --- orders ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target"), allowed_pairs(ORDER_TRANSITIONS))
def test_order_allowed_transition(source, target):
    actor = UserFactory()
    order = OrderFactory(state=source)

    moved = move_order(order=order, to=target, actor=actor)

    assert moved.state == target
    assert Order.objects.get(pk=order.pk).state == target
    assert_one_event(
        order, action=f"order.{target}", data={"from": source, "to": target}, actor=actor
    )


@pytest.mark.parametrize(("source", "target"), refused_pairs(ORDER_TRANSITIONS, OrderState.values))
def test_order_refused_transition(source, target):
    order = OrderFactory(state=source)

    with pytest.raises(InvalidTransition):
        move_order(order=order, to=target, actor=UserFactory(), reason="because")

    order.refresh_from_db()
    assert order.state == source
    assert (order.reason, order.decided_by, order.decided_at) == ("", None, None)
    assert not events_for(order).exists()


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (OrderState.SUBMITTED, OrderState.APPROVED),
        (OrderState.AWAITING_APPROVAL, OrderState.APPROVED),
        (OrderState.AWAITING_APPROVAL, OrderState.REJECTED),
    ],
)
def test_decision_by_an_actor_is_recorded(source, target):
    operator = UserFactory()
    order = OrderFactory(state=source)
    start = timezone.now()

    move_order(order=order, to=target, actor=operator)

    order.refresh_from_db()
    assert order.decided_by == operator
    assert start <= order.decided_at <= timezone.now()


def test_decision_without_actor_leaves_decider_empty():
    order = OrderFactory(state=OrderState.SUBMITTED)
    move_order(order=order, to=OrderState.APPROVED)
    order.refresh_from_db()
    assert (order.state, order.decided_by, order.decided_at) == (OrderState.APPROVED, None, None)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (OrderState.SUBMITTED, OrderState.AWAITING_APPROVAL),
        (OrderState.SUBMITTED, OrderState.CANCELLED),
        (OrderState.APPROVED, OrderState.FULFILLING),
        (OrderState.FULFILLING, OrderState.DONE),
    ],
)
def test_non_decisions_leave_decider_empty(source, target):
    order = OrderFactory(state=source)
    move_order(order=order, to=target, actor=UserFactory())
    order.refresh_from_db()
    assert (order.decided_by, order.decided_at) == (None, None)


def test_reason_is_saved_and_audited():
    actor = UserFactory()
    order = OrderFactory(state=OrderState.AWAITING_APPROVAL)

    move_order(order=order, to=OrderState.REJECTED, actor=actor, reason="quota exceeded")

    order.refresh_from_db()
    assert order.reason == "quota exceeded"
    assert_one_event(
        order,
        action="order.rejected",
        data={"from": "awaiting_approval", "to": "rejected", "reason": "quota exceeded"},
        actor=actor,
    )


def test_transition_without_reason_keeps_the_earlier_reason():
    order = OrderFactory(state=OrderState.SUBMITTED, reason="urgent")
    move_order(order=order, to=OrderState.AWAITING_APPROVAL)
    order.refresh_from_db()
    assert order.reason == "urgent"


def test_order_for_an_instance_moves_too():
    order = OrderFactory(for_instance=True, state=OrderState.APPROVED)
    move_order(order=order, to=OrderState.FULFILLING)
    assert Order.objects.get(pk=order.pk).state == OrderState.FULFILLING


# --- tasks -----------------------------------------------------------------------------------

TASK_FINISHED = {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED}


def task_in(state):
    now = timezone.now()
    started = now if state == TaskState.RUNNING or state in TASK_FINISHED else None
    finished = now if state in TASK_FINISHED else None
    return TaskFactory(state=state, started_at=started, finished_at=finished)


@pytest.mark.parametrize(("source", "target"), allowed_pairs(TASK_TRANSITIONS))
def test_task_allowed_transition(source, target):
    actor = UserFactory()
    task = task_in(source)

    moved = move_task(task=task, to=target, actor=actor)

    assert moved.state == target
    assert Task.objects.get(pk=task.pk).state == target
    assert_one_event(
        task, action=f"task.{target}", data={"from": source, "to": target}, actor=actor
    )


@pytest.mark.parametrize(("source", "target"), refused_pairs(TASK_TRANSITIONS, TaskState.values))
def test_task_refused_transition(source, target):
    task = task_in(source)
    before = Task.objects.get(pk=task.pk)

    with pytest.raises(InvalidTransition):
        move_task(task=task, to=target, actor=UserFactory())

    task.refresh_from_db()
    assert task.state == source
    assert (task.started_at, task.finished_at) == (before.started_at, before.finished_at)
    assert not events_for(task).exists()


def test_running_sets_started_at():
    task = task_in(TaskState.PLACED)
    start = timezone.now()

    move_task(task=task, to=TaskState.RUNNING)

    task.refresh_from_db()
    assert start <= task.started_at <= timezone.now()
    assert task.finished_at is None


@pytest.mark.parametrize("target", sorted(TASK_FINISHED))
def test_finishing_a_running_task_keeps_its_start(target):
    task = task_in(TaskState.PLACED)
    running = move_task(task=task, to=TaskState.RUNNING)

    move_task(task=running, to=target)

    finished = Task.objects.get(pk=task.pk)
    assert finished.started_at == running.started_at
    assert finished.finished_at >= running.started_at


@pytest.mark.parametrize("target", sorted(TASK_FINISHED))
def test_finishing_through_a_stale_object_keeps_the_start(target):
    task = task_in(TaskState.PLACED)
    move_task(task=task, to=TaskState.RUNNING)  # `task` in hand still says placed, no start
    started_at = Task.objects.get(pk=task.pk).started_at

    move_task(task=task, to=target)

    assert Task.objects.get(pk=task.pk).started_at == started_at


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (TaskState.QUEUED, TaskState.CANCELLED),
        (TaskState.QUEUED, TaskState.FAILED),
        (TaskState.PLACED, TaskState.CANCELLED),
        (TaskState.PLACED, TaskState.FAILED),
    ],
)
def test_finishing_a_task_that_never_ran_sets_both_times(source, target):
    task = task_in(source)
    start = timezone.now()

    move_task(task=task, to=target)

    task.refresh_from_db()
    assert task.started_at == task.finished_at
    assert start <= task.finished_at <= timezone.now()


def test_requeue_sets_no_times():
    task = task_in(TaskState.PLACED)
    move_task(task=task, to=TaskState.QUEUED)
    task.refresh_from_db()
    assert (task.state, task.started_at, task.finished_at) == (TaskState.QUEUED, None, None)
