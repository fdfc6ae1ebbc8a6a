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

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Prefetch
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from apps.core import sql
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.models import AuditEvent
from apps.core.transactions import locked, on_commit_task
from apps.orchestration.models import Accelerator, Allocation
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
    return instances.select_related("workload").prefetch_related(
        Prefetch("workload__allocations", queryset=live, to_attr="live")
    )


def idle_reading(instance: Instance, *, now=None) -> tuple[datetime, float] | None:
    """(idle since, mean utilization) when every accelerator the instance holds reads idle in
    fresh telemetry; None otherwise. Needs `with_live_devices` (or it queries)."""
    node = instance.node
    if node is None or instance.state != InstanceState.RUNNING:
        return None
    live = getattr(instance.workload, "live", None)
    if live is None:
        live = with_live_devices(Instance.objects.filter(pk=instance.pk)).get().workload.live
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
    policy threshold), longest idle first, with when their owners were last told."""
    return idle_rows(idle_candidates(parks, min_minutes=min_minutes, now=now))


@dataclass(frozen=True)
class IdleCandidate:
    """A host found idle, before its instance is loaded (a page shows a few of thousands)."""

    instance_id: int
    idle_since: datetime
    utilization_pct: float
    threshold_minutes: int


def idle_candidates(parks, *, min_minutes: int | None = None, now=None) -> list[IdleCandidate]:
    """The running hosts of the parks whose cards all read idle, in fresh telemetry, for at
    least `min_minutes` (default: each park's policy threshold), longest idle first: found in
    the database (one statement, `_IDLE_SQL`, over the readings kept in columns beside the
    telemetry), so that no busy host, nor any host on a node with stale telemetry, is read
    here at all."""
    now = now or timezone.now()
    park_ids = [getattr(park, "pk", park) for park in parks]
    if not park_ids:
        return []
    policies = idle_policies(park_ids)
    thresholds = {
        park_id: policies[park_id].threshold_minutes
        if park_id in policies
        else DEFAULT_THRESHOLD_MINUTES
        for park_id in park_ids
    }
    # Each park's latest moment a host may have gone idle at, in seconds since the epoch.
    stamp = now.timestamp()
    cutoffs = {
        park_id: stamp - 60 * (threshold if min_minutes is None else min_minutes)
        for park_id, threshold in thresholds.items()
    }
    cutoff_sql = "CASE park_id {} END".format(" ".join(["WHEN %s THEN %s"] * len(cutoffs)))
    spelled = _IDLE_SQL_SPELLINGS[connection.vendor]
    statement = _IDLE_SQL.format(parks=sql.placeholders(park_ids), cutoff=cutoff_sql, **spelled)
    params = [
        *park_ids,
        connection.ops.adapt_datetimefield_value(now - TELEMETRY_FRESH_FOR),
        InstanceState.RUNNING,
        *[value for pair in cutoffs.items() for value in pair],
    ]
    return [
        IdleCandidate(
            instance_id=instance_id,
            idle_since=datetime.fromtimestamp(float(since), tz=UTC),
            utilization_pct=round(float(utilization), 1),
            threshold_minutes=thresholds[park_id],
        )
        for instance_id, park_id, since, utilization in sql.fetch_all(Instance, statement, params)
    ]


# The running hosts of the parks' organizations whose every held card reads idle
# (`Accelerator.idle_since`, kept with the telemetry) on a node with fresh telemetry
# (`Node.telemetry_at`), since the park's cutoff (in seconds since the epoch). Read from the
# idle held cards up (index `accelerator_held_idle`), an allocation with a card that reads busy
# left out by one probe (`accelerator_held_busy`): a busy host's rows are never joined, and no
# telemetry is decoded.
_IDLE_SQL = """
SELECT i.id, o.park_id, {greatest}(MAX({epoch_idle_since}), {epoch_held_from}) AS since,
    AVG(COALESCE(acc.utilization_pct, 0))
FROM orchestration_accelerator acc
JOIN orchestration_allocation a ON a.id = acc.allocation_id AND a.released_at IS NULL
JOIN orders_instance i ON i.workload_id = a.workload_id AND i.node_id = acc.node_id
JOIN orchestration_node n ON n.id = acc.node_id
JOIN tenants_organization o ON o.id = i.organization_id
WHERE acc.allocation_id IS NOT NULL AND acc.idle_since IS NOT NULL
    AND o.park_id IN ({parks}) AND n.telemetry_at >= %s AND i.state = %s
    AND NOT EXISTS (
        SELECT 1 FROM orchestration_accelerator busy
        WHERE busy.allocation_id = a.id AND busy.idle_since IS NULL
    )
GROUP BY i.id, o.park_id, a.id, a.created_at
HAVING {greatest}(MAX({epoch_idle_since}), {epoch_held_from}) <= {cutoff}
ORDER BY since, i.id
"""

_SQLITE_EPOCH = "(julianday({}) - 2440587.5) * 86400.0"
_IDLE_SQL_SPELLINGS = {
    "postgresql": {
        "epoch_idle_since": "EXTRACT(EPOCH FROM acc.idle_since)",
        "epoch_held_from": "EXTRACT(EPOCH FROM a.created_at)",
        "greatest": "GREATEST",
    },
    "sqlite": {
        "epoch_idle_since": _SQLITE_EPOCH.format("acc.idle_since"),
        "epoch_held_from": _SQLITE_EPOCH.format("a.created_at"),
        "greatest": "MAX",
    },
}


def idle_rows(candidates: list[IdleCandidate], *, instances=None) -> list[IdleInstance]:
    """The candidates' instances (in the candidates' order) and when their owners were last
    told: two queries, whatever their number. `instances`: the queryset to load them from (a
    page loads the few columns it shows); by default whole, with what the idle policy reads."""
    ids = [candidate.instance_id for candidate in candidates]
    if instances is None:
        instances = Instance.objects.select_related(
            "organization__park", "flavor", "region", "node__pool"
        )
    instances = instances.filter(pk__in=ids)
    by_id = {instance.pk: instance for instance in instances} if ids else {}
    notices = (
        dict(
            AuditEvent.objects.filter(
                action="instance.idle_notice",
                object_type=Instance._meta.label_lower,
                object_id__in=[str(pk) for pk in ids],
            )
            .values_list("object_id")
            .annotate(last=Max("created_at"))
            .order_by()
        )
        if ids
        else {}
    )
    return [
        IdleInstance(
            instance=by_id[candidate.instance_id],
            idle_since=candidate.idle_since,
            utilization_pct=candidate.utilization_pct,
            threshold_minutes=candidate.threshold_minutes,
            last_notice_at=notices.get(str(candidate.instance_id)),
        )
        for candidate in candidates
        if candidate.instance_id in by_id  # released between the two reads
    ]


# --- what the park does -----------------------------------------------------------------------


@transaction.atomic(durable=True)
def set_idle_policy(
    *,
    park,
    operator,
    threshold_minutes: int,
    auto_stop: bool,
    release_stopped_after_days: int | None = None,
) -> IdlePolicy:
    """The park's host policy: idle hosts, and (when given) after how many days stopped hosts
    are released (`apps.orders.expiry`; 0: never)."""
    require_operator(operator, park, _("Only this park's operators may change its policy."))
    policy = IdlePolicy.objects.filter(park=park).first() or IdlePolicy(park=park)
    policy.threshold_minutes, policy.auto_stop = threshold_minutes, auto_stop
    if release_stopped_after_days is not None:
        policy.release_stopped_after_days = release_stopped_after_days
    policy.full_clean(exclude=["park"])
    policy.save()
    record_event(
        action="park.idle_policy",
        actor=operator,
        target=park,
        data={
            "threshold_minutes": threshold_minutes,
            "auto_stop": auto_stop,
            "release_stopped_after_days": policy.release_stopped_after_days,
        },
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
