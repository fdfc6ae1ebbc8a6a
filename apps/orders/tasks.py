"""Jobs that call a host's backend driver and report the outcome to the order services, the
idle policy's pass (beat, every 5 minutes), scheduled stops (beat, every 30 s) and the release
of hosts left stopped (beat, hourly), the hosts' monitoring samples (beat, every minute) and the
owners' notices about their hosts.

A driver call only makes a request (backends.base.HostDriver): the job that made it looks at it
once at once, and while the backend works, a follow-up job looks again after a short countdown
and schedules the next look, so no worker waits on a backend. A request not done within
LOAM_HOST_REQUEST_TIMEOUT_S fails as a permanent backend error would.

Each job reloads its rows by primary key and re-checks their state (it may run late, or twice).
Transient backend errors are retried with exponential backoff; a permanent one is reported as
the instance's error, with the backend's message.
"""

import time
from collections.abc import Callable
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from apps.orchestration.backends.base import BackendError, HostDriver, HostRequestStatus
from apps.orchestration.tasks import MAX_RETRIES, retry_if_transient
from apps.orders import expiry, idle, monitoring, operations, services, shared_storage
from apps.orders.hosts import host_driver, host_spec
from apps.orders.models import Instance, InstanceState, Order, OrderKind, OrderState
from apps.tenants.models import Role

NOTICE_KINDS = (
    "idle",
    "idle_stopped",
    "force_released",
    "node_drained",
    "release_notice",
    "auto_released",
)

# A request is looked at again after half the time it has taken so far, within these bounds:
# a quick backend is seen done soon after it is, a slow one is not asked every half second.
POLL_MIN_S = 0.5
POLL_MAX_S = 10.0
POLL_SHARE = 0.5


def poll_countdown(waited_s: float) -> float:
    return min(POLL_MAX_S, max(POLL_MIN_S, waited_s * POLL_SHARE))


def _load_instance(instance_id: int) -> Instance:
    return Instance.objects.select_related("pool__backend", "node", "image", "flavor").get(
        pk=instance_id
    )


def _load_order(order_id: int) -> Order:
    return Order.objects.select_related(
        "instance__pool__backend", "instance__node", "instance__image", "instance__flavor__family"
    ).get(pk=order_id)


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def provision_instance(self, instance_id: int) -> None:
    instance = _load_instance(instance_id)
    if instance.state != InstanceState.PROVISIONING:
        return
    driver = host_driver(instance)
    try:
        shared_storage.provide_for(instance)
        request = driver.provision(host_spec(instance))
    except BackendError as exc:
        retry_if_transient(self, exc)
        services.fail_instance(instance_id=instance_id, message=str(exc))
        return
    _follow_provisioning(self, instance_id, driver, request, time.time())


@shared_task(bind=True, acks_late=True)
def follow_provisioning(self, instance_id: int, request: str, requested_at: float) -> None:
    """Look again at a host's provisioning request (`requested_at`: epoch seconds)."""
    instance = _load_instance(instance_id)
    if instance.state != InstanceState.PROVISIONING:
        return  # reported by a duplicate look, or force-released meanwhile
    _follow_provisioning(self, instance_id, host_driver(instance), request, requested_at)


def _access(status: HostRequestStatus) -> dict | None:
    access = status.access
    if access is None:
        return None
    where = {"address": access.address, "ssh_port": access.ssh_port, "ssh_user": access.ssh_user}
    return where | ({"ssh_host_keys": list(access.ssh_host_keys)} if access.ssh_host_keys else {})


def _follow_provisioning(
    job, instance_id: int, driver: HostDriver, request: str, requested_at: float
) -> None:
    def complete(status: HostRequestStatus) -> None:
        services.complete_provisioning(
            instance_id=instance_id, handle=status.access.handle, access=_access(status)
        )

    def fail(message: str) -> None:
        services.fail_instance(instance_id=instance_id, message=message)

    _follow(
        job,
        driver,
        request,
        requested_at,
        complete=complete,
        fail=fail,
        too_late=lambda seconds: (
            _("The backend did not finish creating the host within %(seconds)d seconds.")
            % {"seconds": seconds}
        ),
        again=(follow_provisioning, (instance_id, request, requested_at)),
    )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def fulfil_order(self, order_id: int) -> None:
    order = _load_order(order_id)
    if order.state != OrderState.FULFILLING:
        return
    instance = order.instance
    # A host never provisioned (released from error before it ran) has nothing to call.
    if instance.pool is None or not instance.backend_handle:
        operations.complete_operation(order_id=order_id)
        return
    driver = host_driver(instance)
    try:
        if order.kind == OrderKind.START:
            shared_storage.provide_for(instance)
        request = operations.OPERATIONS[order.kind].call(driver, instance, order)
    except BackendError as exc:
        retry_if_transient(self, exc)
        operations.fail_operation(order_id=order_id, message=str(exc))
        return
    _follow_operation(self, order, driver, request, time.time())


@shared_task(bind=True, acks_late=True)
def follow_operation(self, order_id: int, request: str, requested_at: float) -> None:
    """Look again at the backend request of a host operation (`requested_at`: epoch seconds)."""
    order = _load_order(order_id)
    if order.state != OrderState.FULFILLING:
        return  # reported by a duplicate look
    _follow_operation(self, order, host_driver(order.instance), request, requested_at)


def _follow_operation(
    job, order: Order, driver: HostDriver, request: str, requested_at: float
) -> None:
    order_id = order.pk
    _follow(
        job,
        driver,
        request,
        requested_at,
        complete=lambda status: operations.complete_operation(
            order_id=order_id, access=_access(status)
        ),
        fail=lambda message: operations.fail_operation(order_id=order_id, message=message),
        too_late=lambda seconds: (
            _("The backend did not finish “%(operation)s” within %(seconds)d seconds.")
            % {"operation": OrderKind(order.kind).label, "seconds": seconds}
        ),
        again=(follow_operation, (order_id, request, requested_at)),
    )


def _follow(
    job,
    driver: HostDriver,
    request: str,
    requested_at: float,
    *,
    complete: Callable[[HostRequestStatus], object],
    fail: Callable[[str], object],
    too_late: Callable[[int], str],
    again: tuple,
) -> None:
    """Look at a backend request once: report it done or failed, fail it past the deadline,
    or send `again` (a follow-up job and its arguments, `requested_at` the last) to look
    later."""
    try:
        status = driver.host_request_status(request)
    except BackendError as exc:
        if not exc.transient:
            fail(str(exc))
            return
        status = HostRequestStatus(done=False)  # no answer now: ask on the next look
    if status.done:
        complete(status)
        return
    if status.progress_at is not None and status.progress_at > requested_at:
        # Slow but moving (an image copied to its server): the deadline counts from then.
        follow_job, args = again
        requested_at = status.progress_at
        again = (follow_job, (*args[:-1], requested_at))
    waited = time.time() - requested_at
    if waited >= settings.LOAM_HOST_REQUEST_TIMEOUT_S:
        fail(too_late(settings.LOAM_HOST_REQUEST_TIMEOUT_S))
        return
    follow_job, args = again
    _send_later(job, follow_job, args, countdown=poll_countdown(waited))


def _send_later(job, follow_job, args: tuple, *, countdown: float) -> None:
    """Send the follow-up to the queue `job` came from (a deployment may route host jobs to
    their own queue). Eager mode (tests, a server without a worker) runs what it is sent at
    once, ignoring the countdown, so the wait happens here."""
    delivery = job.request.delivery_info or {}
    exchange, routing_key = delivery.get("exchange"), delivery.get("routing_key")
    if exchange:
        route = {"exchange": exchange, "routing_key": routing_key}
    elif routing_key:  # sent through the default exchange: the key names the queue
        route = {"queue": routing_key}
    else:
        route = {}
    if job.app.conf.task_always_eager:
        time.sleep(countdown)
    follow_job.apply_async(args, countdown=countdown, **route)


@shared_task
def reconcile_hosts() -> int:
    """Beat, every minute: send again the jobs of hosts and operations left waiting longer than
    LOAM_RECONCILE_AFTER_S (a worker killed mid-call, a message the broker lost — the request's
    or one of its follow-up looks — a dispatch that failed at commit). A live chain of looks
    ends within LOAM_HOST_REQUEST_TIMEOUT_S, which is shorter, so only a lost one is sent again;
    what is sent again is marked as updated now, so the next sweeps leave its new chain alone.
    Safe to repeat: each job re-checks state under a lock before it reports, and a driver's
    requests are idempotent (provisioning a host that exists returns it, releasing one that is
    gone succeeds), so what was done is not done twice. Returns how many it sent."""
    now = timezone.now()
    stuck_before = now - timedelta(seconds=settings.LOAM_RECONCILE_AFTER_S)
    stuck_hosts = Instance.objects.filter(
        state=InstanceState.PROVISIONING, updated_at__lt=stuck_before
    ).values_list("pk", flat=True)
    stuck_operations = (
        Order.objects.filter(state=OrderState.FULFILLING, updated_at__lt=stuck_before)
        .exclude(kind=OrderKind.CREATE)
        .values_list("pk", flat=True)
    )
    stuck_hosts, stuck_operations = list(stuck_hosts), list(stuck_operations)
    Instance.objects.filter(pk__in=stuck_hosts).update(updated_at=now)
    Order.objects.filter(pk__in=stuck_operations).update(updated_at=now)
    for instance_id in stuck_hosts:
        provision_instance.delay(instance_id)
    for order_id in stuck_operations:
        fulfil_order.delay(order_id)
    return len(stuck_hosts) + len(stuck_operations)


@shared_task
def enforce_idle_policies() -> int:
    """Stop hosts idle past their park's threshold where its idle policy says so."""
    return len(idle.enforce_idle_policies())


@shared_task
def stop_scheduled_hosts() -> int:
    """Beat, every 30 s: stop the hosts whose scheduled stop has come (within a minute of it)."""
    return len(expiry.stop_due_hosts())


@shared_task
def release_stopped_hosts() -> dict:
    """Beat, hourly: release hosts stopped past their park's days, and tell owners before."""
    return expiry.release_stopped_hosts()


@shared_task
def sample_hosts() -> dict:
    """Beat, every minute: a monitoring sample of each running host whose backend's driver has
    METRICS, and samples past LOAM_HOST_SAMPLES_KEPT_S pruned (`monitoring.sample_hosts`)."""
    return monitoring.sample_hosts()


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_instance_notice(instance_id: int, kind: str, reason: str = "") -> int:
    """Mail the organization's owners about their instance; returns how many were written to.
    `reason` is the operator's (force_released, node_drained), the policy's threshold in
    minutes (idle_stopped) or days (auto_released), or when the host is released, in ISO 8601
    (release_notice)."""
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
            "release_at": parse_datetime(reason) if kind == "release_notice" else None,
            "url": settings.LOAM_BASE_URL
            + reverse("orders:instance_detail", kwargs={"instance_id": instance.pk}),
        }
        subject = render_to_string("orders/email/instance_notice_subject.txt", context)
        body = render_to_string("orders/email/instance_notice_body.txt", context)
    send_mail(" ".join(subject.split()), body, None, recipients)
    return len(recipients)
