"""Lifecycle operations on a host — stop, start, resize, expand the disk, change bandwidth,
release — as one table: what each may start from, what it reserves, how its backend is called,
what completing it changes and what a failure gives back. A new operation is one row here.

Each is an Order: reserved in the requesting transaction, requested from the backend after
commit by `apps.orders.tasks.fulfil_order`, followed there until the backend is done, and
reported back with `complete_operation` or `fail_operation`.
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from apps.catalog.models import Flavor, PriceKind
from apps.catalog.selectors import price_in_force
from apps.core.audit import audit_identity, record_event
from apps.core.errors import DomainError, InvalidTransition
from apps.core.transactions import on_commit_task
from apps.orchestration.backends.base import Capability
from apps.orchestration.reservations import release, reserve
from apps.orchestration.services import require_capability, shape_of
from apps.orders import meters
from apps.orders.hosts import host_spec
from apps.orders.models import Instance, InstanceState, Order, OrderKind, OrderState
from apps.orders.services import (
    MAX_BANDWIDTH_MBPS,
    MAX_DATA_DISK_GB,
    fail_instance,
    lock_host,
    move_instance,
    move_order,
    not_priced,
    notify,
    order_event,
)
from apps.orders.without_cards import check_without_cards, no_card_shape, no_card_spec
from apps.quotas.services import Usage, demand_for
from apps.storage import services as storage
from apps.tenants.access import authorize
from apps.tenants.roles import Action

_I = InstanceState
UP_OR_DOWN = frozenset({_I.RUNNING, _I.STOPPED})
# What a start or a resize asks of the wallet: a balance to run on (`billing.funds_needed`).
RUNNING_BALANCE = 1


@dataclass(frozen=True)
class Operation:
    allowed_from: frozenset
    busy_state: str | None  # the instance's state while the backend works, if it has one
    action: str  # what the actor's role must allow
    # Checks the parameters and reserves what the operation needs (in the requesting
    # transaction, through `orchestration.reservations.reserve`); returns what the order
    # records.
    reserve: Callable[[Instance, dict], dict]
    # The backend request: (driver, instance, order) -> the request's handle, to follow.
    call: Callable[..., str]
    # Applies the change to the (locked) instance once the backend did it.
    complete: Callable[[Instance, Order], None]
    # A failed disk or bandwidth change fails alone (the host is as it was); any other failure
    # leaves the host in error and gives back its accelerators.
    fails_alone: bool = False


def _nothing_to_reserve(instance: Instance, params: dict) -> dict:
    return {}


def _record_how_it_ran(instance: Instance, params: dict) -> dict:
    """A stop records a host that ran without its cards, which the stop clears
    (`_complete_stop`): a start on its behalf later (funds.resume_suspended) starts it so again."""
    return {"without_cards": True} if instance.without_cards else {}


def _reserve_start(instance: Instance, params: dict) -> dict:
    """A stopped host holds no accelerators (it gave them back when it stopped): it takes its
    flavor's again on its own node, or the start is refused while that node has no room.
    `without_cards` (无卡模式): no card, a small share of CPU and memory, at the region's
    no-card price in force now."""
    reservation = reserve(organization=instance.organization, funds_minor=RUNNING_BALANCE)
    if params.get("without_cards"):
        price = check_without_cards(instance)
        reservation.start(instance, no_card_shape(instance.flavor))
        return {"without_cards": True, "no_card_hourly_minor": price.amount_minor}
    reservation.start(instance, shape_of(instance.flavor))
    return {}


def _start_spec(instance: Instance, order: Order):
    spec = host_spec(instance)
    return no_card_spec(spec) if order.parameters.get("without_cards") else spec


def _complete_start(instance: Instance, order: Order) -> None:
    """Running, with its cards or without (its meter at the no-card price then)."""
    without_cards = bool(order.parameters.get("without_cards"))
    fields = {"without_cards": without_cards}
    if without_cards and instance.rates:
        price = order.parameters["no_card_hourly_minor"]
        fields["rates"] = {**instance.rates, "no_card_hour": price}
    Instance.objects.filter(pk=instance.pk).update(**fields)
    move_instance(instance=Instance.objects.get(pk=instance.pk), to=InstanceState.RUNNING)


def _reserve_resize(instance: Instance, params: dict) -> dict:
    if instance.without_cards:
        raise InvalidTransition(
            _("%(name)s runs without its cards: stop it and start it normally to resize it.")
            % {"name": instance.name}
        )
    target = params.get("flavor")
    if not isinstance(target, Flavor):
        raise ValidationError({"flavor": _("Choose the size to resize to.")})
    if target.family_id != instance.flavor.family_id:
        raise DomainError(
            _(
                "%(target)s is in another spec family than %(current)s: an instance resizes "
                "only within its family (%(family)s)."
            )
            % {
                "target": target.code,
                "current": instance.flavor.code,
                "family": instance.flavor.family.name,
            },
            code="wrong_family",
            status=422,
        )
    if target.pk == instance.flavor_id or not target.is_active:
        raise ValidationError({"flavor": _("Choose another size that is on sale.")})
    price = price_in_force(region=instance.region, kind=PriceKind.FLAVOR_HOUR, flavor=target)
    if price is None:
        raise not_priced(target, instance.region)
    grow = demand_for(flavor=target, system_disk_gb=0, data_disk_gb=0) - demand_for(
        flavor=instance.flavor, system_disk_gb=0, data_disk_gb=0
    )
    reservation = reserve(
        organization=instance.organization, demand=grow.positive(), funds_minor=RUNNING_BALANCE
    )
    if target.accelerator_count > instance.flavor.accelerator_count:
        reservation.resize(instance, shape_of(target))
    # The quota for the larger size is held by this open order (orders.selectors.pending_growth).
    return {
        "from": instance.flavor.code,
        "to": target.code,
        "resume": instance.state,
        # The new size's price in force now is the one it runs at.
        "flavor_hourly_minor": price.amount_minor,
    }


def _reserve_disk(instance: Instance, params: dict) -> dict:
    size = _int_param(params, "data_disk_gb")
    if size <= instance.data_disk_gb:
        raise ValidationError(
            {
                "data_disk_gb": _("A cloud disk only grows: choose more than %(size)d GB.")
                % {"size": instance.data_disk_gb}
            }
        )
    if size > MAX_DATA_DISK_GB:
        raise ValidationError(
            {
                "data_disk_gb": _("The cloud disk can be at most %(max)d GB.")
                % {"max": MAX_DATA_DISK_GB}
            }
        )
    # Where it is a volume, the volume grows (its server grows it while the host is stopped,
    # which the backend's expand does), counted in the host's disk quota as it was ordered.
    storage.grow_data_disk(workload_id=instance.workload_id, actor=None, size_gb=size)
    reserve(organization=instance.organization, demand=Usage(disk_gb=size - instance.data_disk_gb))
    return {"from": instance.data_disk_gb, "to": size}


def _reserve_release(instance: Instance, params: dict) -> dict:
    """The tenant's choice for the host's data disk where it is a volume: kept as a volume of
    its own, or deleted with the host (the default). A release that says nothing (the park's
    auto-release) leaves the tenant's earlier choice."""
    keep = params.get("keep_data_disk")
    if keep is None or (not keep and not storage.has_data_disk(instance.workload_id)):
        return {}
    storage.choose_data_disk_fate(workload_id=instance.workload_id, actor=None, keep=keep)
    return {"keep_data_disk": keep}


def _check_bandwidth(instance: Instance, params: dict) -> dict:
    mbps = _int_param(params, "bandwidth_mbps")
    if not 0 <= mbps <= MAX_BANDWIDTH_MBPS:
        raise ValidationError(
            {"bandwidth_mbps": _("Bandwidth must be 0–%(max)d Mbps.") % {"max": MAX_BANDWIDTH_MBPS}}
        )
    if mbps == instance.bandwidth_mbps:
        raise ValidationError({"bandwidth_mbps": _("That is the current bandwidth.")})
    return {"from": instance.bandwidth_mbps, "to": mbps}


def _int_param(params: dict, name: str) -> int:
    try:
        return int(params.get(name))
    except (TypeError, ValueError):
        raise ValidationError({name: _("Enter a whole number.")}) from None


def _resize_target(instance: Instance, order: Order) -> Flavor:
    return Flavor.objects.get(family=instance.flavor.family, code=order.parameters["to"])


def _complete_resize(instance: Instance, order: Order) -> None:
    target = _resize_target(instance, order)
    # Shrinking gives accelerators back now; growing takes the vCPU and memory now.
    reserve(organization=instance.organization).resize(instance, shape_of(target))
    rates = dict(instance.rates)
    if rates:
        rates["flavor_hour"] = order.parameters["flavor_hourly_minor"]
    Instance.objects.filter(pk=instance.pk).update(flavor=target, rates=rates)
    back_to = order.parameters.get("resume", InstanceState.RUNNING)
    move_instance(instance=Instance.objects.get(pk=instance.pk), to=back_to)


def _set_and_meter(field: str) -> Callable[[Instance, Order], None]:
    def complete(instance: Instance, order: Order) -> None:
        setattr(instance, field, order.parameters["to"])
        instance.save(update_fields=[field, "updated_at"])
        meters.follow_instance(instance)

    return complete


def _complete_release(instance: Instance, order: Order) -> None:
    # The move (its hold: the wallet) before the cards (the node), in the order an order
    # locks them (`fail_instance`).
    move_instance(instance=instance, to=InstanceState.RELEASED)
    release(instance)


def _complete_stop(instance: Instance, order: Order) -> None:
    """A stopped host gives its accelerators, CPU and memory back to its node (and pays for its
    disks only); `_reserve_start` takes them again."""
    release(instance)
    if instance.without_cards:
        Instance.objects.filter(pk=instance.pk).update(without_cards=False)
        instance.without_cards = False
    move_instance(instance=instance, to=InstanceState.STOPPED)


OPERATIONS: dict[str, Operation] = {
    OrderKind.STOP: Operation(
        allowed_from=frozenset({_I.RUNNING}),
        busy_state=_I.STOPPING,
        action=Action.ORDER,
        reserve=_record_how_it_ran,
        call=lambda driver, instance, order: driver.stop(instance.backend_handle),
        complete=_complete_stop,
    ),
    OrderKind.START: Operation(
        allowed_from=frozenset({_I.STOPPED}),
        busy_state=_I.STARTING,
        action=Action.ORDER,
        reserve=_reserve_start,
        call=lambda driver, instance, order: driver.start(
            instance.backend_handle, _start_spec(instance, order)
        ),
        complete=_complete_start,
    ),
    OrderKind.RESIZE: Operation(
        allowed_from=UP_OR_DOWN,
        busy_state=_I.RESIZING,
        action=Action.ORDER,
        reserve=_reserve_resize,
        call=lambda driver, instance, order: driver.resize(
            instance.backend_handle, host_spec(instance, flavor=_resize_target(instance, order))
        ),
        complete=_complete_resize,
    ),
    OrderKind.EXPAND_DISK: Operation(
        allowed_from=UP_OR_DOWN,
        busy_state=None,
        action=Action.ORDER,
        reserve=_reserve_disk,
        call=lambda driver, instance, order: driver.set_disk(
            instance.backend_handle, order.parameters["to"]
        ),
        complete=_set_and_meter("data_disk_gb"),
        fails_alone=True,
    ),
    OrderKind.SET_BANDWIDTH: Operation(
        allowed_from=UP_OR_DOWN,
        busy_state=None,
        action=Action.ORDER,
        reserve=_check_bandwidth,
        call=lambda driver, instance, order: driver.set_bandwidth(
            instance.backend_handle, order.parameters["to"]
        ),
        complete=_set_and_meter("bandwidth_mbps"),
        fails_alone=True,
    ),
    OrderKind.RELEASE: Operation(
        allowed_from=frozenset({_I.RUNNING, _I.STOPPED, _I.ERROR}),
        busy_state=_I.RELEASING,
        action=Action.RELEASE,
        reserve=_reserve_release,
        call=lambda driver, instance, order: driver.release(instance.backend_handle),
        complete=_complete_release,
    ),
}


def operation_key(key: str) -> str:
    return f"{key}:op"


@transaction.atomic  # force_release gives up a stuck operation and asks this in one transaction
def request_operation(
    *,
    instance: Instance,
    actor,
    kind: str,
    params: dict | None = None,
    idempotency_key: str = "",
    reason: str = "",
) -> Order:
    """Stop, start, resize, expand the disk, change bandwidth or release: one order each.

    What the operation needs (quota, accelerators for a larger size) is reserved here, in this
    transaction; the backend call runs after commit and reports back.
    """
    from apps.orders.tasks import fulfil_order

    params = params or {}
    operation = OPERATIONS[kind]
    authorize(actor, instance.organization, operation.action)
    instance = lock_host(instance.pk, related=("flavor__family", "pool__backend"))
    if idempotency_key:  # checked under the instance's lock: a concurrent retry replays
        earlier = Order.objects.filter(
            organization=instance.organization, idempotency_key=operation_key(idempotency_key)
        ).first()
        if earlier:
            return earlier
    if instance.orders.filter(state__in=[OrderState.FULFILLING, OrderState.APPROVED]).exists():
        raise InvalidTransition(
            _("%(name)s has an operation in progress; wait for it to finish.")
            % {"name": instance.name}
        )
    if instance.state not in operation.allowed_from:
        raise InvalidTransition(
            _("%(name)s is %(state)s, so “%(operation)s” is not possible now.")
            % {
                "name": instance.name,
                "state": instance.get_state_display(),
                "operation": OrderKind(kind).label,
            }
        )
    if instance.pool is not None:
        require_capability(instance.pool.backend, Capability.HOSTS)
    parameters = operation.reserve(instance, params)
    order = Order.objects.create(
        organization=instance.organization,
        kind=kind,
        instance=instance,
        parameters=parameters,
        currency=instance.organization.park.currency,
        idempotency_key=operation_key(idempotency_key) if idempotency_key else "",
        reason=reason,  # why an operator or a park policy did it, for the tenant to read
        created_by=audit_identity(actor)[0],
    )
    record_event(
        action="order.submitted",
        actor=actor,
        target=order,
        data={"kind": kind, "instance": instance.name, **parameters},
    )
    notify(instance.organization, "order.submitted", order_event(order))
    move_order(order=order, to=OrderState.APPROVED)
    move_order(order=order, to=OrderState.FULFILLING)
    if operation.busy_state:
        move_instance(instance=instance, to=operation.busy_state, actor=actor)
    on_commit_task(fulfil_order, order.pk)
    return Order.objects.get(pk=order.pk)


@transaction.atomic(durable=True)
def complete_operation(*, order_id: int, access: dict | None = None) -> Order | None:
    """The backend did it: apply the change to the instance and close the order. `access`:
    where the host answers now, when the backend says (a host started again may have moved)."""
    instance = _lock_instance_of(order_id)
    order = Order.objects.select_related("instance__flavor").get(pk=order_id)
    if order.state != OrderState.FULFILLING:
        return None
    if access and access != instance.access and order.kind != OrderKind.RELEASE:
        instance.access = access
        instance.save(update_fields=["access", "updated_at"])
    OPERATIONS[order.kind].complete(instance, order)
    return move_order(order=order, to=OrderState.DONE)


@transaction.atomic(durable=True)
def fail_operation(*, order_id: int, message: str) -> Order | None:
    """The backend refused an operation for good. Disk and bandwidth changes fail alone (the
    host is as it was); a failed stop, start, resize or release leaves the host in error,
    holding its cards until a release of it succeeds (the backend may still run it)."""
    _lock_instance_of(order_id)
    order = Order.objects.get(pk=order_id)
    if order.state != OrderState.FULFILLING:
        return None
    if OPERATIONS[order.kind].fails_alone:
        return move_order(order=order, to=OrderState.FAILED, reason=message)
    fail_instance(instance_id=order.instance_id, message=message, keep_capacity=True)
    return Order.objects.get(pk=order.pk)


def _lock_instance_of(order_id: int) -> Instance:
    """The order's host and its rows (`lock_host`), before the order is read: a host failing
    while its operation completes waits instead of deadlocking. The order is then locked if it
    is still open (an open order of the host), and an ended one never changes again."""
    instance_id = Order.objects.filter(pk=order_id).values_list("instance_id", flat=True).get()
    return lock_host(instance_id)
