"""GPU fragmentation as defined by FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23).

A node's free GPU capacity is a *fragment* for a task type m when a task of type m cannot use
it. With p_m the popularity of type m in the workload, the node's expected fragmentation is

    F_n = sum_m p_m * F_n(m)        (milli-GPU)

and F_n(m), following the paper and its simulator (hkust-adsl/kubernetes-scheduler-simulator,
``pkg/utils/frag.go``: ``NodeGpuShareFragAmount``):

- m asks for no GPU (a CPU task): all free GPU milli is fragment (m can never use it);
- m cannot run on the node's GPU model, or the node lacks CPU, memory, or enough GPUs with
  ``>= m.gpu_milli`` free: all free GPU milli is fragment;
- otherwise: the free milli on GPUs with less than ``m.gpu_milli`` free (for a whole-GPU type,
  every partially used GPU; for a sharing type, every GPU with too small a share left).

FGD places a task on the node (and GPU) whose F_n grows least. Popularities are kept as integer
counts so that F_n, scaled by the total count, is an exact integer: ties are real ties, not
float noise, and tie-breaking stays deterministic.

The shape of a task type is (cpu_milli, memory_mib, num_gpu, gpu_milli, allowed models).
The simulator leaves memory out of the shape; ``include_memory`` chooses (default: in, since a
node short of memory cannot serve the type any more than one short of CPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .model import MILLI, NodeSig, NodeState, TaskRequest, signature

ShapeKey = tuple[int, int, int, int, frozenset]


class ShapeDistribution:
    """The task-type histogram FGD scores against (integer counts, popularity = count/total).

    Build it from the workload (``from_tasks``, as the paper does with its "typical pods": the
    most popular types covering ``coverage`` of all tasks) or learn it online with ``observe``.
    Results for a node state are memoised; ``observe`` clears the memo.
    """

    def __init__(self, counts: dict[ShapeKey, int] | None = None, *, include_memory: bool = True):
        self.include_memory = include_memory
        self._counts: Counter = Counter()
        for key, count in (counts or {}).items():
            if count > 0:
                self._counts[key] += count
        self._reset()

    @classmethod
    def from_tasks(
        cls, tasks: Iterable[TaskRequest], *, coverage: float = 0.95, include_memory: bool = True
    ) -> ShapeDistribution:
        dist = cls(include_memory=include_memory)
        counts: Counter = Counter(dist.key_of(t) for t in tasks)
        total = sum(counts.values())
        kept: dict[ShapeKey, int] = {}
        cum = 0
        # Most popular first; equal counts in a fixed order so the cut is reproducible.
        for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], _sort_key(kv[0]))):
            if cum >= coverage * total:
                break
            kept[key] = count
            cum += count
        dist._counts.update(kept)
        dist._reset()
        return dist

    def copy(self) -> ShapeDistribution:
        """The same counts with an empty memo (each benchmark run starts cold)."""
        return ShapeDistribution(dict(self._counts), include_memory=self.include_memory)

    def key_of(self, task: TaskRequest) -> ShapeKey:
        return (
            task.cpu_milli,
            task.memory_mib if self.include_memory else 0,
            task.num_gpu,
            task.gpu_milli,
            task.gpu_models if task.num_gpu else frozenset(),
        )

    def observe(self, task: TaskRequest, weight: int = 1) -> None:
        self._counts[self.key_of(task)] += weight
        self._reset()

    def _reset(self) -> None:
        self.total = sum(self._counts.values())
        self._by_model: dict[str, list[tuple[int, int, int, int, int]]] = {}
        self._cache: dict[NodeSig, int] = {}
        self.version = getattr(self, "version", 0) + 1

    def items(self) -> list[tuple[ShapeKey, int]]:
        return sorted(self._counts.items(), key=lambda kv: (-kv[1], _sort_key(kv[0])))

    def popularity(self, key: ShapeKey) -> float:
        return self._counts.get(key, 0) / self.total if self.total else 0.0

    def _gpu_shapes(self, model: str) -> list[tuple[int, int, int, int, int]]:
        """GPU task types that may run on ``model``: (cpu, mem, num_gpu, gpu_milli, count)."""
        shapes = self._by_model.get(model)
        if shapes is None:
            shapes = [
                (cpu, mem, num, milli, count)
                for (cpu, mem, num, milli, models), count in self._counts.items()
                if num > 0 and model and (not models or model in models)
            ]
            # Group equal gpu_milli together: the per-milli GPU scan below is then shared.
            shapes.sort(key=lambda s: (s[3], s[2], s[0], s[1]))
            self._by_model[model] = shapes
        return shapes

    def weighted(self, sig: NodeSig) -> int:
        """``total * F_n`` for a node signature: an exact integer (see the module docstring).

        F_n = sum over all types of p_m * free, minus, for each type that fits, p_m * the free
        milli on the GPUs that can serve it (those with at least ``gpu_milli`` free).
        """
        cached = self._cache.get(sig)
        if cached is not None:
            return cached
        gpus = sig[6]
        free = sum(gpus)
        if free == 0:
            value = 0
        else:
            value = self.total * free
            cpu_free, mem_free = sig[4], sig[5]
            last_milli = -1
            cnt = usable = 0
            for cpu, mem, num, milli, count in self._gpu_shapes(sig[0]):
                if cpu > cpu_free or mem > mem_free:
                    continue
                if milli != last_milli:
                    # GPUs are sorted most-free first: the usable ones are a prefix.
                    last_milli, cnt, usable = milli, 0, 0
                    for g in gpus:
                        if g < milli:
                            break
                        cnt += 1
                        usable += g
                if cnt >= num:
                    value -= count * usable
        self._cache[sig] = value
        return value

    def fragmentation(self, node: NodeState | NodeSig) -> float:
        """Expected fragmented GPU of a node, in milli-GPU."""
        if not self.total:
            return 0.0
        sig = node if isinstance(node, NodeSig) else signature(node)
        return self.weighted(sig) / self.total

    def fragmentation_by_type(self, node: NodeState) -> list[tuple[ShapeKey, float, int]]:
        """(type, popularity, F_n(type) in milli-GPU) for each type: the breakdown behind
        ``fragmentation``, straight from the definition (no shortcuts; for tests and
        explanations)."""
        out = []
        free = node.gpu_milli_free
        for key, count in self.items():
            cpu, mem, num, milli, models = key
            usable_model = num > 0 and node.gpu_model and (not models or node.gpu_model in models)
            serves = (
                usable_model
                and node.cpu_milli_free >= cpu
                and node.memory_mib_free >= mem
                and sum(1 for g in node.gpu_free if g >= milli) >= num
            )
            # Served: only GPUs too small for the type are fragment; otherwise all free GPU is.
            frag = sum(g for g in node.gpu_free if g < milli) if serves else free
            out.append((key, count / self.total, frag))
        return out


def _sort_key(key: ShapeKey) -> tuple:
    cpu, mem, num, milli, models = key
    return (num, milli, cpu, mem, sorted(models))


def cluster_fragmentation(nodes: Iterable[NodeState], dist: ShapeDistribution) -> float:
    """Sum of F_n over the nodes (milli-GPU)."""
    return sum(dist.fragmentation(n) for n in nodes)


def gpu_only(dist: ShapeDistribution) -> ShapeDistribution:
    """The same distribution without CPU-only types: what a GPU task would see.

    Used for the fragmentation *ratio* (fragment / free GPU), where counting CPU tasks, which
    can use no GPU at all, would only add a constant.
    """
    counts = {k: c for k, c in dist.items() if k[2] > 0}
    return ShapeDistribution(counts, include_memory=dist.include_memory)


__all__ = ["MILLI", "ShapeDistribution", "cluster_fragmentation", "gpu_only"]
