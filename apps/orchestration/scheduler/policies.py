"""Placement policies: which feasible node (and which GPUs on it) a task goes to.

Every policy answers ``rank(task, sig) -> (key, pick)`` for a node signature the task fits:
``key`` orders candidates (lower is better), ``pick`` says which GPU a sharing task takes (the
free share of that GPU; whole-GPU tasks always take fully free GPUs, which are all alike).
Because ``rank`` depends on nothing but the signature and the task, the engine
(``engine.Cluster``) can cache it and score one representative per group of identical nodes.

The portal-facing calls are ``choose(task, nodes)`` (the best node or None), ``place(task,
node)`` (take the resources, return a ``Placement``) and ``schedule(task, nodes)`` (both). They
look at every node, which is fine for a park; the benchmark goes through ``engine.Cluster``.

FGD (which ``loam`` builds on) lives here; the benchmark's baselines are in ``baselines``.
Baselines and FGD follow the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator,
``pkg/simulator/plugin``), including its 0..100 integer node scores (keys are the negated
scores): equal scores go to the first node in the list, as the simulator's patched
kube-scheduler takes the lexicographically smallest node name (openb's files are in name
order). Reproduced on openb this way, FGD lands within 0.1 point of the paper on four of five
pod lists (bench/scheduler_openb.py); the baselines land 0.3-3.2 points above the paper's, as
their GPU choice and tie-breaking follow the simulator less exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from . import filters
from .fragmentation import ShapeDistribution
from .model import MILLI, NodeSig, NodeState, Placement, TaskRequest, apply, sig_after, signature


def best_fit_share(task: TaskRequest, gpus: tuple[int, ...]) -> int:
    """The free share of the GPU with the least room that still holds a sharing task."""
    need = task.gpu_milli
    for g in reversed(gpus):  # gpus are sorted most-free first
        if g >= need:
            return g
    raise ValueError(f"{task.id}: no GPU holds {need}")


def gpu_indices(task: TaskRequest, node: NodeState, pick: int | None) -> tuple[int, ...]:
    """Turn a policy's pick into device indices on ``node`` (lowest index among equals)."""
    if task.num_gpu == 0:
        return ()
    if task.gpu_milli < MILLI:
        return (node.gpu_free.index(pick),)
    chosen = [i for i, free in enumerate(node.gpu_free) if free == MILLI][: task.num_gpu]
    if len(chosen) < task.num_gpu:
        raise ValueError(f"{task.id}: {node.id} has fewer than {task.num_gpu} free GPUs")
    return tuple(chosen)


class Policy:
    name = "policy"
    randomized = False  # True: the engine samples nodes instead of caching ranks
    random_ties = False  # True: equal keys go to a uniformly random node among them

    def prepare(self, nodes: Sequence[NodeState]) -> None:
        """Learn cluster-wide constants before scheduling (most policies need none)."""
        self._prepared = True

    def rank(self, task: TaskRequest, sig: NodeSig) -> tuple[tuple, int | None]:
        raise NotImplementedError

    def default_pick(self, task: TaskRequest, sig: NodeSig) -> int | None:
        return best_fit_share(task, sig[6]) if task.is_share else None

    # --- portal-facing calls -------------------------------------------------------------

    def choose(self, task: TaskRequest, nodes: Sequence[NodeState]) -> NodeState | None:
        if not getattr(self, "_prepared", False):
            self.prepare(nodes)
        best = best_key = None
        for node in nodes:
            if filters.check(task, node) is not None:
                continue
            key, _ = self.rank(task, signature(node))
            if best is None or key < best_key:
                best, best_key = node, key
        return best

    def place(self, task: TaskRequest, node: NodeState) -> Placement:
        if filters.check(task, node) is not None:
            raise ValueError(f"{task.id} does not fit {node.id}: {filters.check(task, node)}")
        _, pick = self.rank(task, signature(node))
        return apply(node, task, gpu_indices(task, node, pick))

    def schedule(self, task: TaskRequest, nodes: Sequence[NodeState]) -> Placement | None:
        node = self.choose(task, nodes)
        return None if node is None else self.place(task, node)


class FGD(Policy):
    """Fragmentation Gradient Descent: the node (and GPU) where the expected fragmentation
    F_n grows least (``fragmentation`` module).

    As in the paper's simulator (``fgd_score.go``), the node score is
    ``int(100 * sigmoid(-ΔF / 1000))`` with ΔF in expected milli-GPU, highest wins, ties to
    the first node; on one node, the GPU with the best score (least room first among equals).
    ``quantize=False`` ranks by the exact ΔF instead (an integer: total count * ΔF).
    """

    name = "fgd"

    def __init__(self, distribution: ShapeDistribution, *, quantize: bool = True):
        self.dist = distribution
        self.quantize = quantize

    def delta(self, task: TaskRequest, sig: NodeSig) -> tuple[int, int | None]:
        """(total * ΔF, pick) for the best GPU choice on this node (exact)."""
        weighted = self.dist.weighted
        before = weighted(sig)
        if not task.is_share:
            return weighted(sig_after(sig, task)) - before, None
        best = pick = None
        last = -1
        for g in reversed(sig[6]):  # least room first, so ties keep the fullest GPU
            if g < task.gpu_milli or g == last:
                continue
            last = g
            d = weighted(sig_after(sig, task, g)) - before
            if best is None or d < best:
                best, pick = d, g
        return best, pick

    def score(self, weighted_delta: int) -> int:
        """The simulator's 0..100 node score for a (total-scaled) ΔF."""
        x = -weighted_delta / (self.dist.total * 1000.0)
        if x < -700:  # math.exp overflow guard; the score is 0 there anyway
            return 0
        return int(100.0 / (1.0 + math.exp(-x)))

    def rank(self, task, sig):
        if not self.quantize:
            d, pick = self.delta(task, sig)
            return (d,), pick
        if not task.is_share:
            d, _ = self.delta(task, sig)
            return (-self.score(d),), None
        weighted = self.dist.weighted
        before = weighted(sig)
        best = pick = None
        last = -1
        for g in reversed(sig[6]):
            if g < task.gpu_milli or g == last:
                continue
            last = g
            sc = self.score(weighted(sig_after(sig, task, g)) - before)
            if best is None or sc > best:
                best, pick = sc, g
        return (-best,), pick
