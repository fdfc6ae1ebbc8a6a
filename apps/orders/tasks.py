"""Jobs that call a host's backend driver and report the outcome to the order services.

Each job reloads its rows by primary key and re-checks their state (it may run late, or twice).
Transient backend errors are retried with exponential backoff; a permanent one is reported as
the instance's error, with the backend's message.
"""

from celery import shared_task

from apps.orchestration.backends.base import BackendError
from apps.orchestration.tasks import MAX_RETRIES, retry_if_transient
from apps.orders import operations, services
from apps.orders.hosts import host_driver, host_spec
from apps.orders.models import Instance, InstanceState, Order, OrderState


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def provision_instance(self, instance_id: int) -> None:
    instance = Instance.objects.select_related("pool__backend", "node", "image", "flavor").get(
        pk=instance_id
    )
    if instance.state != InstanceState.PROVISIONING:
        return
    try:
        access = host_driver(instance).provision(host_spec(instance))
    except BackendError as exc:
        retry_if_transient(self, exc)
        services.fail_instance(instance_id=instance_id, message=str(exc))
        return
    services.complete_provisioning(
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
    # A host never provisioned (released from error before it ran) has nothing to call.
    if instance.pool is not None and instance.backend_handle:
        try:
            operations.OPERATIONS[order.kind].call(host_driver(instance), instance, order)
        except BackendError as exc:
            retry_if_transient(self, exc)
            operations.fail_operation(order_id=order_id, message=str(exc))
            return
    operations.complete_operation(order_id=order_id)
