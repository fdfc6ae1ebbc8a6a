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
"""

from __future__ import annotations

from collections.abc import Iterable

from .fragmentation import ShapeDistribution
from .model import NodeSig, TaskRequest, sig_after
from .policies import FGD


class Loam(FGD):
    name = "loam"

    def __init__(self, distribution: ShapeDistribution):
        super().__init__(distribution, quantize=True)

    @staticmethod
    def distribution_for(workload: Iterable[TaskRequest]) -> ShapeDistribution:
        """The task-type histogram loam wants: every type, memory included."""
        return ShapeDistribution.from_tasks(workload, coverage=1.0, include_memory=True)

    def rank(self, task: TaskRequest, sig: NodeSig):
        weighted = self.dist.weighted
        before = weighted(sig)
        if not task.is_share:
            score = self.score(weighted(sig_after(sig, task)) - before)
            if task.num_gpu == 0:
                return (-score, sum(sig[6])), None
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
        return (best[0],), pick
