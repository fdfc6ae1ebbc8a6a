"""Celery tasks that call backend drivers and report the outcome to the order services (hosts)
and to apps.orchestration.scheduling (training tasks).

Each task reloads its rows by primary key and re-checks their state (it may run late, or twice).
Transient backend errors are retried with exponential backoff; a permanent one is reported as
the instance's error, with the backend's message.
"""

from celery import shared_task

from apps.orchestration import scheduling
from apps.orchestration.backends.base import TASK_SUCCEEDED, BackendError, HostSpec, TaskSpec
from apps.orchestration.backends.registry import get_driver
from apps.orchestration.services import device_indices
from apps.orders import services as orders
from apps.orders.models import (
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
    Task,
    TaskState,
)
from apps.tenants.models import Park

MAX_RETRIES = 5
RETRY_BASE_SECONDS = 2


def driver_for(instance: Instance):
    backend = instance.pool.backend
    return get_driver(backend.driver, backend.config)


def host_spec(instance: Instance, flavor=None) -> HostSpec:
    flavor = flavor or instance.flavor
    return HostSpec(
        name=instance.name,
        node=instance.node.hostname,
        accelerator_indices=device_indices(instance),
        vcpu=flavor.vcpu,
        ram_gb=flavor.ram_gb,
        system_disk_gb=instance.system_disk_gb,
        data_disk_gb=instance.data_disk_gb,
        bandwidth_mbps=instance.bandwidth_mbps,
        image=instance.image.code,
        ssh_public_key=instance.ssh_public_key,
    )


def _retry_or_raise(task, exc: BackendError):
    if exc.transient and task.request.retries < MAX_RETRIES:
        raise task.retry(exc=exc, countdown=RETRY_BASE_SECONDS * 2**task.request.retries)


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def provision_instance(self, instance_id: int) -> None:
    instance = Instance.objects.select_related("pool__backend", "node", "image", "flavor").get(
        pk=instance_id
    )
    if instance.state != InstanceState.PROVISIONING:
        return
    try:
        access = driver_for(instance).provision(host_spec(instance))
    except BackendError as exc:
        _retry_or_raise(self, exc)
        orders.fail_instance(instance_id=instance_id, message=str(exc))
        return
    orders.complete_provisioning(
        instance_id=instance_id,
        handle=access.handle,
        access={
            "address": access.address,
            "ssh_port": access.ssh_port,
            "ssh_user": access.ssh_user,
        },
    )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def fulfil_order(self, order_id: int) -> None:
    order = Order.objects.select_related(
        "instance__pool__backend", "instance__node", "instance__image", "instance__flavor__family"
    ).get(pk=order_id)
    if order.state != OrderState.FULFILLING:
        return
    instance = order.instance
    try:
        _call_backend(order, instance)
    except BackendError as exc:
        _retry_or_raise(self, exc)
        orders.fail_operation(order_id=order_id, message=str(exc))
        return
    orders.complete_operation(order_id=order_id)


def _call_backend(order: Order, instance: Instance) -> None:
    if instance.pool is None or not instance.backend_handle:
        return  # never provisioned (e.g. released from error before it ran): nothing to call
    driver, handle, to = driver_for(instance), instance.backend_handle, order.parameters.get("to")
    if order.kind == OrderKind.STOP:
        driver.stop(handle)
    elif order.kind == OrderKind.START:
        driver.start(handle)
    elif order.kind == OrderKind.RESIZE:
        target = instance.flavor.family.flavors.get(code=to)
        driver.resize(handle, host_spec(instance, flavor=target))
    elif order.kind == OrderKind.EXPAND_DISK:
        driver.set_disk(handle, to)
    elif order.kind == OrderKind.SET_BANDWIDTH:
        driver.set_bandwidth(handle, to)
    elif order.kind == OrderKind.RELEASE:
        driver.release(handle)


# --- training tasks --------------------------------------------------------------------------


def task_driver(task: Task):
    backend = task.pool.backend
    return get_driver(backend.driver, backend.config)


def task_spec(task: Task) -> TaskSpec:
    return TaskSpec(
        name=task.name,
        node=task.node.hostname,
        accelerator_indices=scheduling.task_device_indices(task),
        accelerator_milli=task.accelerator_milli,
        vcpu=task.vcpu,
        ram_gb=task.ram_gb,
        image=task.image.code,
        command=task.command,
    )


def _load_task(task_id: int) -> Task:
    return Task.objects.select_related("pool__backend", "node", "image", "organization").get(
        pk=task_id
    )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def run_task(self, task_id: int) -> None:
    """Hand a placed task to its backend (placed → running), then look at it once: a task
    that is already done (the simulator's quick ones) ends here, the others on a later pass."""
    task = _load_task(task_id)
    if task.state != TaskState.PLACED:
        return
    try:
        handle = task_driver(task).run_task(task_spec(task))
    except BackendError as exc:
        _retry_or_raise(self, exc)
        scheduling.finish_task(task_id=task_id, succeeded=False, message=str(exc))
        return
    if scheduling.task_started(task_id=task_id, handle=handle) is not None:
        poll_task(task_id)


def poll_task(task_id: int) -> None:
    """Ask the backend how a running task does: keep its logs, end it when it is done. A
    transient error waits for the next pass; a permanent one fails the task."""
    task = _load_task(task_id)
    if task.state != TaskState.RUNNING or not task.backend_handle:
        return
    try:
        status = task_driver(task).poll_task(task.backend_handle)
    except BackendError as exc:
        if not exc.transient:
            scheduling.finish_task(task_id=task_id, succeeded=False, message=str(exc))
        return
    if not status.finished:
        scheduling.task_progress(task_id=task_id, logs=status.logs)
        return
    scheduling.finish_task(
        task_id=task_id,
        succeeded=status.state == TASK_SUCCEEDED,
        logs=status.logs,
        message=status.message,
    )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def cancel_backend_task(self, task_id: int) -> None:
    """Tell the backend a cancelled task is to stop (the portal already gave its capacity
    back)."""
    task = _load_task(task_id)
    if task.state != TaskState.CANCELLED or not task.backend_handle or task.pool is None:
        return
    try:
        task_driver(task).cancel_task(task.backend_handle)
    except BackendError as exc:
        _retry_or_raise(self, exc)


@shared_task
def schedule_park_queue(park_id: int) -> None:
    """One queue pass for one park (after a submit, a cancel or a finish)."""
    scheduling.schedule_queue_pass(park=Park.objects.get(pk=park_id))


@shared_task
def schedule_queues() -> int:
    """Every pass (beat): look at every running task, then run each park's queue pass.
    Returns how many parks had tasks in flight."""
    running = Task.objects.filter(state=TaskState.RUNNING).values_list("pk", flat=True)
    for task_id in list(running):
        poll_task(task_id)
    parks = Park.objects.filter(organizations__tasks__state=TaskState.QUEUED).distinct()
    count = 0
    for park in parks:
        scheduling.schedule_queue_pass(park=park)
        count += 1
    return count
