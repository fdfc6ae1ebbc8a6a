"""Preemption: a task that may not be preempted, waiting because no host has room, makes room
by requeueing preemptible tasks (cheaper: the park's `preemptible_discount_pct`).

Loam places tasks itself (its allocations are the capacity), so the decision is Loam's, run
after each queue pass (`apps.orchestration.tasks.schedule_park_queue`): for each waiting task
that is not preemptible and fits nowhere now, in queue order, the preemptible tasks (placed or
running, of no higher priority) whose cards would make it fit, on one node (or, for a gang
task, on `node_count` nodes of one gang pool), choosing the set that loses the fewest seconds
of run, then the cheapest, then the node with the lowest id. Each victim's meter closes at the
preemption (billed up to then), its capacity goes back, it returns to the queue (running →
queued, a `Preemption` row and a line in its log: "preempted, requeued"), and its backend job
is stopped after commit (Slurm: `scancel` as its owner; the simulator forgets it). The queue
pass that follows places the waiting task on the room made: within a priority the queue
serves tasks that are not preemptible first, so the requeued tasks do not take it back.

Only whole cards are made free: a task asking for a share of one card waits as before.

Lock order: the task rows (waiting and victims, in one statement), then the organizations and
the park (the quota check), then the victims' open meters, then their nodes.
"""

from collections import defaultdict
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.models import Meter
from apps.core.audit import record_event
from apps.core.transactions import lock_all, on_commit_task
from apps.orchestration import adapter, selectors
from apps.orchestration.backends.base import Capability
from apps.orchestration.backends.registry import drivers_with
from apps.orchestration.models import Allocation, Node, Preemption, Task, TaskState
from apps.orchestration.reservations import release_allocations, reserve_tasks
from apps.orchestration.scheduler import MILLI
from apps.orchestration.scheduling import (
    SCHEDULER,
    _append_logs,
    move_task,
)
from apps.quotas.services import QuotaExceeded

IN_FLIGHT = (TaskState.PLACED, TaskState.RUNNING)


@dataclass
class _Room:
    """A node's free room as preemption counts it: whole idle cards, vCPU, RAM."""

    cards: int
    vcpu: int
    ram_gb: int
    pool_id: int
    usable: bool  # healthy, not drained

    def fits(self, task) -> bool:
        return (
            self.usable
            and self.cards >= task.accelerator_milli // MILLI
            and self.vcpu >= task.vcpu
            and self.ram_gb >= task.ram_gb
        )


@dataclass
class _Victim:
    task: Task
    seconds: int  # of run it would lose
    # node id -> (whole cards, vcpu, ram_gb) it holds there
    holds: dict[int, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class PreemptionPlan:
    """For one waiting task: the nodes it will take and the tasks requeued to make room."""

    task: Task
    node_ids: list[int]
    victims: list[_Victim]

    @property
    def seconds_lost(self) -> int:
        return sum(v.seconds for v in self.victims)


@transaction.atomic(durable=True)
def preempt_for_waiting(*, park, now=None) -> list[Preemption]:
    """Requeue the preemptible tasks that keep waiting tasks which may not be preempted from
    starting (see the module docstring). Returns the preemptions made."""
    now = now or timezone.now()
    waiting_ids = list(
        Task.objects.filter(
            organization__park=park, state=TaskState.QUEUED, preemptible=False
        ).values_list("pk", flat=True)
    )
    victim_ids = list(
        Task.objects.filter(
            organization__park=park, state__in=IN_FLIGHT, preemptible=True
        ).values_list("pk", flat=True)
    )
    if not waiting_ids or not victim_ids:
        return []
    lock_all(Task, waiting_ids + victim_ids)
    waiting = list(
        Task.objects.filter(
            pk__in=waiting_ids, state=TaskState.QUEUED, accelerator_milli__gte=MILLI
        )
        .select_related("organization__park", "image")
        .prefetch_related("allowed_regions", "image__compatible_accelerators")
        .order_by("-priority", "submitted_at", "pk")
    )
    victims = _victims(victim_ids, now=now)
    if not waiting or not victims:
        return []
    plans = _plan(park, waiting, victims)
    if not plans:
        return []
    return _requeue(plans, now=now)


def _victims(task_ids, *, now) -> dict[int, _Victim]:
    tasks = {
        t.pk: t
        for t in Task.objects.filter(pk__in=task_ids, state__in=IN_FLIGHT).select_related(
            "organization", "pool__backend"
        )
    }
    victims = {
        pk: _Victim(
            task=t,
            seconds=int((now - t.started_at).total_seconds()) if t.started_at else 0,
        )
        for pk, t in tasks.items()
    }
    by_workload = {t.workload_id: victims[pk] for pk, t in tasks.items()}
    allocations = Allocation.objects.filter(
        workload_id__in=by_workload, released_at__isnull=True
    ).prefetch_related("accelerators")
    for allocation in allocations:
        whole = 0 if allocation.is_share else len(allocation.accelerators.all())
        by_workload[allocation.workload_id].holds[allocation.node_id] = (
            whole,
            allocation.vcpu,
            allocation.ram_gb,
        )
    return victims


def _plan(park, waiting, victims: dict[int, _Victim]) -> list[PreemptionPlan]:
    nodes = list(selectors.schedulable_nodes(park=park, capability=Capability.BATCH).order_by("pk"))
    pools = list({node.pool_id: node.pool for node in nodes}.values())
    prices = adapter.task_prices(pools)
    rooms = {
        view.node.pk: _Room(
            cards=sum(1 for free in view.state.gpu_free if free == MILLI),
            vcpu=view.state.cpu_milli_free // MILLI,
            ram_gb=view.state.memory_mib_free // 1024,
            pool_id=view.node.pool_id,
            usable=not view.state.drained,
        )
        for view in adapter.node_views(nodes, prices=prices)
    }
    gang_drivers = set(drivers_with(Capability.GANG))
    gang_pools = {p.pk for p in pools if p.backend.driver in gang_drivers}
    models_of = {p.pk: p.accelerator_model for p in pools}
    quota = reserve_tasks(park=park, organizations={t.organization for t in waiting}, node_ids=[])
    plans = []
    for task in waiting:
        # A task that may not be preempted pays the full price.
        refused = adapter.task_pool_rejections(
            task, pools, prices, model_ids=adapter.task_model_ids(task)
        )
        allowed = {
            p.pk for p in pools if p.pk not in refused and (not task.is_gang or p.pk in gang_pools)
        }
        if _fits_now(task, rooms, allowed):
            continue  # the queue pass places it, or holds it for another reason
        candidates = {pk: v for pk, v in victims.items() if v.task.priority <= task.priority}
        plan = _best_plan(task, rooms, allowed, candidates)
        if plan is None:
            continue
        try:
            quota.check_quota(task, models_of[rooms[plan.node_ids[0]].pool_id])
        except QuotaExceeded:
            continue  # room would not start it: its quota holds it back
        for victim in plan.victims:
            del victims[victim.task.pk]
            for node_id, (cards, vcpu, ram_gb) in victim.holds.items():
                if node_id in rooms:
                    room = rooms[node_id]
                    room.cards, room.vcpu, room.ram_gb = (
                        room.cards + cards,
                        room.vcpu + vcpu,
                        room.ram_gb + ram_gb,
                    )
        for node_id in plan.node_ids:
            room = rooms[node_id]
            room.cards -= task.accelerator_milli // MILLI
            room.vcpu -= task.vcpu
            room.ram_gb -= task.ram_gb
        plans.append(plan)
    return plans


def _fits_now(task, rooms: dict[int, _Room], allowed: set[int]) -> bool:
    fitting = defaultdict(int)
    for room in rooms.values():
        if room.pool_id in allowed and room.fits(task):
            fitting[room.pool_id] += 1
    return any(count >= task.node_count for count in fitting.values())


def _best_plan(task, rooms, allowed, victims: dict[int, _Victim]) -> PreemptionPlan | None:
    """The cheapest way to make room: per node, the victims there that cost the fewest seconds
    (then the cheapest per hour) until the task fits; a gang takes the `node_count` cheapest
    nodes of one pool."""
    per_pool = defaultdict(list)  # pool id -> [(cost key, node id, victims)]
    for node_id, room in rooms.items():
        if room.pool_id not in allowed or not room.usable:
            continue
        there = sorted(
            (v for v in victims.values() if node_id in v.holds),
            key=lambda v: (v.seconds, v.task.hourly_minor, v.task.pk),
        )
        made = _Room(room.cards, room.vcpu, room.ram_gb, room.pool_id, True)
        chosen = []
        for victim in there:
            if made.fits(task):
                break
            cards, vcpu, ram_gb = victim.holds[node_id]
            made.cards, made.vcpu, made.ram_gb = (
                made.cards + cards,
                made.vcpu + vcpu,
                made.ram_gb + ram_gb,
            )
            chosen.append(victim)
        if made.fits(task):
            key = (sum(v.seconds for v in chosen), sum(v.task.hourly_minor for v in chosen))
            per_pool[room.pool_id].append((key, node_id, chosen))
    best = None
    for pool_id, options in per_pool.items():
        if len(options) < task.node_count:
            continue
        options.sort(key=lambda o: (o[0], o[1]))
        taken = options[: task.node_count]
        chosen = {v.task.pk: v for _key, _node, vs in taken for v in vs}
        if not chosen:
            continue  # it fits without preempting (a gang spread over free nodes)
        plan = PreemptionPlan(
            task=task,
            node_ids=sorted(node for _key, node, _vs in taken),
            victims=sorted(chosen.values(), key=lambda v: v.task.pk),
        )
        rank = (plan.seconds_lost, sum(v.task.hourly_minor for v in plan.victims), pool_id)
        if best is None or rank < best[0]:
            best = (rank, plan)
    return best[1] if best else None


def _requeue(plans: list[PreemptionPlan], *, now) -> list[Preemption]:
    from apps.orchestration.tasks import stop_preempted_job

    victims = [v for plan in plans for v in plan.victims]
    workloads = [v.task.workload_id for v in victims]
    lock_all(
        Meter,
        Meter.objects.filter(workload_id__in=workloads, ended_at__isnull=True).values_list(
            "pk", flat=True
        ),
    )
    hostnames = dict(
        Node.objects.filter(
            pk__in={n for v in victims for n in v.holds} | {n for p in plans for n in p.node_ids}
        ).values_list("pk", "hostname")
    )
    preemptions = []
    for plan in plans:
        for victim in plan.victims:
            task = victim.task
            nodes = sorted(hostnames[n] for n in victim.holds)
            preemptions.append(
                Preemption(
                    task=task,
                    preempted_by=plan.task,
                    nodes=nodes,
                    ran_from=task.started_at,
                    at=now,
                    billed_seconds=victim.seconds,
                    hourly_minor=task.hourly_minor,
                )
            )
            handle, backend_id = task.backend_handle, task.pool.backend_id if task.pool else None
            # Closes its meter at `now`: it is billed up to the preemption.
            move_task(task=task, to=TaskState.QUEUED, actor=SCHEDULER, at=now)
            _append_logs(
                task,
                _(
                    "Preempted, requeued: stopped after %(seconds)d s (billed) on %(nodes)s to "
                    "make room for task #%(by)d, which may not be preempted."
                )
                % {"seconds": victim.seconds, "nodes": ", ".join(nodes), "by": plan.task.pk},
            )
            Task.objects.filter(pk=task.pk).update(
                pool=None,
                node=None,
                hourly_minor=0,
                backend_handle="",
                backend_status={},
                started_at=None,
                logs=task.logs,
            )
            record_event(
                action="task.preempted",
                actor=SCHEDULER,
                target=task,
                data={
                    "by": plan.task.pk,
                    "nodes": nodes,
                    "billed_seconds": victim.seconds,
                },
            )
            if handle and backend_id:
                on_commit_task(stop_preempted_job, backend_id, handle)
        # Its placement decision (next pass) says this too, from the Preemption rows.
        record_event(
            action="task.made_room",
            actor=SCHEDULER,
            target=plan.task,
            data={
                "requeued": [v.task.pk for v in plan.victims],
                "nodes": sorted(hostnames[n] for n in plan.node_ids if n in hostnames),
                "seconds_lost": plan.seconds_lost,
            },
        )
    allocations = list(
        Allocation.objects.filter(workload_id__in=workloads, released_at__isnull=True).order_by(
            "node_id"
        )
    )
    lock_all(Node, {a.node_id for a in allocations})
    release_allocations(allocations)
    return Preemption.objects.bulk_create(preemptions)
