"""Ordering and starting queued training tasks: priority, fair share, backfill.

Order (``fair_order``): higher ``priority`` first (priorities are the operator's to set, so a
strict order between classes is intended). Within a class, organisations take turns by
*usage*: the next task comes from the organisation that has used least so far — its recent
accelerator-seconds (``usage_by_org``, which the caller may decay over time) plus what the
tasks already ordered ahead would use (``charge``: GPUs, or vCPUs for CPU-only tasks, times
``assumed_seconds``). An organisation that floods the queue therefore gets one turn per
usage-equivalent of everyone else, never the whole queue; within an organisation, first come
first served. Where organisations have ``shares`` (the park's operator sets them; 1 when not
given), usage is counted over share: an organisation with 2 shares gets about twice the
accelerator-seconds of one with 1 before the other's tasks go first.

Starting (``schedule_queue``/``plan``): go down that order on a scratch copy of the nodes and
place what fits (``scoring.decide``). The first task that does not fit (the *head*) reserves
the node where it will fit soonest (the fewest resources still to be freed), and the tasks
behind it may *backfill* only into capacity outside that reservation (EASY backfilling
without runtimes: nothing that starts later can grab the capacity the head is waiting for, so
the head is never starved by a stream of small tasks). Only the first blocked task reserves.
A multi-node task waiting at the head (placed by the portal, not here) may hold nodes too
(``hold``): the tasks behind it in the order do not start on them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from . import filters
from .model import MILLI, NodeState, TaskRequest
from .scoring import Decision, Weights, decide, place

DEFAULT_ASSUMED_SECONDS = 3600.0


def charge(task: TaskRequest, assumed_seconds: float = DEFAULT_ASSUMED_SECONDS) -> float:
    """Usage a task will add, in accelerator-seconds (vCPU-seconds for CPU-only tasks)."""
    units = task.gpu_request_milli / MILLI if task.num_gpu else task.cpu_milli / MILLI
    return units * assumed_seconds


def fair_order(
    tasks: Iterable[TaskRequest],
    usage_by_org: Mapping | None = None,
    *,
    assumed_seconds: float = DEFAULT_ASSUMED_SECONDS,
    shares: Mapping | None = None,
) -> list[TaskRequest]:
    """The queue in the order tasks should start (see the module docstring)."""
    usage_by_org = usage_by_org or {}
    shares = shares or {}
    by_class: dict[int, dict] = {}
    for task in tasks:
        by_class.setdefault(task.priority, {}).setdefault(task.organization, []).append(task)
    ordered: list[TaskRequest] = []
    usage = {org: float(u) / shares.get(org, 1) for org, u in usage_by_org.items()}
    for priority in sorted(by_class, reverse=True):
        queues = by_class[priority]
        for q in queues.values():
            q.sort(key=lambda t: (t.submitted_at, t.id))
        # Heap of (usage so far, head's submission time, head id, org): least used first,
        # then whoever has waited longest.
        heap = [
            (usage.get(org, 0.0), q[0].submitted_at, q[0].id, i, org)
            for i, (org, q) in enumerate(queues.items())
        ]
        heapq.heapify(heap)
        pos = dict.fromkeys(queues, 0)
        while heap:
            used, _, _, i, org = heapq.heappop(heap)
            q = queues[org]
            task = q[pos[org]]
            ordered.append(task)
            pos[org] += 1
            used += charge(task, assumed_seconds) / shares.get(org, 1)
            usage[org] = used
            if pos[org] < len(q):
                nxt = q[pos[org]]
                heapq.heappush(heap, (used, nxt.submitted_at, nxt.id, i, org))
    return ordered


def queue_positions(
    tasks: Iterable[TaskRequest],
    usage_by_org: Mapping | None = None,
    *,
    assumed_seconds: float = DEFAULT_ASSUMED_SECONDS,
    shares: Mapping | None = None,
) -> dict[str, int]:
    """1-based place of each task id in the start order."""
    order = fair_order(tasks, usage_by_org, assumed_seconds=assumed_seconds, shares=shares)
    return {t.id: i for i, t in enumerate(order, 1)}


@dataclass(frozen=True, slots=True)
class Hold:
    """Nodes held for a task waiting outside this plan (a gang): tasks behind it (a lower
    priority, or the same and submitted later) may not start on them."""

    nodes: frozenset[str]
    priority: int
    submitted_at: float

    def keeps_out(self, task: TaskRequest) -> bool:
        return (task.priority, -task.submitted_at) < (self.priority, -self.submitted_at)


@dataclass(slots=True)
class QueuePlan:
    started: list[tuple[TaskRequest, Decision]] = field(default_factory=list)
    # task id -> node id held for it (the head that did not fit)
    reserved: dict[str, str] = field(default_factory=dict)
    backfilled: list[str] = field(default_factory=list)  # started ids that passed the head
    waiting: list[TaskRequest] = field(default_factory=list)
    # task id -> why it can never start on these nodes (filter reason code on every node)
    impossible: dict[str, str] = field(default_factory=dict)


def _shortfall(task: TaskRequest, node: NodeState) -> tuple | None:
    """How far ``node`` is from holding ``task`` (what must free up), or None if it never
    could (wrong model or region, drained, or too small even when empty)."""
    if node.drained or not filters.gpu_model_allowed(task, node):
        return None
    if not filters.region_allowed(task, node):
        return None
    if task.cpu_milli > node.cpu_milli_total or task.memory_mib > node.memory_mib_total:
        return None
    if task.num_gpu > node.gpu_count:
        return None
    if task.is_share:
        gpu_missing = max(0, task.gpu_milli - max(node.gpu_free, default=0))
    else:
        gpu_missing = max(0, task.num_gpu - node.whole_gpus_free) * MILLI
    return (
        gpu_missing,
        max(0, task.cpu_milli - node.cpu_milli_free),
        max(0, task.memory_mib - node.memory_mib_free),
    )


def schedule_queue(
    queued: Iterable[TaskRequest],
    nodes: Sequence[NodeState],
    usage_by_org: Mapping | None = None,
    *,
    operator: Weights | None = None,
    assumed_seconds: float = DEFAULT_ASSUMED_SECONDS,
    shares: Mapping | None = None,
    hold: Hold | None = None,
    **decide_options,
) -> QueuePlan:
    """What to start now, what is reserved, what waits. ``nodes`` are not changed (the plan
    runs on copies; the ``Decision``s point at those copies, look nodes up by id)."""
    scratch = [n.copy() for n in nodes]
    result = QueuePlan()
    head_blocked = False
    held: set[str] = set()
    for task in fair_order(queued, usage_by_org, assumed_seconds=assumed_seconds, shares=shares):
        if all(_shortfall(task, n) is None for n in scratch):
            codes = [filters.check(task, n) for n in scratch]
            result.impossible[task.id] = codes[0] if codes else "no_nodes"
            continue
        # A node of a model the task does not run on is no candidate for it (the decision
        # lists it no more than an order's lists the nodes of other models).
        kept_out = hold.nodes if hold is not None and hold.keeps_out(task) else frozenset()
        pool = [
            n
            for n in scratch
            if n.id not in held and n.id not in kept_out and filters.gpu_model_allowed(task, n)
        ]
        decision = decide(task, pool, operator=operator, **decide_options)
        if decision.node is not None:
            place(task, decision)
            result.started.append((task, decision))
            if head_blocked:
                result.backfilled.append(task.id)
            continue
        result.waiting.append(task)
        if not head_blocked:
            head_blocked = True
            gaps = [(s, i) for i, n in enumerate(scratch) if (s := _shortfall(task, n))]
            _, i = min(gaps)
            held.add(scratch[i].id)
            result.reserved[task.id] = scratch[i].id
    return result


def plan(
    queued: Iterable[TaskRequest],
    nodes: Sequence[NodeState],
    usage_by_org: Mapping | None = None,
    **options,
) -> list[tuple[TaskRequest, Decision]]:
    """The tasks to start now, in order, each with its placement decision."""
    return schedule_queue(queued, nodes, usage_by_org, **options).started
