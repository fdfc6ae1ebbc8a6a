"""``loam``: our placement policy, FGD with three changes that each measured better on openb.

Starting point: FGD as in the paper's simulator (``policies.FGD``: node score
``int(100 * sigmoid(-ΔF / 1000))``, ties to the first node). Kept as is, because the coarse
score is itself part of why FGD works: nodes within ~40 milli-GPU of expected fragmentation
tie, and the fixed node order then packs them like first fit, which keeps whole nodes idle for
the big multi-GPU tasks. Ranking by the exact ΔF instead loses about one point of allocation
on openb's default list; best-fit or packing tie-breaks lose too (bench/scheduler_openb.py).

What loam changes:

1. Task types include memory. The simulator's types are (CPU, GPU) only, so a node short of
   memory still counts as able to serve a type; here it does not, and FGD's fragment then
   covers the GPUs stranded by memory as well as by CPU (largest gain on the CPU-heavy list).
2. The whole histogram, not the 95 % most popular types: rare types are the ones that fill
   small leftovers (a 160-milli task in the 190 an 810-milli task leaves), so they matter to
   exactly the fragments that decide the end state.
3. On one node, a sharing task takes, among the GPUs with the best score, the one with the
   smallest exact ΔF (then the fullest). The coarse score groups nodes; inside a node nothing
   is gained by ignoring the exact difference.

And one change for the portal rather than for openb: among equal scores a CPU-only task takes
the node with the least free GPU, so CPU work lands on CPU nodes (or on full GPU nodes) by
itself, not because CPU nodes happen to come first in the node list.

Power (issue 17, against PWR+FGD from Lettich et al., CCGrid 2025; ``power`` module): after
those two keys a CPU-only task takes the node whose estimated power grows least under the
paper's step model, i.e. a CPU socket already awake rather than a sleeping one. It is the
last tie-break and only moves CPU-only tasks among equally scored nodes: allocation came out
identical on all five openb lists, and the paper-model power drops 0.8-1.5 %. Stronger power
terms were measured and cost allocation (bench/scheduler_openb.py, README "The openb
benchmark"): a power tie-break for GPU tasks (-0.7 point on default), or blending a 0..100
power score into the FGD score as PWR+FGD does (``power_weight``: -0.6 point at 0.02, -1.0 at
0.05, below FGD's allocation). ``power_weight`` stays, 0 by default, to draw that curve.
"""

from __future__ import annotations

from collections.abc import Iterable

from .fragmentation import ShapeDistribution
from .model import NodeSig, TaskRequest, sig_after
from .policies import FGD
from .power import PowerModel, PowerScore


class Loam(FGD):
    name = "loam"

    def __init__(
        self,
        distribution: ShapeDistribution,
        *,
        power_weight: float = 0.0,
        power: PowerModel | None = None,
    ):
        super().__init__(distribution, quantize=True)
        if not 0 <= power_weight <= 1:
            raise ValueError(f"power_weight {power_weight} is outside 0..1")
        self.power = power if power is not None else PowerModel(step=True)
        self.power_weight_milli = round(power_weight * 1000)
        self.power_score = PowerScore(self.power)

    def prepare(self, nodes):
        super().prepare(nodes)
        self.power_score.prepare(nodes)

    @staticmethod
    def distribution_for(workload: Iterable[TaskRequest]) -> ShapeDistribution:
        """The task-type histogram loam wants: every type, memory included."""
        return ShapeDistribution.from_tasks(workload, coverage=1.0, include_memory=True)

    def rank(self, task: TaskRequest, sig: NodeSig):
        weighted = self.dist.weighted
        before = weighted(sig)
        w = self.power_weight_milli
        if not task.is_share:
            score = self.score(weighted(sig_after(sig, task)) - before)
            if w:  # the trade-off knob: PWR+FGD's blend, with loam's FGD
                score = w * self.power_score.score(task, sig) + (1000 - w) * score
            if task.num_gpu == 0:
                cpu_power = self.power.cpu_power  # a CPU task changes only the CPU's draw
                watts = cpu_power(sig[0], sig[2], sig[4] - task.cpu_milli) - cpu_power(
                    sig[0], sig[2], sig[4]
                )
                return (-score, sum(sig[6]), int(watts)), None
            return (-score,), None
        best = pick = None
        last = -1
        for g in reversed(sig[6]):  # least room first: equal (score, ΔF) keep the fullest GPU
            if g < task.gpu_milli or g == last:
                continue
            last = g
            d = weighted(sig_after(sig, task, g)) - before
            candidate = (-self.score(d), d)
            if best is None or candidate < best:
                best, pick = candidate, g
        score = -best[0]
        if w:
            score = w * self.power_score.score(task, sig) + (1000 - w) * score
        return (-score,), pick
