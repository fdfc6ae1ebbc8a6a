"""What operators (and the park's idle policy) do to tenants' instances: force-release with a
reason, tell the owners that a host is idle, stop idle hosts.

Stopping and releasing are the orders app's own operation (`request_operation`), as for a
tenant: the park acts as a named `SystemActor` ("park-operator:<username>", "idle-policy"),
which the role matrix lets act in any organization, so the checks, state moves, backend call
and metering are exactly a tenant's. The operator and the reason are recorded here, in the
audit log, and mailed to the organization's owners.
"""

from django.db import transaction
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.transactions import on_commit_task
from apps.operations.models import IdlePolicy
from apps.operations.selectors.idle import idle_instances, idle_reading, with_live_devices
from apps.orders.models import Instance, Order, OrderKind
from apps.orders.operations import request_operation
from apps.tenants.access import SystemActor, require_operator

IDLE_POLICY = SystemActor("idle-policy")
REASON_MAX_LENGTH = 1000


def park_operator(operator) -> SystemActor:
    """The park acting through one of its operators, named so in the order's audit events."""
    return SystemActor(f"park-operator:{operator.get_username()}")


def force_release(*, instance: Instance, operator, reason: str) -> Order:
    """An operator releases a tenant's host (running, stopped or in error); the owners are
    mailed the reason. Refused, like a tenant's release, while another operation runs."""
    require_operator(
        operator,
        instance.organization.park,
        _("Only this park's operators may release its tenants' instances."),
    )
    reason = (reason or "").strip()
    if not reason:
        raise DomainError(
            _("Say why the instance is released; its owners will read it."),
            code="reason_required",
        )
    if len(reason) > REASON_MAX_LENGTH:
        raise DomainError(
            _("Keep the reason under %(max)d characters.") % {"max": REASON_MAX_LENGTH},
            code="reason_too_long",
        )
    order = request_operation(
        instance=instance, actor=park_operator(operator), kind=OrderKind.RELEASE, reason=reason
    )
    with transaction.atomic():
        record_event(
            action="instance.force_released",
            actor=operator,
            target=instance,
            data={"reason": reason, "order": order.pk},
        )
        _mail_owners(instance, "force_released", reason)
    return order


@transaction.atomic(durable=True)
def send_idle_notice(*, instance: Instance, operator):
    """One click: mail the owners that their host has been idle, and say so in the audit."""
    require_operator(
        operator,
        instance.organization.park,
        _("Only this park's operators may write to its tenants."),
    )
    instance = with_live_devices(
        Instance.objects.select_related("organization__park", "node").filter(pk=instance.pk)
    ).get()
    reading = idle_reading(instance)
    if reading is None:
        raise DomainError(
            _("%(name)s is not idle now: its accelerators are in use, or it reports nothing.")
            % {"name": instance.name},
            code="not_idle",
        )
    since, util = reading
    event = record_event(
        action="instance.idle_notice",
        actor=operator,
        target=instance,
        data={"idle_since": since.isoformat(), "utilization_pct": util},
    )
    _mail_owners(instance, "idle", "")
    return event


def stop_idle_instance(*, instance: Instance, policy: IdlePolicy) -> Order:
    """The park's idle policy stops a host that stayed idle past its threshold."""
    order = request_operation(
        instance=instance,
        actor=IDLE_POLICY,
        kind=OrderKind.STOP,
        reason=_("Idle for more than %(minutes)d minutes; stopped by the park's idle policy.")
        % {"minutes": policy.threshold_minutes},
    )
    with transaction.atomic():
        record_event(
            action="instance.idle_stopped",
            actor=IDLE_POLICY,
            target=instance,
            data={"threshold_minutes": policy.threshold_minutes, "order": order.pk},
        )
        _mail_owners(instance, "idle_stopped", str(policy.threshold_minutes))
    return order


def enforce_idle_policies(*, now=None) -> list[Order]:
    """Stop every instance idle past its park's threshold where the park stops them on its
    own. One transaction per instance: one that cannot be stopped now is skipped."""
    stopped = []
    for policy in IdlePolicy.objects.filter(auto_stop=True).select_related("park"):
        for row in idle_instances([policy.park], now=now):
            try:
                stopped.append(stop_idle_instance(instance=row.instance, policy=policy))
            except DomainError:
                continue  # an operation in progress, or it moved on meanwhile
    return stopped


def _mail_owners(instance: Instance, kind: str, reason: str) -> None:
    from apps.operations.tasks import send_instance_notice

    on_commit_task(send_instance_notice, instance.pk, kind, reason)
