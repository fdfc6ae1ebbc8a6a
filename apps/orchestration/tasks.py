"""Celery tasks that call backend drivers and report the outcome to the order services.

Each task reloads its rows by primary key and re-checks their state (it may run late, or twice).
Transient backend errors are retried with exponential backoff; a permanent one is reported as
the instance's error, with the backend's message.
"""

from celery import shared_task

from apps.orchestration.backends.base import BackendError, HostSpec
from apps.orchestration.backends.registry import get_driver
from apps.orchestration.services import device_indices
from apps.orders import services as orders
from apps.orders.models import Instance, InstanceState, Order, OrderKind, OrderState

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
