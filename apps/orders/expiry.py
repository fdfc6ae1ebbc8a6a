"""When hosts stop and go on their own: the tenant's scheduled stop (定时关机) and the park's
auto-release of hosts left stopped (关机 N 天后释放).

Both act through the hosts' own operations (`request_operation`), as a named `SystemActor`
("scheduled-stop", "auto-release"), so the checks, state moves, backend call and metering are
exactly a tenant's stop or release. `Instance.stop_at` is cleared by the move to stopped
(`services.move_instance`), whatever stopped the host; `Instance.stopped_at` is set by that move
and cleared when the host starts again, so a started host's auto-release starts over.
"""

from datetime import datetime, timedelta

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError, InvalidTransition
from apps.core.models import AuditEvent
from apps.core.transactions import locked, on_commit_task
from apps.orders.models import Instance, InstanceState, Order, OrderKind
from apps.orders.operations import request_operation
from apps.orders.selectors import (
    RELEASE_NOTICE_AT_LEAST,
    release_at,
    release_days,
    release_notices,
)
from apps.tenants.access import SystemActor, authorize
from apps.tenants.models import Park
from apps.tenants.roles import Action

SCHEDULED_STOP = SystemActor("scheduled-stop")
AUTO_RELEASE = SystemActor("auto-release")

# A stop is scheduled on a host that runs, or is about to.
SCHEDULABLE_STATES = frozenset({InstanceState.RUNNING, InstanceState.STARTING})
MAX_AHEAD = timedelta(days=30)
MIN_AFTER_HOURS, MAX_AFTER_HOURS = 1, 720

MAX_RELEASE_DAYS = 365
# The owners are told this many days before their stopped host is released, once each.
NOTICE_DAYS = (3, 1)


# --- scheduled stop ---------------------------------------------------------------------------


def _stop_time(at: datetime | None, after_hours, now: datetime) -> datetime:
    if at is not None and after_hours is not None:
        raise ValidationError(
            {NON_FIELD_ERRORS: _("Give either a time or a number of hours, not both.")}
        )
    if after_hours is not None:
        if isinstance(after_hours, bool) or not isinstance(after_hours, int):
            raise ValidationError({"after_hours": _("Enter a whole number.")})
        if not MIN_AFTER_HOURS <= after_hours <= MAX_AFTER_HOURS:
            raise ValidationError(
                {
                    "after_hours": _("Stop after %(min)d–%(max)d hours.")
                    % {"min": MIN_AFTER_HOURS, "max": MAX_AFTER_HOURS}
                }
            )
        return now + timedelta(hours=after_hours)
    if timezone.is_naive(at):
        raise ValidationError({"at": _("Give the time with its time zone.")})
    if at <= now:
        raise ValidationError({"at": _("Choose a time in the future.")})
    if at > now + MAX_AHEAD:
        raise ValidationError(
            {"at": _("Choose a time at most %(days)d days ahead.") % {"days": MAX_AHEAD.days}}
        )
    return at


@transaction.atomic(durable=True)
def schedule_stop(
    *, instance: Instance, actor, at: datetime | None = None, after_hours: int | None = None
) -> Instance:
    """Stop the host at `at` (aware), or `after_hours` from now; neither: clear the schedule.
    Only a running or starting host takes one, up to 30 days ahead."""
    authorize(actor, instance.organization, Action.ORDER)
    instance = locked(Instance, instance.pk)
    if at is None and after_hours is None:
        if instance.stop_at is not None:
            # Not through save(): the host's updated_at tells how long an operation has waited.
            Instance.objects.filter(pk=instance.pk).update(stop_at=None)
            record_event(
                action="instance.stop_unscheduled",
                actor=actor,
                target=instance,
                data={"stop_at": instance.stop_at.isoformat()},
            )
            instance.stop_at = None
        return instance
    if instance.state not in SCHEDULABLE_STATES:
        raise InvalidTransition(
            _("%(name)s is %(state)s: only a running host can be scheduled to stop.")
            % {"name": instance.name, "state": instance.get_state_display()}
        )
    stop_at = _stop_time(at, after_hours, timezone.now())
    Instance.objects.filter(pk=instance.pk).update(stop_at=stop_at)
    record_event(
        action="instance.stop_scheduled",
        actor=actor,
        target=instance,
        data={"stop_at": stop_at.isoformat()},
    )
    instance.stop_at = stop_at
    return instance


@transaction.atomic(durable=True)
def stop_scheduled(*, instance_id: int, now: datetime) -> Order | None:
    """Stop one host whose scheduled stop is due, whatever the idle policy says; None when it
    is no longer due (cleared, moved on) by the time its lock is held."""
    instance = locked(Instance, instance_id)
    if instance.state != InstanceState.RUNNING or not instance.stop_at or instance.stop_at > now:
        return None
    order = request_operation(
        instance=instance,
        actor=SCHEDULED_STOP,
        kind=OrderKind.STOP,
        reason=_("Stopped at the time its owners scheduled."),
    )
    record_event(
        action="instance.scheduled_stop",
        actor=SCHEDULED_STOP,
        target=instance,
        data={"stop_at": instance.stop_at.isoformat(), "order": order.pk},
    )
    return order


def stop_due_hosts(*, now: datetime | None = None) -> list[Order]:
    """Beat: stop every running host whose scheduled stop has come. One transaction per host:
    one busy with another operation is tried again on the next run."""
    now = now or timezone.now()
    due = Instance.objects.filter(state=InstanceState.RUNNING, stop_at__lte=now).order_by(
        "stop_at", "pk"
    )
    stopped = []
    for instance_id in due.values_list("pk", flat=True):
        try:
            order = stop_scheduled(instance_id=instance_id, now=now)
        except DomainError:
            continue
        if order is not None:
            stopped.append(order)
    return stopped


# --- auto-release -----------------------------------------------------------------------------


@transaction.atomic(durable=True)
def auto_release(*, instance_id: int, days: int, now: datetime) -> Order | None:
    """Release one host stopped for more than `days`; None when it no longer is (started,
    released meanwhile) by the time its lock is held."""
    instance = locked(Instance, instance_id)
    due = release_at(instance, days)
    if due is None or due > now:
        return None
    if not release_notices(instance).filter(created_at__lte=now - RELEASE_NOTICE_AT_LEAST).exists():
        # Never without a day's notice, though the park shortened its days meanwhile.
        _notify(instance, days_before=NOTICE_DAYS[-1], due=now + RELEASE_NOTICE_AT_LEAST)
        return None
    order = request_operation(
        instance=instance,
        actor=AUTO_RELEASE,
        kind=OrderKind.RELEASE,
        reason=_("Stopped for more than %(days)d days; released by the park's policy.")
        % {"days": days},
    )
    record_event(
        action="instance.auto_released",
        actor=AUTO_RELEASE,
        target=instance,
        data={"days": days, "stopped_at": instance.stopped_at.isoformat(), "order": order.pk},
    )
    _mail_owners(instance, "auto_released", str(days))
    return order


@transaction.atomic(durable=True)
def send_release_notice(*, instance_id: int, days: int, now: datetime) -> AuditEvent | None:
    """Tell the owners that their stopped host will be released: 3 days before, then 1 day
    before, each once per stop (recorded in the audit log, which is what is checked). A notice
    missed (the job was down) is not sent late once the next one is due."""
    instance = locked(Instance, instance_id)
    due = release_at(instance, days)
    if due is None or due <= now or due - now > timedelta(days=NOTICE_DAYS[0]):
        return None
    days_before = min(d for d in NOTICE_DAYS if due - now <= timedelta(days=d))
    sent = release_notices(instance).values_list("data", flat=True)
    if any((data or {}).get("days_before", 0) <= days_before for data in sent):
        return None
    return _notify(instance, days_before=days_before, due=due)


def _notify(instance: Instance, *, days_before: int, due: datetime) -> AuditEvent:
    event = record_event(
        action="instance.release_notice",
        actor=AUTO_RELEASE,
        target=instance,
        data={"days_before": days_before, "release_at": due.isoformat()},
    )
    _mail_owners(instance, "release_notice", due.isoformat())
    return event


def release_stopped_hosts(*, now: datetime | None = None) -> dict:
    """Beat (hourly): in each park whose policy releases stopped hosts, release those stopped
    longer than its days and tell the owners of those soon due. One transaction per host."""
    now = now or timezone.now()
    released, notified = 0, 0
    for park_id, days in release_days(list(Park.objects.values_list("pk", flat=True))).items():
        if not days:
            continue
        stopped = Instance.objects.filter(
            organization__park_id=park_id, state=InstanceState.STOPPED, stopped_at__isnull=False
        ).order_by("stopped_at", "pk")
        cutoff = now - timedelta(days=days)
        for instance_id in stopped.filter(stopped_at__lte=cutoff).values_list("pk", flat=True):
            try:
                released += auto_release(instance_id=instance_id, days=days, now=now) is not None
            except DomainError:
                continue  # an operation in progress: the next run tries again
        warn_from = cutoff + timedelta(days=NOTICE_DAYS[0])
        soon = stopped.filter(stopped_at__gt=cutoff, stopped_at__lte=warn_from)
        for instance_id in soon.values_list("pk", flat=True):
            notified += send_release_notice(instance_id=instance_id, days=days, now=now) is not None
    return {"released": released, "notified": notified}


def _mail_owners(instance: Instance, kind: str, reason: str) -> None:
    from apps.orders.tasks import send_instance_notice

    on_commit_task(send_instance_notice, instance.pk, kind, reason)
