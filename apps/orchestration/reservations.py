"""One reservation path: what a host or a training task reserves, taken in the order
`core.transactions.LOCK_ORDER` declares — quota (the organizations' rows, then the park's where
it has limits), funds (the wallet), then room on nodes (each node's row) — and its mirror,
`release`.

Orchestration is the lowest floor that may reach all three: the quota's checker
(`quotas.services.QuotaChecker`, floor 3), the wallet (`billing.services`, floor 4) and the
nodes' rooms (`orchestration.rooms.NodeRoom`, this app); the queue pass and gang placement are
orchestration's, and orders, above, calls it for its hosts.

Two callers' shapes, one path:

- `reserve` for hosts: an order's hosts at once (the quota for all of them and their first
  hours checked once, a hold per host, then room per host: `HostReservation.place`, later still
  for an order awaiting approval), a start (funds to run on, then room on its own node), a
  resize (the quota of what grows, funds, then room in place). Each step only where the use
  case asks for it, in that order; holding a first hour after room was taken raises, since a
  wallet written after a node is locked breaks the order.
- `reserve_tasks` for a queue pass: the quota of every organization it places for and the
  nodes it chose, locked once for the whole pass and counted once (`TaskReservation`); each
  task is checked against the quota and takes its room, on one node or, for a gang, on all of
  its nodes or none. Tasks hold no funds: they are metered as they run.

What reserve checks against the quota becomes held by the rows the use case creates or
changes in its transaction (an instance in a holding state, a placed task: `QUOTA_HOLDERS`),
and so is given back when those rows leave their holding states; a host's hold goes back with
its state too (`orders.services.move_instance`). `release` gives back the room.
"""

import math
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.billing import services as billing
from apps.catalog.selectors import free_room_changed
from apps.core import sql
from apps.core.transactions import lock_all
from apps.orchestration.models import Accelerator, Allocation, Node, Task, TaskState
from apps.orchestration.rooms import NodeRoom, recount
from apps.orchestration.services import (
    PlacementPlan,
    Shape,
    allocate_again,
    place,
    resize_capacity,
)
from apps.quotas import services as quotas
from apps.quotas.selectors import usage_held_besides
from apps.quotas.services import Usage
from apps.tenants.models import Organization

# --- hosts -----------------------------------------------------------------------------------


class HostReservation:
    """What `reserve` took for hosts (the quota's and the wallet's locks, held until commit),
    and the steps that follow it in the lock order: a host's first hour held on the wallet,
    then room on a node."""

    def __init__(self, wallet):
        self._wallet = wallet
        self._took_room = False

    def hold(self, host, *, amount_minor: int):
        """Hold `host`'s first hour on the wallet `reserve` checked (before any room)."""
        if self._wallet is None:
            raise RuntimeError("hold() needs the funds reserved first: reserve(funds_minor=…)")
        if self._took_room:
            raise RuntimeError("the wallet is locked before any node (LOCK_ORDER)")
        return billing.hold(self._wallet, instance=host, amount_minor=amount_minor)

    def place(
        self, instance, *, shape: Shape, region, preference: str, plan: PlacementPlan | None
    ) -> Allocation:
        """Room for a new host on the best node that still has it (`services.place`)."""
        self._took_room = True
        return place(
            instance=instance, shape=shape, region=region, preference=preference, plan=plan
        )

    def start(self, instance, shape: Shape) -> Allocation:
        """Room for a stopped host again, on its own node (`services.allocate_again`)."""
        self._took_room = True
        return allocate_again(instance, shape)

    def resize(self, instance, shape: Shape) -> None:
        """The host's room grown or shrunk in place (`services.resize_capacity`)."""
        self._took_room = True
        resize_capacity(instance, shape)


def reserve(
    *, organization: Organization, demand: Usage | None = None, funds_minor: int | None = None
) -> HostReservation:
    """Reserve for hosts of `organization`, in the lock order: `demand` against the quotas
    (refused with QuotaExceeded), then `funds_minor` available on the wallet (InsufficientFunds;
    1 asks only for a balance to run on). Room on nodes is taken afterwards through the
    returned reservation. What is not asked for is neither locked nor checked (an approved
    order had its quota and first hour reserved when it was ordered, and takes room alone).

    Runs inside the transaction that holds the demand: the locks are held until it commits."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("reserve() must run inside the caller's transaction")
    if demand is not None:
        quotas.reserve(organization=organization, demand=demand)
    wallet = None
    if funds_minor is not None:
        wallet = billing.require_funds(organization, funds_minor)
    return HostReservation(wallet)


# --- training tasks --------------------------------------------------------------------------


@dataclass
class HeldByTasks:
    """What tasks hold against quotas, task by task: whole cards, and shares summed up to whole
    cards per model before they are counted (four quarter shares are one accelerator),
    compute units, vCPU and RAM."""

    milli_by_model: dict[int, int] = field(default_factory=dict)
    compute_units: Decimal = Decimal(0)
    vcpu: int = 0
    ram_gb: int = 0

    def add(self, task, model) -> None:
        nodes = task.node_count
        self.add_held(
            model.pk,
            model.compute_units,
            task.accelerator_milli * nodes,
            task.vcpu * nodes,
            task.ram_gb * nodes,
        )

    def add_held(self, model_id: int, compute_units, milli: int, vcpu: int, ram_gb: int) -> None:
        """What one task, or several on one model together, hold."""
        self.milli_by_model[model_id] = self.milli_by_model.get(model_id, 0) + milli
        self.compute_units += compute_units * Decimal(milli) / 1000
        self.vcpu += vcpu
        self.ram_gb += ram_gb

    def usage(self) -> Usage:
        by_model = {pk: math.ceil(milli / 1000) for pk, milli in self.milli_by_model.items()}
        return Usage(
            accelerators=sum(by_model.values()),
            compute_units=self.compute_units,
            vcpu=self.vcpu,
            ram_gb=self.ram_gb,
            by_model=by_model,
        )

    def growth(self, task, model) -> Usage:
        """What holding `task` as well adds (a share may fit in a card already counted)."""
        after = HeldByTasks(dict(self.milli_by_model), self.compute_units, self.vcpu, self.ram_gb)
        after.add(task, model)
        return after.usage() - self.usage()


_HELD_BY_TASKS_SQL = """
SELECT task.organization_id, pool.accelerator_model_id, model.compute_units,
    SUM(task.accelerator_milli * task.node_count), SUM(task.vcpu * task.node_count),
    SUM(task.ram_gb * task.node_count)
FROM orders_task task
JOIN orchestration_pool pool ON pool.id = task.pool_id
JOIN catalog_acceleratormodel model ON model.id = pool.accelerator_model_id
WHERE task.organization_id IN ({organizations}) AND task.state IN (%s, %s)
GROUP BY task.organization_id, pool.accelerator_model_id, model.compute_units
"""


def _held_by_tasks_query(organizations) -> tuple[str, list]:
    members, params = sql.members(organizations)
    return (
        _HELD_BY_TASKS_SQL.format(organizations=members),
        [*params, TaskState.PLACED.value, TaskState.RUNNING.value],
    )


def _held_by_tasks_rows(rows):
    for organization_id, model_id, units, milli, vcpu, ram_gb in rows:
        yield organization_id, (model_id, sql.decimal(units), milli, vcpu, ram_gb)


def held_by_tasks(organizations):
    """What the organizations' placed and running tasks hold (queued tasks hold nothing yet),
    per organization and accelerator model: (organization id, HeldByTasks.add_held's
    arguments). Written out: counted on every order, where the ORM took several times the
    statement's CPU to build it. `organizations`: ids, rows or a queryset."""
    return _held_by_tasks_rows(sql.fetch_all(Task, *_held_by_tasks_query(organizations)))


@quotas.quota_holder(Task, _held_by_tasks_query)
def task_quota_usage(rows) -> Usage:
    """The quotas' holder for training tasks: what the organizations' tasks hold, together."""
    held = HeldByTasks()
    for _organization_id, what in _held_by_tasks_rows(rows):
        held.add_held(*what)
    return held.usage()


class TaskReservation:
    """A queue pass's reservation (`reserve_tasks`): the quota of the organizations it places
    for, checked by reserve's checker (`quotas.services.QuotaChecker`: what each task adds to
    the tasks its organization holds, against its organization's and its park's limits, with
    reserve's messages) but counted once — the limits and what is held are read when the pass
    starts, and what each task it places holds is added in memory — and the rooms of the nodes
    it chose, locked and counted once."""

    def __init__(self, park, organizations, node_ids):
        ids = sorted(organization.pk for organization in organizations)
        # Reserve's locks first, in its order: the organizations (by id), then the park where
        # it has limits; the nodes last (LOCK_ORDER). All held until the pass commits.
        self.checker = quotas.lock_quota_scope(park_id=park.pk, organization_ids=ids)
        self.tasks = {pk: HeldByTasks() for pk in ids}
        self.park_tasks = HeldByTasks()
        for organization_id, what in held_by_tasks(Organization.objects.filter(park=park)):
            self.park_tasks.add_held(*what)
            if organization_id in self.tasks:
                self.tasks[organization_id].add_held(*what)
        # What instances (every holder but tasks) hold does not change during the pass.
        self.others = {
            pk: usage_held_besides(Organization.objects.filter(pk=pk), task_quota_usage)
            for pk in ids
            if self.checker.limited(pk)
        }
        self.park_others = (
            usage_held_besides(Organization.objects.filter(park=park), task_quota_usage)
            if self.checker.park_limited
            else Usage()
        )
        self.rooms = NodeRoom.lock(node_ids)

    def take(
        self, task: Task, model, node_ids: list[int]
    ) -> list[tuple[Allocation, list[int]]] | None:
        """`task`'s quota on `model`'s cards, then its room on each of `node_ids` (one node, or
        all of a gang's): per node, its allocation (unsaved) and the ids of the cards it becomes
        the holder of. Raises QuotaExceeded when a limit refuses it; None when a node can no
        longer take its share (taken meanwhile, drained), and then nothing is taken."""
        self.check_quota(task, model)
        rooms = [self.rooms[pk] for pk in node_ids]
        milli = task.accelerator_milli
        if not all(room.can_take(milli, vcpu=task.vcpu, ram_gb=task.ram_gb) for room in rooms):
            return None
        members = []
        for room in rooms:
            allocation = Allocation(
                node=room.node, workload_id=task.workload_id, vcpu=task.vcpu, ram_gb=task.ram_gb
            )
            members.append((allocation, room.take(allocation, milli)))
        self.tasks[task.organization_id].add(task, model)
        self.park_tasks.add(task, model)
        return members

    def check_quota(self, task: Task, model) -> None:
        """QuotaExceeded if `task` on `model`'s cards passes a limit."""
        pk = task.organization_id
        held = self.tasks[pk]
        self.checker.check(
            task.organization,
            held.growth(task, model),
            held=self.others[pk] + held.usage() if pk in self.others else Usage(),
            park_held=(
                self.park_others + self.park_tasks.usage() if self.checker.park_limited else Usage()
            ),
        )


def reserve_tasks(*, park, organizations, node_ids) -> TaskReservation:
    """The queue pass's reservation for tasks of `organizations` on `node_ids` (see
    `TaskReservation`). Runs inside the pass's transaction."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("reserve_tasks() must run inside the caller's transaction")
    return TaskReservation(park, organizations, node_ids)


# --- giving back -----------------------------------------------------------------------------


def release(holder) -> bool:
    """Give back the room a host or a task (`holder`, with its `workload_id`) holds, on every
    node (one for a host, several for a gang task), under the nodes' locks in id order. False
    when it held nothing."""
    allocations = list(
        Allocation.objects.filter(
            workload_id=holder.workload_id, released_at__isnull=True
        ).order_by("node_id", "pk")
    )
    if not allocations:
        return False
    lock_all(Node, {allocation.node_id for allocation in allocations})
    release_allocations(allocations)
    return True


def release_allocations(allocations) -> None:
    """End `allocations`, their nodes locked already: their whole cards are free again, a
    shared card passes to another live share of it, or is free with the last one."""
    now = timezone.now()
    for allocation in allocations:
        allocation.released_at = now
        allocation.save(update_fields=["released_at"])
        if allocation.is_share:
            card = allocation.shared_accelerator_id
            if Accelerator.objects.filter(pk=card, allocation=allocation).exists():
                heir = (
                    Allocation.objects.filter(shared_accelerator_id=card, released_at__isnull=True)
                    .order_by("pk")
                    .first()
                )
                Accelerator.objects.filter(pk=card).update(allocation=heir)
        else:
            Accelerator.objects.filter(allocation=allocation).update(allocation=None)
    recount({allocation.node_id for allocation in allocations})
    free_room_changed()
