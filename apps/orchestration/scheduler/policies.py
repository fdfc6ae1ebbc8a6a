"""Placement policies: which feasible node (and which GPUs on it) a task goes to.

Every policy answers ``rank(task, sig) -> (key, pick)`` for a node signature the task fits:
``key`` orders candidates (lower is better), ``pick`` says which GPU a sharing task takes (the
free share of that GPU; whole-GPU tasks always take fully free GPUs, which are all alike).
Because ``rank`` depends on nothing but the signature and the task, the engine
(``engine.Cluster``) can cache it and score one representative per group of identical nodes.

The portal-facing calls are ``choose(task, nodes)`` (the best node or None), ``place(task,
node)`` (take the resources, return a ``Placement``) and ``schedule(task, nodes)`` (both). They
look at every node, which is fine for a park; the benchmark goes through ``engine.Cluster``.

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
import random
from collections.abc import Iterable, Sequence

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


class RandomPolicy(Policy):
    """A uniformly random feasible node (seeded), and a random GPU that holds a share."""

    name = "random"
    randomized = True

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def rank(self, task, sig):
        if task.is_share:
            return (0,), self.rng.choice([g for g in sig[6] if g >= task.gpu_milli])
        return (0,), None

    def choose(self, task, nodes):
        feasible = [n for n in nodes if filters.check(task, n) is None]
        return self.rng.choice(feasible) if feasible else None


class BestFit(Policy):
    """Least resources left after placing (the simulator's ``BestFitScore``):
    ``left = 0.5 * CPU left / max CPU + 0.5 * GPU left / max GPU``, maxima over the cluster's
    nodes (so a small node the task fills beats a big one); node score
    ``int(100 * (1 - left))``, highest wins. Sharing tasks take the fullest GPU that holds
    them."""

    name = "best_fit"

    def __init__(self, cpu_weight=0.5, gpu_weight=0.5):
        self.weights = (cpu_weight, gpu_weight)
        self.max_cpu = self.max_gpu = 1

    def prepare(self, nodes):
        super().prepare(nodes)
        self.max_cpu = max((n.cpu_milli_total for n in nodes), default=1) or 1
        self.max_gpu = max((n.gpu_milli_total for n in nodes), default=1) or 1

    def rank(self, task, sig):
        wc, wg = self.weights
        left = (
            wc * (sig[4] - task.cpu_milli) / self.max_cpu
            + wg * (sum(sig[6]) - task.gpu_request_milli) / self.max_gpu
        )
        return (-int((1.0 - left) * 100),), self.default_pick(task, sig)


class GpuPacking(Policy):
    """The paper's GPU packing baseline (the simulator's ``GpuPackingScore``): first GPUs that
    are already shared, then fully free GPUs on a node already in use, and only then an idle
    node, the one with fewest GPUs. Node scores, highest wins:

    - the task fits on shared GPUs: ``max(100 - free% of those GPUs / 10, 50)``;
    - it needs fully free GPUs on a used node: ``max(50 - GPUs it takes, 33)``;
    - the node is idle: ``max(33 - its GPUs, its GPUs)``;
    - a CPU task scores 0 everywhere (it does not care).
    """

    name = "gpu_packing"

    def rank(self, task, sig):
        gpus = sig[6]
        if task.num_gpu == 0:
            return (0,), None
        full = sum(1 for g in gpus if g == MILLI)
        if full == len(gpus):
            return (-max(33 - full, full),), (MILLI if task.is_share else None)
        if task.is_share:
            pick = best_fit_share(task, gpus)  # least room first, as the simulator sorts
            if pick < MILLI:
                return (-max(100 - (pick * 100 // MILLI) // 10, 50),), pick
            return (-max(50 - 1, 33),), pick
        return (-max(50 - task.num_gpu, 33),), None


class DotProduct(Policy):
    """Tetris-style alignment (the simulator's ``DotProductScore``, max normalisation): the dot
    product of the task's demand and the node's free vector over (CPU, GPU), each normalised
    by the largest node's capacity, averaged over the dimensions.

    As in the simulator ("the larger the dot product, the lower the score": node score
    ``int(100 * (1 - dot))``), the *smallest* product wins: the task goes where there is least
    free of what it needs, which packs. For a sharing task the GPU dimension is the chosen
    GPU's share (per-GPU free / 1000), and the fullest GPU that holds it gives the smallest
    product.
    """

    name = "dot_product"

    def __init__(self):
        self.max_cpu = self.max_gpu = 1

    def prepare(self, nodes):
        super().prepare(nodes)
        self.max_cpu = max((n.cpu_milli_total for n in nodes), default=1) or 1
        self.max_gpu = max((n.gpu_milli_total for n in nodes), default=1) or 1

    def rank(self, task, sig):
        cpu = (task.cpu_milli / self.max_cpu) * (sig[4] / self.max_cpu)
        gpus = sig[6]
        pick = None
        if task.num_gpu == 0:
            gpu = 0.0
        elif task.is_share:
            pick = best_fit_share(task, gpus)
            gpu = (task.gpu_milli / MILLI) * (pick / MILLI)
        else:
            gpu = (task.gpu_request_milli / self.max_gpu) * (sum(gpus) / self.max_gpu)
        return (-int(100 * (1.0 - (cpu + gpu) / 2)),), pick


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


POLICY_NAMES = ("random", "best_fit", "gpu_packing", "dot_product", "fgd", "loam")


def make_policy(
    name: str,
    *,
    seed: int = 0,
    workload: Iterable[TaskRequest] | None = None,
    distribution: ShapeDistribution | None = None,
) -> Policy:
    """A fresh policy by name.

    FGD and loam score against a task-type distribution: pass ``distribution``, or the
    ``workload`` to learn it from (FGD as the simulator: the 95 % most popular (CPU, GPU)
    types; loam: ``Loam.distribution_for``).
    """
    if name == "random":
        return RandomPolicy(seed)
    if name == "best_fit":
        return BestFit()
    if name == "gpu_packing":
        return GpuPacking()
    if name == "dot_product":
        return DotProduct()
    if name in ("fgd", "loam"):
        from .loam import Loam

        if distribution is None:
            if workload is None:
                raise ValueError(f"{name} needs a workload or a ShapeDistribution")
            workload = list(workload)
            distribution = (
                ShapeDistribution.from_tasks(workload, coverage=0.95, include_memory=False)
                if name == "fgd"
                else Loam.distribution_for(workload)
            )
        return FGD(distribution) if name == "fgd" else Loam(distribution)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
