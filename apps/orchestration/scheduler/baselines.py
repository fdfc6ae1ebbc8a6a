"""Baselines for the openb benchmark (bench/scheduler_openb.py), not used by the portal:
random, best fit, GPU packing and dot product as in the FGD paper's simulator, PWR and PWR+FGD
from the power-aware paper (Lettich et al., CCGrid 2025), and ``make_policy`` to build any
policy by name (these, FGD and loam).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from . import filters
from .fragmentation import ShapeDistribution
from .model import MILLI, TaskRequest
from .policies import FGD, Policy, best_fit_share
from .power import PowerModel, PowerScore, power_delta


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


class _ScaledToLargestNode(Policy):
    """Measures CPU and GPU against the largest node's, as the simulator's scores do."""

    max_cpu = max_gpu = 1

    def prepare(self, nodes):
        super().prepare(nodes)
        self.max_cpu = max((n.cpu_milli_total for n in nodes), default=1) or 1
        self.max_gpu = max((n.gpu_milli_total for n in nodes), default=1) or 1


class BestFit(_ScaledToLargestNode):
    """Least resources left after placing (the simulator's ``BestFitScore``):
    ``left = 0.5 * CPU left / max CPU + 0.5 * GPU left / max GPU``, maxima over the cluster's
    nodes (so a small node the task fills beats a big one); node score
    ``int(100 * (1 - left))``, highest wins. Sharing tasks take the fullest GPU that holds
    them."""

    name = "best_fit"

    def __init__(self, cpu_weight=0.5, gpu_weight=0.5):
        self.weights = (cpu_weight, gpu_weight)

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


class DotProduct(_ScaledToLargestNode):
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


class PWR(Policy):
    """PWR (Lettich et al., CCGrid 2025, section on the PWR policy): score a node by how much
    the cluster's estimated power grows if the task lands there; the smallest increase wins.
    A sharing task goes to the GPU on that node whose use grows the power least.

    The paper measures the increase in whole watts with its step power model (``power.PAPER``:
    a busy GPU, or a socket with one busy core, draws full power), which is the default here;
    so PWR packs shares onto GPUs already busy and CPU work onto sockets already awake, and
    otherwise prefers the cheapest GPU model. The paper then min-max normalises the increases
    over the feasible nodes to 0..100; for PWR alone that is the same order (up to the integer
    rounding), so the key is the increase itself. Ties go to the first node, as elsewhere.
    """

    name = "pwr"

    def __init__(self, power: PowerModel | None = None):
        self.power = power if power is not None else PowerModel(step=True)

    def rank(self, task, sig):
        d, pick = power_delta(self.power, task, sig)
        return (int(d),), pick


class PWRFGD(FGD):
    """PWR+FGD: the paper's linear combination of the two kube-scheduler scores,
    ``w * PWR + (1 - w) * FGD``, each on 0..100 (the paper runs it as scheduler-plugin weights
    PWR 500/FGD 500, 200/800, 100/900 and 50/950; ``PWR_FGD_WEIGHT`` = 0.2, i.e. 200/800, is
    the default here). As in the paper's setup, FGD (the heavier plugin) picks the GPU that a
    sharing task takes on the chosen node; PWR scores the node with its own best GPU.

    One departure, forced by the engine (which caches a node's rank by its signature, so a
    rank cannot depend on the other nodes): the paper normalises PWR's increases by their
    minimum and maximum over the feasible nodes at each decision; here an increase ``d`` is
    normalised over the range it can take on this cluster, ``100 * (1 - d / D)`` with ``D`` the
    increase on the most power-hungry idle node type the task fits (an idle node is where an
    increase is largest). Early on, when idle nodes of every type are feasible, the two agree
    up to the minimum (0 for most tasks once GPUs are busy).
    """

    name = "pwr_fgd"

    def __init__(
        self,
        distribution: ShapeDistribution,
        *,
        pwr_weight: float = 0.2,
        power: PowerModel | None = None,
    ):
        super().__init__(distribution, quantize=True)
        if not 0 <= pwr_weight <= 1:
            raise ValueError(f"pwr_weight {pwr_weight} is outside 0..1")
        self.pwr_weight = pwr_weight
        self._weight_milli = round(pwr_weight * 1000)
        self.power = power if power is not None else PowerModel(step=True)
        self.power_score = PowerScore(self.power)

    def prepare(self, nodes):
        super().prepare(nodes)
        self.power_score.prepare(nodes)

    def rank(self, task, sig):
        (neg_fgd,), pick = super().rank(task, sig)
        pwr = self.power_score.score(task, sig)
        # Integer plugin weights (per mille), as kube-scheduler sums weighted scores.
        w = self._weight_milli
        return (-(w * pwr - (1000 - w) * neg_fgd),), pick


PWR_FGD_WEIGHT = 0.2

POLICY_NAMES = (
    "random",
    "best_fit",
    "gpu_packing",
    "dot_product",
    "fgd",
    "loam",
    "pwr",
    "pwr_fgd",
)


def make_policy(
    name: str,
    *,
    seed: int = 0,
    workload: Iterable[TaskRequest] | None = None,
    distribution: ShapeDistribution | None = None,
    pwr_weight: float | None = None,
    loam_power_weight: float = 0.0,
) -> Policy:
    """A fresh policy by name.

    FGD, PWR+FGD and loam score against a task-type distribution: pass ``distribution``, or
    the ``workload`` to learn it from (FGD and PWR+FGD as the simulator: the 95 % most popular
    (CPU, GPU) types; loam: ``Loam.distribution_for``). ``pwr_weight`` sets PWR+FGD's weight
    (default ``PWR_FGD_WEIGHT``), ``loam_power_weight`` loam's (default 0: see ``loam``). PWR,
    PWR+FGD and loam each get a fresh step power model (cold memo).
    """
    if name == "pwr":
        return PWR()
    if name == "random":
        return RandomPolicy(seed)
    if name == "best_fit":
        return BestFit()
    if name == "gpu_packing":
        return GpuPacking()
    if name == "dot_product":
        return DotProduct()
    if name in ("fgd", "loam", "pwr_fgd"):
        from .loam import Loam

        if distribution is None:
            if workload is None:
                raise ValueError(f"{name} needs a workload or a ShapeDistribution")
            workload = list(workload)
            distribution = (
                Loam.distribution_for(workload)
                if name == "loam"
                else ShapeDistribution.from_tasks(workload, coverage=0.95, include_memory=False)
            )
        if name == "pwr_fgd":
            weight = PWR_FGD_WEIGHT if pwr_weight is None else pwr_weight
            return PWRFGD(distribution, pwr_weight=weight)
        if name == "loam":
            return Loam(distribution, power_weight=loam_power_weight)
        return FGD(distribution)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
