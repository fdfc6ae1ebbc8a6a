"""Idle hosts and what the park does about them.

A running instance is idle when its accelerators all read idle in the backend's telemetry
(`Node.telemetry`, written by `apps.orchestration.services.probe_backend`) for long enough.
Operators (and the park's idle policy) act on tenants' instances here: force-release with a
reason, tell the owners that a host is idle, stop idle hosts. Stopping and releasing are the
hosts' own operations (`request_operation`), as for a tenant: the park acts as a named
`SystemActor` ("park-operator:<username>", "idle-policy"), which the role matrix lets act in
any organization, so the checks, state moves, backend call and metering are exactly a
tenant's. The operator and the reason are recorded in the audit log and mailed to the owners.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Prefetch
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.models import AuditEvent
from apps.core.transactions import locked, on_commit_task
from apps.orchestration.models import Accelerator, Allocation, Node
from apps.orchestration.services import TELEMETRY_FRESH_FOR
from apps.orders.models import (
    INSTANCE_BUSY_STATES,
    INSTANCE_HOLDING_STATES,
    IdlePolicy,
    Instance,
    InstanceState,
    Order,
    OrderKind,
)
from apps.orders.operations import request_operation
from apps.orders.services import fail_instance
from apps.tenants.access import SystemActor, require_operator

DEFAULT_THRESHOLD_MINUTES = IdlePolicy._meta.get_field("threshold_minutes").default


@dataclass(frozen=True)
class IdleInstance:
    instance: Instance
    idle_since: datetime
    utilization_pct: float
    threshold_minutes: int
    last_notice_at: datetime | None = None

    @property
    def idle_minutes(self) -> int:
        return int((timezone.now() - self.idle_since).total_seconds() // 60)


def with_live_devices(instances):
    devices = Accelerator.objects.order_by("index")
    live = Allocation.objects.filter(released_at__isnull=True).prefetch_related(
        Prefetch("accelerators", queryset=devices)
    )
    return instances.prefetch_related(Prefetch("allocations", queryset=live, to_attr="live"))


def idle_reading(instance: Instance, *, now=None) -> tuple[datetime, float] | None:
    """(idle since, mean utilization) when every accelerator the instance holds reads idle in
    fresh telemetry; None otherwise. Needs `with_live_devices` (or it queries)."""
    node = instance.node
    if node is None or instance.state != InstanceState.RUNNING:
        return None
    live = getattr(instance, "live", None)
    if live is None:
        live = list(with_live_devices(Instance.objects.filter(pk=instance.pk)).get().live)
    held = [
        (allocation.created_at, device.index)
        for allocation in live
        for device in allocation.accelerators.all()
    ]
    return _reading(_fresh_cards(node.telemetry, now or timezone.now()), held)


def _fresh_cards(telemetry: dict | None, now: datetime) -> dict | None:
    """A node's cards' readings by index, when its telemetry is fresh; None otherwise."""
    telemetry = telemetry or {}
    updated = parse_datetime(telemetry.get("updated_at") or "")
    if updated is None or now - updated > TELEMETRY_FRESH_FOR:
        return None
    return telemetry.get("accelerators") or {}


def _reading(cards: dict | None, held: list[tuple[datetime, int]]) -> tuple[datetime, float] | None:
    """(idle since, mean utilization) of the cards `held` ((allocated at, index) pairs) of a node
    whose fresh readings are `cards`, when all of them read idle; None otherwise."""
    if cards is None or not held:
        return None
    # A device may have idled before this instance got it: the instance idles from then on.
    since, utils = [max(created_at for created_at, _index in held)], []
    for _created_at, index in held:
        reading = cards.get(str(index)) or {}
        start = parse_datetime(reading.get("idle_since") or "")
        if start is None:
            return None
        since.append(start)
        utils.append(float(reading.get("util") or 0))
    return max(since), round(sum(utils) / len(utils), 1)


def idle_policies(parks) -> dict[int, IdlePolicy]:
    return {policy.park_id: policy for policy in IdlePolicy.objects.filter(park__in=parks)}


def idle_instances(parks, *, min_minutes: int | None = None, now=None) -> list[IdleInstance]:
    """Running instances of the parks idle for at least `min_minutes` (default: each park's
    policy threshold), longest idle first, with when their owners were last told.

    Read as plain values first (a park may run thousands of hosts, few of them idle): the
    nodes' telemetry once per node, the cards each running host holds; whole instances are
    loaded only for the hosts found idle."""
    now = now or timezone.now()
    policies = idle_policies(parks)
    running = Instance.objects.filter(
        organization__park__in=parks, state=InstanceState.RUNNING, node__isnull=False
    )
    nodes = Node.objects.filter(pk__in=running.values("node_id")).values_list("pk", "telemetry")
    fresh = {
        node_id: cards
        for node_id, telemetry in nodes
        if (cards := _fresh_cards(telemetry, now)) is not None
    }
    held: dict[int, list[tuple[datetime, int]]] = defaultdict(list)
    where: dict[int, tuple[int, int]] = {}  # instance -> (its node, its park)
    for instance_id, node_id, park_id, created_at, index in (
        Allocation.objects.filter(
            released_at__isnull=True,
            instance__in=running.filter(node_id__in=fresh),
            accelerators__isnull=False,
        )
        .values_list(
            "instance_id",
            "instance__node_id",
            "instance__organization__park_id",
            "created_at",
            "accelerators__index",
        )
        .order_by()
    ):
        held[instance_id].append((created_at, index))
        where[instance_id] = (node_id, park_id)
    found: dict[int, tuple[tuple[datetime, float], int]] = {}
    for instance_id, cards in held.items():
        node_id, park_id = where[instance_id]
        reading = _reading(fresh[node_id], cards)
        if reading is None:
            continue
        policy = policies.get(park_id)
        threshold = policy.threshold_minutes if policy else DEFAULT_THRESHOLD_MINUTES
        wanted = threshold if min_minutes is None else min_minutes
        if now - reading[0] >= timedelta(minutes=wanted):
            found[instance_id] = (reading, threshold)
    instances = Instance.objects.filter(pk__in=found).select_related(
        "organization__park", "flavor", "region", "node__pool"
    )
    notices = dict(
        AuditEvent.objects.filter(
            action="instance.idle_notice",
            object_type=Instance._meta.label_lower,
            object_id__in=[str(pk) for pk in found],
        )
        .values_list("object_id")
        .annotate(last=Max("created_at"))
        .order_by()
    )
    rows = [
        IdleInstance(
            instance=instance,
            idle_since=found[instance.pk][0][0],
            utilization_pct=found[instance.pk][0][1],
            threshold_minutes=found[instance.pk][1],
            last_notice_at=notices.get(str(instance.pk)),
        )
        for instance in instances
    ]
    return sorted(rows, key=lambda row: (row.idle_since, row.instance.pk))


# --- what the park does -----------------------------------------------------------------------


@transaction.atomic(durable=True)
def set_idle_policy(*, park, operator, threshold_minutes: int, auto_stop: bool) -> IdlePolicy:
    require_operator(operator, park, _("Only this park's operators may change its policy."))
    policy = IdlePolicy.objects.filter(park=park).first() or IdlePolicy(park=park)
    policy.threshold_minutes, policy.auto_stop = threshold_minutes, auto_stop
    policy.full_clean(exclude=["park"])
    policy.save()
    record_event(
        action="park.idle_policy",
        actor=operator,
        target=park,
        data={"threshold_minutes": threshold_minutes, "auto_stop": auto_stop},
    )
    return policy


IDLE_POLICY = SystemActor("idle-policy")
REASON_MAX_LENGTH = 1000


def park_operator(operator) -> SystemActor:
    """The park acting through one of its operators, named so in the order's audit events."""
    return SystemActor(f"park-operator:{operator.get_username()}")


@transaction.atomic(durable=True)
def force_release(*, instance: Instance, operator, reason: str) -> Order:
    """An operator releases a tenant's host (running, stopped or in error); the owners are
    mailed the reason. Refused, like a tenant's release, while another operation runs, unless
    that operation is stuck (waiting longer than LOAM_RECONCILE_AFTER_S): then it is given up
    first, so no host is ever beyond release."""
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
    # One transaction, the host locked first (as each step locks it): a stuck operation given
    # up is never left without the release that follows it.
    instance = locked(Instance, instance.pk)
    if _stuck(instance):
        # Its job never reported (see the reconciliation sweep): give up on that operation,
        # keeping the cards (the backend may run the host) until the release is confirmed.
        fail_instance(
            instance_id=instance.pk,
            message=_("Stuck; released by the park's operators: %(reason)s") % {"reason": reason},
            keep_capacity=True,
        )
    order = request_operation(
        instance=instance, actor=park_operator(operator), kind=OrderKind.RELEASE, reason=reason
    )
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


@transaction.atomic(durable=True)
def stop_idle_instance(*, instance: Instance, policy: IdlePolicy) -> Order:
    """The park's idle policy stops a host that stayed idle past its threshold."""
    order = request_operation(
        instance=instance,
        actor=IDLE_POLICY,
        kind=OrderKind.STOP,
        reason=_("Idle for more than %(minutes)d minutes; stopped by the park's idle policy.")
        % {"minutes": policy.threshold_minutes},
    )
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


def _stuck(instance: Instance) -> bool:
    busy = INSTANCE_BUSY_STATES - {InstanceState.PENDING}  # pending waits for approval
    waited = timezone.now() - instance.updated_at
    return instance.state in busy and waited.total_seconds() > settings.LOAM_RECONCILE_AFTER_S


def tell_owners_of_drained_node(node, reason: str) -> int:
    """Mail the owners of every host on a node the operators just drained (their hosts keep
    running; the node takes nothing new, usually ahead of maintenance). Returns how many hosts."""
    hosts = list(Instance.objects.filter(node=node, state__in=INSTANCE_HOLDING_STATES))
    for instance in hosts:
        _mail_owners(instance, "node_drained", reason)
    return len(hosts)


def _mail_owners(instance: Instance, kind: str, reason: str) -> None:
    from apps.orders.tasks import send_instance_notice

    on_commit_task(send_instance_notice, instance.pk, kind, reason)
