"""State transitions of instances, orders and tasks. Use cases (submit, approve, resize, ...)
build on these; nothing else assigns a state field."""

from django.db import transaction
from django.utils import timezone

from apps.core.transitions import transition
from apps.orders.models import (
    INSTANCE_TRANSITIONS,
    ORDER_TRANSITIONS,
    TASK_TRANSITIONS,
    Instance,
    InstanceState,
    Order,
    OrderState,
    Task,
    TaskState,
)


@transaction.atomic
def move_instance(*, instance: Instance, to: str, actor=None, error_message: str = "") -> Instance:
    changes = {}
    if to == InstanceState.ERROR:
        changes["error_message"] = error_message
    if to == InstanceState.RELEASED:
        changes["released_at"] = timezone.now()
    return transition(
        instance,
        to,
        table=INSTANCE_TRANSITIONS,
        actor=actor,
        changes=changes,
        audit_data={"error": error_message} if error_message else None,
    )


@transaction.atomic
def move_order(*, order: Order, to: str, actor=None, reason: str = "") -> Order:
    changes = {"reason": reason} if reason else {}
    if to in (OrderState.APPROVED, OrderState.REJECTED) and actor is not None:
        changes.update(decided_by=actor, decided_at=timezone.now())
    return transition(
        order,
        to,
        table=ORDER_TRANSITIONS,
        actor=actor,
        changes=changes,
        audit_data={"reason": reason} if reason else None,
    )


@transaction.atomic
def move_task(*, task: Task, to: str, actor=None) -> Task:
    now = timezone.now()

    def timestamps(locked: Task) -> dict:
        if to == TaskState.RUNNING:
            return {"started_at": now}
        if to in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED):
            # A task cancelled before it ran still gets a start, so its duration is zero.
            return {"finished_at": now, "started_at": locked.started_at or now}
        return {}

    return transition(task, to, table=TASK_TRANSITIONS, actor=actor, changes=timestamps)
