"""Multi-node (gang) training tasks: N nodes × M whole cards, placed all or nothing on one pool.

Volcano's `minAvailable` idea: a gang starts only when every member can, so no node holds cards
for a job that cannot run. A queue pass (`scheduling.schedule_queue_pass`) plans its gang tasks
first, in queue order, on the nodes' free room it read (`plan_gang`); the engine then plans the
one-node tasks on the nodes no gang took, and the pass locks every chosen node once and takes
their rooms on the one reservation path (`reservations.TaskReservation.take`), all of a gang's
nodes or none.

Only pools whose driver runs a job across nodes (Capability.GANG: Slurm, the simulator) take a
gang; an agent server runs a task on itself alone.
"""

from dataclasses import dataclass

from apps.orchestration import adapter
from apps.orchestration.scheduler import MILLI


@dataclass
class GangPlan:
    """Where a gang task goes: its pool, its nodes (in the order Slurm would list them) and
    what was weighed, kept in the Placement's weights as "gang"."""

    pool: object
    views: list[adapter.NodeView]
    record: dict


def _fits(view: adapter.NodeView, task) -> bool:
    state = view.state
    cards = task.accelerator_milli // MILLI
    return (
        not state.drained
        and sum(1 for free in state.gpu_free if free == MILLI) >= cards
        and state.cpu_milli_free >= task.vcpu * MILLI
        and state.memory_mib_free >= task.ram_gb * 1024
    )


def plan_gang(task, views_by_pool: dict, *, refused: dict, gang_pools: set, prices: dict):
    """The pool and nodes for `task`, or None when no pool has `task.node_count` nodes with
    room now. Among pools that fit, the cheapest per hour wins, then the one whose chosen nodes
    keep the fewest idle cards (best fit, as one-node tasks are placed); on the pool, the
    nodes with the fewest idle cards that still fit. What it chooses is taken off the views'
    free room, so the next gang of the pass sees it gone."""
    cards = task.accelerator_milli // MILLI
    pools, best = [], None
    for pool_id, views in views_by_pool.items():
        pool = views[0].pool
        summary = {
            "pool": pool.name,
            "pool_id": pool_id,
            "nodes": len(views),
            "fitting": 0,
            "hourly_minor": None,
            "left_free": None,
            "rejected": None,
        }
        if pool_id in refused:
            summary["rejected"] = refused[pool_id]
        elif pool_id not in gang_pools:
            summary["rejected"] = "single_node"
        else:
            fitting = sorted(
                (v for v in views if _fits(v, task)),
                key=lambda v: (sum(1 for f in v.state.gpu_free if f == MILLI), v.node.pk),
            )
            summary["fitting"] = len(fitting)
            if len(fitting) < task.node_count:
                summary["rejected"] = "gang_nodes"
            else:
                chosen = fitting[: task.node_count]
                left = sum(sum(1 for f in v.state.gpu_free if f == MILLI) - cards for v in chosen)
                hourly = adapter.task_hourly_minor(prices[pool_id], task.total_accelerator_milli)
                summary.update(hourly_minor=hourly, left_free=left)
                key = (hourly, left, pool_id)
                if best is None or key < best[0]:
                    best = (key, pool, chosen)
        pools.append(summary)
    if best is None:
        return None, pools
    _key, pool, chosen = best
    chosen.sort(key=lambda v: v.node.hostname)
    for summary in pools:
        summary["chosen"] = summary["pool_id"] == pool.pk
    for view in chosen:
        state = view.state
        idle = [i for i, free in enumerate(state.gpu_free) if free == MILLI][:cards]
        for i in idle:
            state.gpu_free[i] = 0
        state.cpu_milli_free -= task.vcpu * MILLI
        state.memory_mib_free -= task.ram_gb * 1024
    record = {
        "nodes": [v.node.hostname for v in chosen],
        "node_count": task.node_count,
        "cards_per_node": cards,
        "pool": pool.name,
        "pools": pools,
    }
    return GangPlan(pool=pool, views=chosen, record=record), pools


def hold_for_gang(task, views_by_pool: dict, *, refused: dict, gang_pools: set) -> list | None:
    """The nodes a waiting gang at the head of the queue holds, so that tasks behind it do not
    keep taking the room it waits for (EASY backfill's reservation, for N nodes): on the pool
    it may use that is nearest to holding it, the `node_count` nodes with the fewest cards
    still to free (then vCPU and RAM, then by id); None where no pool could ever hold it."""
    cards = task.accelerator_milli // MILLI
    best = None
    for pool_id, views in views_by_pool.items():
        if pool_id in refused or pool_id not in gang_pools:
            continue
        gaps = []
        for view in views:
            state = view.state
            if (
                state.drained
                or len(state.gpu_free) < cards
                or state.cpu_milli_total < task.vcpu * MILLI
                or state.memory_mib_total < task.ram_gb * 1024
            ):
                continue
            idle = sum(1 for free in state.gpu_free if free == MILLI)
            gap = (
                max(0, cards - idle),
                max(0, task.vcpu * MILLI - state.cpu_milli_free),
                max(0, task.ram_gb * 1024 - state.memory_mib_free),
                view.node.pk,
            )
            gaps.append((gap, view))
        if len(gaps) < task.node_count:
            continue
        gaps.sort(key=lambda g: g[0])
        chosen = gaps[: task.node_count]
        key = (sum(g[0][0] for g in chosen), pool_id)
        if best is None or key < best[0]:
            best = (key, [view for _gap, view in chosen])
    return best[1] if best else None
