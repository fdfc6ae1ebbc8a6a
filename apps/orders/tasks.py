"""Jobs that call a host's backend driver and report the outcome to the order services, the
idle policy's pass (beat, every 5 minutes) and the owners' notices about their hosts.

Each job reloads its rows by primary key and re-checks their state (it may run late, or twice).
Transient backend errors are retried with exponential backoff; a permanent one is reported as
the instance's error, with the backend's message.
"""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation

from apps.orchestration.backends.base import BackendError
from apps.orchestration.tasks import MAX_RETRIES, retry_if_transient
from apps.orders import idle, operations, services
from apps.orders.hosts import host_driver, host_spec
from apps.orders.models import Instance, InstanceState, Order, OrderKind, OrderState
from apps.tenants.models import Role

NOTICE_KINDS = ("idle", "idle_stopped", "force_released")


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


@shared_task
def reconcile_hosts() -> int:
    """Beat, every minute: send again the jobs of hosts and operations left waiting longer than
    LOAM_RECONCILE_AFTER_S (a worker killed mid-call, a message the broker lost, a dispatch that
    failed at commit). Safe to repeat: each job re-checks state under a lock before it reports,
    and a driver's calls are idempotent (provisioning a host that exists returns it, releasing
    one that is gone succeeds), so what was done is not done twice. Returns how many it sent."""
    stuck_before = timezone.now() - timedelta(seconds=settings.LOAM_RECONCILE_AFTER_S)
    stuck_hosts = Instance.objects.filter(
        state=InstanceState.PROVISIONING, updated_at__lt=stuck_before
    ).values_list("pk", flat=True)
    stuck_operations = (
        Order.objects.filter(state=OrderState.FULFILLING, updated_at__lt=stuck_before)
        .exclude(kind=OrderKind.CREATE)
        .values_list("pk", flat=True)
    )
    stuck_hosts, stuck_operations = list(stuck_hosts), list(stuck_operations)
    for instance_id in stuck_hosts:
        provision_instance.delay(instance_id)
    for order_id in stuck_operations:
        fulfil_order.delay(order_id)
    return len(stuck_hosts) + len(stuck_operations)


@shared_task
def enforce_idle_policies() -> int:
    """Stop hosts idle past their park's threshold where its idle policy says so."""
    return len(idle.enforce_idle_policies())


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_instance_notice(instance_id: int, kind: str, reason: str = "") -> int:
    """Mail the organization's owners about their instance; returns how many were written to.
    `reason` is the operator's (force_released) or the policy's threshold in minutes
    (idle_stopped)."""
    if kind not in NOTICE_KINDS:
        raise ValueError(f"unknown notice {kind!r}")
    instance = (
        Instance.objects.select_related("organization__park", "node", "flavor")
        .filter(pk=instance_id)
        .first()
    )
    if instance is None:
        return 0
    recipients = sorted(
        {
            m.user.email
            for m in instance.organization.memberships.filter(role=Role.OWNER).select_related(
                "user"
            )
            if m.user.email
        }
    )
    if not recipients:
        return 0
    reading = idle.idle_reading(instance) if kind == "idle" else None
    with translation.override(settings.LANGUAGE_CODE):
        context = {
            "instance": instance,
            "kind": kind,
            "reason": reason,
            "idle_since": reading[0] if reading else None,
            "url": settings.LOAM_BASE_URL
            + reverse("orders:instance_detail", kwargs={"instance_id": instance.pk}),
        }
        subject = render_to_string("orders/email/instance_notice_subject.txt", context)
        body = render_to_string("orders/email/instance_notice_body.txt", context)
    send_mail(" ".join(subject.split()), body, None, recipients)
    return len(recipients)
