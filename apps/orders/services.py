"""Orders and instances: quoting, submitting, approving, lifecycle operations, and the state
changes the provisioning tasks report back. Nothing else assigns a state field.

Every create or operation is an Order. Quota is held by the instance rows themselves
(apps.quotas.services), accelerators by Allocation rows (apps.orchestration.services); both are
taken in the submitting transaction under row locks and given back in the transaction that
ends the instance (release, rejection, failure).
"""

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing import metering
from apps.billing import services as billing
from apps.catalog.models import Flavor, Image, PriceKind, Region
from apps.catalog.selectors import held_image_codes, region_prices_in_force, visible_images
from apps.core import sql
from apps.core.audit import audit_identity, record_event, recorded_together
from apps.core.errors import DomainError, InvalidTransition
from apps.core.transactions import (
    in_transaction,
    lock,
    lock_all,
    locked,
    locked_update_or_create,
    on_commit_task,
    share_key,
)
from apps.core.transitions import transition, write_moved
from apps.orchestration.backends.base import Capability
from apps.orchestration.backends.registry import supports
from apps.orchestration.models import TaskPreference
from apps.orchestration.reservations import HostReservation, release, reserve
from apps.orchestration.selectors import host_pools
from apps.orchestration.services import (
    NoCapacity,
    PlacementPlan,
    plan_placement,
    region_of,
    require_pools_for,
    shape_of,
)
from apps.orders import meters
from apps.orders.models import (
    INSTANCE_TRANSITIONS,
    ORDER_TERMINAL_STATES,
    ORDER_TRANSITIONS,
    ApprovalPolicy,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
    PortMapping,
    SecurityGroup,
)
from apps.orders.networking import sync_provisioned
from apps.orders.selectors import approval_policy_of, image_runs_on
from apps.orders.validation import validate_hostname, validate_ssh_public_key
from apps.quotas.services import demand_for, lock_quota_scope, quota_refusal
from apps.storage import services as storage
from apps.tenants.access import authorize, require_operator
from apps.tenants.models import Organization
from apps.tenants.roles import Action
from apps.webhooks.models import EVENT_TYPES
from apps.webhooks.services import emit_event, emitted_together
from apps.workloads.models import Workload, WorkloadKind

HOURS_PER_MONTH = metering.HOURS_PER_MONTH
MAX_COUNT = 10
MAX_SYSTEM_DISK_GB = 2048
MAX_DATA_DISK_GB = storage.MAX_VOLUME_GB  # the data disk is a volume where its server keeps them
MAX_BANDWIDTH_MBPS = 10000


# --- State transitions -----------------------------------------------------------------------


@in_transaction
def move_instance(
    *,
    instance: Instance,
    to: str,
    actor=None,
    error_message: str = "",
    held: bool = False,
    created: bool = False,
    write: bool = True,
) -> Instance:
    """`held`, `write`: see transition(); `created`: this transaction created the instance (it
    is held, and has no meters yet)."""
    if not write and to in meters.DISK_BILLED_STATES:
        raise ValueError("the meters of a host whose disk is billed read it back: write it")
    changes, now = {}, timezone.now()
    if to == InstanceState.ERROR:
        changes["error_message"] = error_message
    if to == InstanceState.RELEASED:
        changes["released_at"] = now
        # Its backend freed their public ports with the host.
        PortMapping.objects.filter(instance_id=instance.pk).delete()
        # Its volumes are kept, detached, for another host; its data disk deleted or kept, billed
        # on its own from the instant the host's disk line ends.
        storage.detach_from_released(workload_id=instance.workload_id, at=now)
    if to in SCHEDULE_ENDS_IN:
        changes["stop_at"] = None
    if to == InstanceState.STARTING:
        changes["stopped_at"] = None
    instance = transition(
        instance,
        to,
        table=INSTANCE_TRANSITIONS,
        actor=actor,
        changes=lambda row: {**changes, **_stopped_since(row, to)},
        audit_data={"error": error_message} if error_message else None,
        held=held or created,
        write=write,
    )
    # The wallet before the meters, in the order metering locks them (no deadlock).
    if to in (InstanceState.RELEASED, InstanceState.ERROR):
        billing.release_hold(instance)
    meters.follow_instance(instance, at=now, created=created)
    notify(instance.organization, f"instance.{to}", instance_event(instance))
    return instance


# A scheduled stop is done (or moot) once the host stops, by whatever path, or goes away.
SCHEDULE_ENDS_IN = frozenset(
    {InstanceState.STOPPED, InstanceState.RELEASING, InstanceState.RELEASED, InstanceState.ERROR}
)


def _stopped_since(row: Instance, to: str) -> dict:
    """A stop starts the park's auto-release clock; a stopped host resized stays stopped and
    keeps counting from its stop."""
    if to == InstanceState.STOPPED and row.state != InstanceState.RESIZING:
        return {"stopped_at": timezone.now()}
    return {}


@in_transaction
def move_order(
    *, order: Order, to: str, actor=None, reason: str = "", held: bool = False, write: bool = True
) -> Order:
    """`held`, `write`: see transition()."""
    changes = {"reason": reason} if reason else {}
    if to in (OrderState.APPROVED, OrderState.REJECTED) and actor is not None:
        changes.update(decided_by=actor, decided_at=timezone.now())
    order = transition(
        order,
        to,
        table=ORDER_TRANSITIONS,
        actor=actor,
        changes=changes,
        audit_data={"reason": reason} if reason else None,
        held=held,
        write=write,
    )
    notify(order.organization, f"order.{to}", order_event(order))
    return order


def order_event(order: Order) -> dict:
    return {
        "order": order.pk,
        "kind": order.kind,
        "state": order.state,
        "instance": order.instance_id,
        "reason": order.reason,
    }


def instance_event(instance: Instance) -> dict:
    return {
        "instance": instance.pk,
        "name": instance.name,
        "state": instance.state,
        "error": instance.error_message,
        "access": instance.access,
        "without_cards": instance.without_cards,
    }


def notify(organization, event_type: str, data: dict) -> None:
    """Partners' webhooks for the events they can subscribe to (delivered after commit)."""
    if event_type in EVENT_TYPES:
        emit_event(organization=organization, event_type=event_type, data=data)


# --- Quotes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quote:
    """What an order would cost, exactly (fractions of a minor unit are kept until billing)."""

    currency: str
    region: Region
    count: int
    flavor_hourly_minor: int
    disk_hourly_minor: Decimal
    bandwidth_hourly_minor: Decimal
    # The unit prices behind the disk and bandwidth figures, fixed on the instance it orders.
    disk_gb_month_minor: int = 0
    bandwidth_mbps_month_minor: int = 0
    # The quantities priced: cloud disk beyond the flavor's own system disk, and bandwidth.
    billed_disk_gb: int = 0
    bandwidth_mbps: int = 0

    @property
    def hourly_minor(self) -> Decimal:
        one = self.flavor_hourly_minor + self.disk_hourly_minor + self.bandwidth_hourly_minor
        return one * self.count

    @property
    def per_second_minor(self) -> Decimal:
        return self.hourly_minor / 3600

    @property
    def monthly_minor(self) -> Decimal:
        return self.hourly_minor * HOURS_PER_MONTH

    @property
    def hourly_minor_rounded(self) -> int:
        return int(self.hourly_minor.quantize(Decimal(1), rounding=ROUND_HALF_UP))

    @property
    def hold_minor(self) -> int:
        """What ordering it holds from the wallet: the first hour of every host, each rounded
        to the minor unit (as each host's order records its price)."""
        return Quote(**{**self.__dict__, "count": 1}).hourly_minor_rounded * self.count

    def as_json(self) -> dict:
        return {
            "currency": self.currency,
            "region": self.region.code,
            "count": self.count,
            "flavor_hourly_minor": self.flavor_hourly_minor,
            "disk_hourly_minor": str(self.disk_hourly_minor),
            "bandwidth_hourly_minor": str(self.bandwidth_hourly_minor),
            "hourly_minor": str(self.hourly_minor),
        }

    def rates(self) -> dict:
        return {
            "currency": self.currency,
            "flavor_hour": self.flavor_hourly_minor,
            "disk_gb_month": self.disk_gb_month_minor,
            "bandwidth_mbps_month": self.bandwidth_mbps_month_minor,
        }


@dataclass(frozen=True)
class HostRequest:
    """The shape of a new host, as the order form or the API gives it."""

    flavor: Flavor
    image: Image
    region: Region | None  # None: the scheduler chooses
    system_disk_gb: int
    data_disk_gb: int = 0
    bandwidth_mbps: int = 0
    ssh_public_key: str = ""
    name: str = ""
    count: int = 1
    # What the scheduler favours among the nodes that fit (DESIGN.md, Scheduling).
    preference: str = TaskPreference.BALANCED
    # Its ingress rules; None: the organization's default group.
    security_group: SecurityGroup | None = None

    @classmethod
    def from_data(cls, data) -> "HostRequest":
        """From a form's or a serializer's cleaned data (the system disk defaults to the
        flavor's own)."""
        flavor = data["flavor"]
        return cls(
            flavor=flavor,
            image=data["image"],
            region=data.get("region"),
            system_disk_gb=data.get("system_disk_gb") or flavor.system_disk_gb,
            data_disk_gb=data.get("data_disk_gb") or 0,
            bandwidth_mbps=data.get("bandwidth_mbps") or 0,
            ssh_public_key=data.get("ssh_public_key", ""),
            name=data.get("name", ""),
            count=data.get("count") or 1,
            preference=data.get("preference") or TaskPreference.BALANCED,
            security_group=data.get("security_group"),
        )


def not_priced(flavor, region) -> DomainError:
    return DomainError(
        _("%(flavor)s has no price in %(region)s; it is not sold there.")
        % {"flavor": flavor.code, "region": region.name},
        code="not_priced",
    )


def _demand(request: HostRequest, quoted: Quote):
    """What an order of `request`, quoted `quoted`, asks of the quotas."""
    return demand_for(
        flavor=request.flavor,
        system_disk_gb=request.system_disk_gb,
        data_disk_gb=request.data_disk_gb,
        count=request.count,
        hourly_minor=quoted.hourly_minor_rounded,  # what the monthly spend limit counts
    )


def quota_warning(*, organization: Organization, request: HostRequest, quoted: Quote) -> str | None:
    """Why ordering `request` now would be refused for a quota (None: it fits), for its quote:
    said before the order is sent. The order counts again under the quota's locks."""
    return quota_refusal(organization=organization, demand=_demand(request, quoted))


def quote(
    *, organization: Organization, request: HostRequest, plan: PlacementPlan | None = None
) -> Quote:
    """What `request` costs. Letting the scheduler choose, the host is quoted where the
    scheduler would place it now, scored over every region with the tenant's preference: `plan`
    is that scoring when the caller has it (an order places the host with the same plan)."""
    region = request.region
    if region is None:
        plan = plan or plan_placement(
            park=organization.park,
            flavor=request.flavor,
            preference=request.preference,
            image_code=request.image.code,
        )
        region = region_of(plan, request.flavor)
    if plan is not None and region.pk in plan.prices_in_force:
        prices = plan.prices_in_force[region.pk]  # read with the nodes it scored
    else:
        prices = region_prices_in_force(region=region, flavor=request.flavor)
    flavor_price = prices[PriceKind.FLAVOR_HOUR]
    if flavor_price is None:
        raise not_priced(request.flavor, region)
    disk_price = prices[PriceKind.DISK_GB_MONTH]
    bandwidth_price = prices[PriceKind.BANDWIDTH_MBPS_MONTH]
    billed_disk = metering.billed_disk_gb(
        flavor=request.flavor,
        system_disk_gb=request.system_disk_gb,
        data_disk_gb=request.data_disk_gb,
    )
    return Quote(
        currency=flavor_price.currency,
        region=region,
        count=request.count,
        flavor_hourly_minor=flavor_price.amount_minor,
        disk_hourly_minor=Decimal(disk_price.amount_minor if disk_price else 0)
        * billed_disk
        / HOURS_PER_MONTH,
        bandwidth_hourly_minor=Decimal(bandwidth_price.amount_minor if bandwidth_price else 0)
        * request.bandwidth_mbps
        / HOURS_PER_MONTH,
        disk_gb_month_minor=disk_price.amount_minor if disk_price else 0,
        bandwidth_mbps_month_minor=bandwidth_price.amount_minor if bandwidth_price else 0,
        billed_disk_gb=billed_disk,
        bandwidth_mbps=request.bandwidth_mbps,
    )


def validate_host_request(organization: Organization, request: HostRequest) -> None:
    """Every refusal names what is wrong; a ValidationError carries the field."""
    flavor, image = request.flavor, request.image
    park = organization.park
    errors = {}
    if not flavor.is_active or flavor.family.park_id != park.pk:
        errors["flavor"] = _("This flavor is not on sale in your park.")
    elif (
        not image.is_active
        or image.park_id != park.pk
        or image.organization_id not in (None, organization.pk)
    ):
        errors["image"] = _("This image is not available in your park.")
    elif not image_runs_on(image, flavor.family.accelerator_model_id):
        errors["image"] = _(
            "%(image)s (%(stack)s) does not run on %(model)s; choose an image for its software "
            "stack."
        ) % {
            "image": image.name,
            "stack": image.get_software_stack_display(),
            "model": flavor.family.accelerator_model,
        }
    elif problem := _image_not_held(organization, request):
        errors["image"] = problem
    if request.region is not None and request.region.park_id != park.pk:
        errors["region"] = _("This region is not in your park.")
    group = request.security_group
    if group is not None and group.organization_id != organization.pk:
        errors["security_group"] = _("Choose a security group of this organization.")
    if not flavor.system_disk_gb <= request.system_disk_gb <= MAX_SYSTEM_DISK_GB:
        errors["system_disk_gb"] = _("The system disk must be %(min)d–%(max)d GB.") % {
            "min": flavor.system_disk_gb,
            "max": MAX_SYSTEM_DISK_GB,
        }
    if not 0 <= request.data_disk_gb <= MAX_DATA_DISK_GB:
        errors["data_disk_gb"] = _("The cloud disk must be 0–%(max)d GB.") % {
            "max": MAX_DATA_DISK_GB
        }
    if not 0 <= request.bandwidth_mbps <= MAX_BANDWIDTH_MBPS:
        errors["bandwidth_mbps"] = _("Bandwidth must be 0–%(max)d Mbps.") % {
            "max": MAX_BANDWIDTH_MBPS
        }
    if not 1 <= request.count <= MAX_COUNT:
        errors["count"] = _("Order 1–%(max)d hosts at a time.") % {"max": MAX_COUNT}
    # With a count, hosts are named name-1 … name-N: the longest must be a host name too.
    longest = request.name if request.count <= 1 else f"{request.name}-{request.count}"
    checks = [("name", validate_hostname, longest)]
    if request.ssh_public_key.strip():
        checks.append(("ssh_public_key", validate_ssh_public_key, request.ssh_public_key))
    elif not reached_by_terminal(park, request):
        errors["ssh_public_key"] = _(
            "Hosts of this flavor are reached over SSH only: paste the public key you will log "
            "in with."
        )
    for field, check, value in checks:
        try:
            check(value)
        except ValidationError as exc:
            errors[field] = exc.messages[0]
    if errors:
        raise ValidationError(errors)


def reached_by_terminal(park, request: HostRequest) -> bool:
    """Whether every pool that may place this host has the web terminal log in to its hosts:
    such a host needs no key of the tenant's (the terminal brings its own), the others do."""
    pools = host_pools(
        park,
        accelerator_model_id=request.flavor.family.accelerator_model_id,
        region=request.region,
    )
    drivers = {pool.driver for pool in pools}
    return bool(drivers) and all(supports(driver, Capability.TERMINAL) for driver in drivers)


def _image_not_held(organization, request: HostRequest) -> str | None:
    """Why no host of this image can start on the pools selling the flavor (in the region
    asked for): their servers hold images of their own, and none holds this one."""
    park = organization.park
    region = request.region if request.region and request.region.park_id == park.pk else None
    held = held_image_codes(
        park=park,
        accelerator_model_id=request.flavor.family.accelerator_model_id,
        region=region,
    )
    if held is None or request.image.code in held:
        return None
    where = {"image": request.image.name, "model": request.flavor.family.accelerator_model}
    if region is not None:
        where["model"] = f"{where['model']} ({region.name})"
    offered = Image.objects.filter(
        visible_images(organization),
        park=park,
        is_active=True,
        code__in=held,
        compatible_accelerators=request.flavor.family.accelerator_model_id,
    ).order_by("name")
    if not offered:
        return (
            _(
                "No server for %(model)s has %(image)s, nor any other image, built yet; the park's "
                "operators build images on their servers."
            )
            % where
        )
    return _("No server for %(model)s has %(image)s built; choose one they have: %(images)s.") % {
        **where,
        "images": ", ".join(image.name for image in offered),
    }


def needs_approval(organization: Organization, request: HostRequest, quoted: Quote) -> bool:
    policy = approval_policy_of(organization.park_id)
    if policy.unverified_needs_approval and not organization.is_verified:
        return True
    accelerators = request.flavor.accelerator_count * request.count
    if policy.max_accelerators is not None and accelerators > policy.max_accelerators:
        return True
    return policy.max_hourly_minor is not None and quoted.hourly_minor > policy.max_hourly_minor


# --- Creating hosts --------------------------------------------------------------------------


@transaction.atomic(durable=True)
@recorded_together()  # the four audit events of each host, in one INSERT
@emitted_together()  # its webhook events: the endpoints read once, the deliveries one INSERT
def submit_create(
    *, organization: Organization, actor, request: HostRequest, idempotency_key: str = ""
) -> list[Order]:
    """Order `request.count` hosts. The same idempotency key returns the first call's orders,
    so a double click or a retried request creates nothing twice.

    What only reads (checks, scoring the nodes, prices, the approval policy) is done before the
    organization's lock; under it come only the quota count and the rows that hold the demand,
    the wallet's hold and the allocation under each node's own lock. Nothing read before the
    lock can oversell: the quota is counted under the lock, the wallet is re-read under its
    lock, and a node's free capacity is re-counted under the node's lock (a plan that went
    stale falls back to the next node, or refuses).
    """
    authorize(actor, organization, Action.ORDER)
    if idempotency_key:
        # Under the organization's lock, so a concurrent retry with the same key waits for the
        # first and then replays it (before anything that could refuse the retry).
        lock(Organization, organization.pk)
        earlier = _orders_for_key(organization, idempotency_key)
        if earlier:
            return earlier
    validate_host_request(organization, request)
    group = request.security_group
    if group is not None and not share_key(SecurityGroup, group.pk):
        # Deleted since the form was read; held from here on, so a delete waits for this order.
        raise ValidationError({"security_group": _("This security group was deleted meanwhile.")})
    # Scored once: the quote's region and the first host's placement come from the same plan.
    plan = plan_placement(
        park=organization.park,
        flavor=request.flavor,
        region=request.region,
        preference=request.preference,
        image_code=request.image.code,
    )
    if not plan.nodes_considered:
        # No node runs hosts of this model here: say why, when it is the pools' drivers.
        require_pools_for(
            park=organization.park,
            accelerator_model_id=request.flavor.family.accelerator_model_id,
            region=request.region,
            capability=Capability.HOSTS,
        )
    quoted = quote(organization=organization, request=request, plan=plan)
    one_host = Quote(**{**quoted.__dict__, "count": 1})
    approval = needs_approval(organization, request, quoted)
    # The quota of every host (the organization's lock, held until commit), then the first
    # hour of every host, so an order never starts what cannot be paid; room comes last.
    reservation = reserve(
        organization=organization,
        demand=_demand(request, quoted),
        funds_minor=quoted.hold_minor,
    )
    orders = []
    for index in range(request.count):
        name = request.name if request.count == 1 else f"{request.name}-{index + 1}"
        key = _create_key(idempotency_key, index) if idempotency_key else ""
        order = _create_order(organization, actor, request, one_host, name, key)
        reservation.hold(order.instance, amount_minor=order.hourly_minor)
        orders.append(order)
    if request.image.organization_id is not None:
        # An organization's own image (a saved one): held from here on, so its deletion waits
        # for this order and then counts its hosts; one deleted meanwhile is refused.
        lock(Image, request.image.pk)
        if not Image.objects.filter(pk=request.image.pk, is_active=True).exists():
            raise ValidationError({"image": _("This image was deleted meanwhile.")})
    decided = []
    for index, order in enumerate(orders):
        if approval:
            decided.append(
                move_order(order=order, to=OrderState.AWAITING_APPROVAL, actor=actor, held=True)
            )
        else:
            # Written with its move to fulfilling, next.
            order = move_order(
                order=order, to=OrderState.APPROVED, actor=None, held=True, write=False
            )
            # Later hosts of the same order are scored again, with the earlier ones placed.
            decided.append(
                _start_provisioning(
                    order,
                    reservation=reservation,
                    plan=plan if index == 0 else None,
                    created=True,
                )
            )
    return decided


def _create_key(key: str, index: int) -> str:
    """The stored key of the index-th host of a create: exact, so "job" never finds "job:7"."""
    return f"{key}:{index}"


def _orders_for_key(organization, key):
    keys = [_create_key(key, index) for index in range(MAX_COUNT)]
    return list(
        Order.objects.filter(organization=organization, idempotency_key__in=keys).order_by("pk")
    )


def _create_order(organization, actor, request, one_host: Quote, name, key) -> Order:
    workload = Workload(organization=organization, kind=WorkloadKind.HOST)
    instance = Instance(
        organization=organization,
        workload=workload,
        name=name,
        flavor=request.flavor,
        image=request.image,
        region=one_host.region,
        system_disk_gb=request.system_disk_gb,
        data_disk_gb=request.data_disk_gb,
        bandwidth_mbps=request.bandwidth_mbps,
        ssh_public_key=request.ssh_public_key.strip(),
        security_group=request.security_group,
        rates=one_host.rates(),
        created_by=audit_identity(actor)[0],
    )
    order = Order(
        organization=organization,
        kind=OrderKind.CREATE,
        instance=instance,
        parameters={
            "flavor": request.flavor.code,
            "image": request.image.code,
            "region": one_host.region.code,
            "system_disk_gb": request.system_disk_gb,
            "data_disk_gb": request.data_disk_gb,
            "bandwidth_mbps": request.bandwidth_mbps,
            "preference": request.preference,
            "scheduler_chose_region": request.region is None,
        },
        quote=one_host.as_json(),
        hourly_minor=one_host.hourly_minor_rounded,
        currency=one_host.currency,
        idempotency_key=key,
        created_by=instance.created_by,
    )
    sql.insert_together(workload, instance, order)  # one statement on PostgreSQL
    record_event(
        action="order.submitted",
        actor=actor,
        target=order,
        data={"kind": order.kind, "instance": instance.name},
    )
    notify(organization, "order.submitted", order_event(order))
    return order


def _start_provisioning(
    order: Order,
    *,
    reservation: HostReservation,
    plan: PlacementPlan | None = None,
    created: bool = False,
) -> Order:
    """Take the host's room on a node (the last step of its `reservation`) and hand the
    instance to the backend (after commit); `order` is what its move to approved returned, in
    this transaction. The host is placed in the region
    it was quoted in, at that price: with the `plan` its quote was scored with (over every
    region, when the scheduler chose it), or scored again there (the later hosts of an order,
    an order approved later). Should that region have no room left by then, it is refused,
    never billed elsewhere at another price than the tenant saw. `created`: the instance was
    created in this transaction (it is current; see transition's `held`). Returns the order as
    it is now (fulfilling)."""
    from apps.orders.tasks import provision_instance

    instance = order.instance
    # The transitions first (in memory) and the allocation last: the node's lock is then held
    # only from the allocation to the commit, so concurrent orders landing on one node wait
    # less. Both are in this transaction, so no one sees the order fulfilling without its
    # allocation.
    order = move_order(order=order, to=OrderState.FULFILLING, held=True, write=False)
    # Written with the node it is placed on, below (the order with it): nothing reads either
    # back before.
    instance = move_instance(
        instance=instance, to=InstanceState.PROVISIONING, created=created, write=False
    )
    allocation = reservation.place(
        instance,
        shape=shape_of(instance.flavor),
        region=instance.region,
        preference=order.parameters.get("preference", TaskPreference.BALANCED),
        plan=plan,
    )
    instance.node = allocation.node
    instance.pool = allocation.node.pool
    write_moved(instance, "node", "pool", along=[order])
    # Its data disk lives on its server as a volume where the server keeps volumes.
    storage.create_data_disk(
        workload=instance.workload,
        node=instance.node,
        host_name=instance.name,
        size_gb=instance.data_disk_gb,
    )
    on_commit_task(provision_instance, instance.pk)
    return order


@transaction.atomic(durable=True)
def approve_order(*, order: Order, operator) -> Order:
    """Approve a waiting order. Capacity is taken now; if none is left, the order fails with the
    reason and its quota is given back (the approval itself stays recorded)."""
    require_operator(
        operator, order.organization.park, _("Only this park's operators may decide on its orders.")
    )
    lock(Instance, order.instance_id)  # the host before its order (LOCK_ORDER)
    approved = move_order(order=order, to=OrderState.APPROVED, actor=operator)
    try:
        with transaction.atomic():
            # Its quota and first hour were reserved when it was ordered: room alone now.
            _start_provisioning(approved, reservation=reserve(organization=order.organization))
    except NoCapacity as exc:
        # `approved` still holds what the savepoint undid (its move on, not written): the
        # order is read again under its lock, as approved.
        _end_unprovisioned(order, to=OrderState.FAILED, reason=exc.message)
    return Order.objects.get(pk=order.pk)


@transaction.atomic(durable=True)
def reject_order(*, order: Order, operator, reason: str) -> Order:
    require_operator(
        operator, order.organization.park, _("Only this park's operators may decide on its orders.")
    )
    if not reason.strip():
        raise DomainError(_("Say why the order is rejected."), code="reason_required")
    return _end_unprovisioned(order, to=OrderState.REJECTED, reason=reason.strip(), actor=operator)


@transaction.atomic(durable=True)
def cancel_order(*, order: Order, actor) -> Order:
    authorize(actor, order.organization, Action.ORDER)
    return _end_unprovisioned(order, to=OrderState.CANCELLED, actor=actor)


def _end_unprovisioned(order: Order, *, to: str, reason: str = "", actor=None) -> Order:
    """End a create order whose host never ran: its instance is released, its quota back."""
    if order.kind != OrderKind.CREATE:
        raise InvalidTransition(_("Only a waiting create order can be ended this way."))
    lock(Instance, order.instance_id)  # the host before its order (LOCK_ORDER)
    order = move_order(order=order, to=to, actor=actor, reason=reason)
    move_instance(instance=order.instance, to=InstanceState.RELEASED, actor=actor)
    return order


# --- What the provisioning tasks report ------------------------------------------------------


def lock_host(instance_id: int, *, related=()) -> Instance:
    """A host's use case starts here: the host (read with its `related` rows), then what it may
    change, in LOCK_ORDER (apps.core.transactions): its open orders, its volumes (a release
    detaches them), its organization and park (reserve's locks: `lock_quota_scope`), its money
    (wallet, hold, open meters:
    `billing.lock_money_of`). The node, shared with other hosts, comes after them all, when
    cards are taken or given back."""
    instance = locked(Instance, instance_id, related=related)
    lock_all(
        Order,
        instance.orders.exclude(state__in=ORDER_TERMINAL_STATES).values_list("pk", flat=True),
    )
    storage.lock_volumes_of(instance.workload_id)
    organization = instance.organization
    lock_quota_scope(park_id=organization.park_id, organization_ids=[organization.pk])
    billing.lock_money_of(instance)
    return instance


@transaction.atomic(durable=True)
def complete_provisioning(*, instance_id: int, handle: str, access: dict) -> Instance | None:
    instance = lock_host(instance_id)
    if instance.state != InstanceState.PROVISIONING:  # a duplicate delivery of the task
        return None
    Instance.objects.filter(pk=instance.pk).update(backend_handle=handle, access=access)
    instance = move_instance(instance=instance, to=InstanceState.RUNNING)
    for order in _open_orders(instance):
        move_order(order=order, to=OrderState.DONE)
    sync_provisioned(Instance.objects.select_related("pool__backend").get(pk=instance.pk))
    return instance


@transaction.atomic
def fail_instance(
    *, instance_id: int, message: str, keep_capacity: bool = False
) -> Instance | None:
    """A permanent backend failure: the instance shows the backend's message, gives back its
    quota (by leaving the holding states) and its open order fails. Its accelerators go back
    too, unless `keep_capacity`: a host whose stop, start, resize or release failed may still
    run on the backend, so its cards stay taken until a release is confirmed."""
    instance = lock_host(instance_id)
    if instance.state in (InstanceState.ERROR, InstanceState.RELEASED):
        return None
    instance = move_instance(instance=instance, to=InstanceState.ERROR, error_message=message)
    if not keep_capacity:
        release(instance)
    for order in _open_orders(instance):
        move_order(order=order, to=OrderState.FAILED, reason=message)
    return instance


def _open_orders(instance):
    return list(
        instance.orders.exclude(state__in=ORDER_TERMINAL_STATES)
        .filter(state=OrderState.FULFILLING)
        .order_by("pk")
    )


@transaction.atomic(durable=True)
def set_approval_policy(
    *, park, operator, unverified_needs_approval: bool, max_accelerators, max_hourly_minor
) -> ApprovalPolicy:
    require_operator(operator, park, _("Only this park's operators may change its policy."))
    policy, _created = locked_update_or_create(
        ApprovalPolicy,
        park=park,
        defaults={
            "unverified_needs_approval": unverified_needs_approval,
            "max_accelerators": max_accelerators,
            "max_hourly_minor": max_hourly_minor,
        },
    )
    record_event(
        action="park.approval_policy",
        actor=operator,
        target=park,
        data={
            "unverified_needs_approval": unverified_needs_approval,
            "max_accelerators": max_accelerators,
            "max_hourly_minor": max_hourly_minor,
        },
    )
    return policy
