"""Estimated electrical power of nodes and of the cluster (pure Python, no Django).

The model and its figures follow "Power- and Fragmentation-aware Online Scheduling for GPU
Datacenters" (Lettich et al., CCGrid 2025, arXiv 2412.17484), whose code is the public
repository Fr4nz83/PWR-plugin-kubernetes (a fork of the FGD simulator). Only CPUs and GPUs draw
power; each has an idle and a full-load figure, and every node is always on: a node with no
load draws its idle power (CPU sockets idle + every GPU idle). The paper never powers a node
off (``NodeResource.GetEnergyConsumptionNode`` in ``pkg/type/resource.go`` sums idle and busy
parts for every node; ``pkg/simulator/analysis.go`` adds up all nodes).

Figures, in watts (idle, full load):

GPUs: ``pkg/type/open-gpu-share/utils/const.go``, ``MapGpuTypeEnergyConsumption``; the full
figure is the vendor TDP (also in ../shared/data/accelerators.csv for the A100: 400 W), the
idle figures are the repository's, with the sources its comments give:

- T4 10 / 70 (NVIDIA T4 product page), A10 30 / 150 (NVIDIA A10 datasheet),
- P100 25 / 250, V100M16 and V100M32 30 / 300 (SC20 poster rpost131s2, idle and TDP),
- A100 50 / 400 (NVIDIA Ampere architecture whitepaper);
- G2 and G3 are undisclosed models in openb; as the repository does
  (``MapGpuTypeModelEnergy``: "Assume these are A10s" / "A100s", from their nodes' CPU and
  memory), G2 takes the A10 figures and G3 the A100 figures.
- A model not listed (e.g. in a test trace) takes ``UNKNOWN_GPU``, the P100's figures: our
  choice, a 250 W-TDP data-centre card, not the paper's (its simulator has no fallback).

CPUs: same file, ``MapCpuTypeEnergyConsumption`` (idle / full per socket, cores per socket;
full = Intel's TDP for the part; the idle figures are the repository's own estimates, its
comment says "TODO: check if there are better references for the power consumed in idle
state"): Xeon E5-2682 v4 15 / 120 W, 16 cores; Xeon Platinum 8163 20 / 165 W, 24 cores; Xeon
Gold 6326 20 / 185 W, 16 cores; Xeon Platinum 8369B 20 / 270 W, 32 cores. Which CPU a node has
follows the GPU it carries (``data/2 - Add CPU models to YAML nodes.ipynb``): CPU-only and P100
nodes E5-2682 v4, T4 nodes 8163, V100 nodes 6326, A10/G2/A100/G3 nodes 8369B. A node's
sockets: one vCPU is half a physical core, so ``ceil(ceil(vCPU / 2) / cores per socket)``
(as ``GetEnergyConsumptionNode``).

Two ways to turn load into power:

- ``PowerModel()`` (proportional, the default, which the benchmark reports): node power =
  CPU idle + (CPU full - CPU idle) x CPU utilisation (allocated / total milli-CPU) + for each
  GPU, idle + (full - idle) x its allocated milli-GPU / 1000. CPU idle and full are the
  per-socket figures times the node's sockets.
- ``PowerModel(step=True)`` (the paper's own simplification, ``PAPER``): a GPU with any share
  allocated draws its full power ("we are assuming that a GPU consumes max power even if it is
  minimally used", ``pwr_score.go``), and a CPU socket draws full power as soon as one of its
  cores is allocated: busy physical cores = cores - floor(free vCPU / 2), busy sockets =
  ``ceil(busy cores / cores per socket)``. This is what the paper's PWR minimises.

Cluster power is the sum over nodes. Watts are floats; ``node_power`` results per node
signature are memoised (there are few distinct signatures).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .filters import sig_fits
from .model import MILLI, NodeSig, NodeState, TaskRequest, sig_after, signature


@dataclass(frozen=True, slots=True)
class Device:
    """Idle and full-load power of one GPU or one CPU socket, in watts."""

    idle_w: float
    full_w: float
    cores: int = 0  # physical cores per socket (CPUs only)

    def __post_init__(self):
        if not 0 <= self.idle_w <= self.full_w:
            raise ValueError(f"need 0 <= idle ({self.idle_w}) <= full ({self.full_w})")


# pkg/type/open-gpu-share/utils/const.go, MapGpuTypeEnergyConsumption / MapGpuTypeModelEnergy.
GPU_POWER: dict[str, Device] = {
    "T4": Device(10, 70),
    "A10": Device(30, 150),
    "P100": Device(25, 250),
    "V100M16": Device(30, 300),
    "V100M32": Device(30, 300),
    "A100": Device(50, 400),
    "G2": Device(30, 150),  # undisclosed; the repository models it as an A10
    "G3": Device(50, 400),  # undisclosed; the repository models it as an A100
}
UNKNOWN_GPU = Device(25, 250)  # ours: P100-like, for models the table does not list

# pkg/type/open-gpu-share/utils/const.go, MapCpuTypeEnergyConsumption (per socket).
CPU_POWER: dict[str, Device] = {
    "Intel-Xeon-ES-2682-V4": Device(15, 120, cores=16),
    "Intel-Xeon-8163": Device(20, 165, cores=24),
    "Intel-Xeon-6326": Device(20, 185, cores=16),
    "Intel-Xeon-8369B": Device(20, 270, cores=32),
    "Intel-Xeon-8269CY": Device(20, 205, cores=26),
}
# data/2 - Add CPU models to YAML nodes.ipynb: the CPU model by the node's GPU model.
CPU_FOR_GPU: dict[str, str] = {
    "": "Intel-Xeon-ES-2682-V4",
    "T4": "Intel-Xeon-8163",
    "P100": "Intel-Xeon-ES-2682-V4",
    "V100M16": "Intel-Xeon-6326",
    "V100M32": "Intel-Xeon-6326",
    "A10": "Intel-Xeon-8369B",
    "G2": "Intel-Xeon-8369B",
    "A100": "Intel-Xeon-8369B",
    "G3": "Intel-Xeon-8369B",
}
# The repository's profile when a node names no CPU ("assume 2682's profile").
DEFAULT_CPU = "Intel-Xeon-ES-2682-V4"


def sockets(cpu_milli_total: int, cores_per_socket: int) -> int:
    """CPU sockets of a node: two vCPUs per physical core, rounded up at both steps."""
    cores = math.ceil(cpu_milli_total / MILLI / 2)
    return max(1, math.ceil(cores / cores_per_socket)) if cores else 0


class PowerModel:
    """Node and cluster power from allocation (see the module docstring for both variants)."""

    def __init__(
        self,
        *,
        step: bool = False,
        gpus: Mapping[str, Device] = GPU_POWER,
        cpus: Mapping[str, Device] = CPU_POWER,
        cpu_for_gpu: Mapping[str, str] = CPU_FOR_GPU,
        unknown_gpu: Device = UNKNOWN_GPU,
    ):
        self.step = step
        self.gpus = dict(gpus)
        self.cpus = dict(cpus)
        self.cpu_for_gpu = dict(cpu_for_gpu)
        self.unknown_gpu = unknown_gpu
        self._memo: dict[NodeSig, float] = {}
        self._cpu_memo: dict[tuple, float] = {}

    @property
    def name(self) -> str:
        return "paper (step)" if self.step else "proportional"

    def gpu(self, model: str) -> Device:
        return self.gpus.get(model, self.unknown_gpu)

    def cpu(self, gpu_model: str) -> Device:
        return self.cpus[self.cpu_for_gpu.get(gpu_model, DEFAULT_CPU)]

    def idle_power(self, gpu_model: str, cpu_milli_total: int, gpu_count: int) -> float:
        """A node with nothing allocated (it is on: the paper never powers nodes off)."""
        cpu = self.cpu(gpu_model)
        return (
            sockets(cpu_milli_total, cpu.cores) * cpu.idle_w
            + gpu_count * self.gpu(gpu_model).idle_w
        )

    def cpu_power(self, gpu_model: str, cpu_milli_total: int, cpu_milli_free: int) -> float:
        """Watts drawn by a node's CPU sockets in this allocation state (memoised)."""
        key = (gpu_model, cpu_milli_total, cpu_milli_free)
        watts = self._cpu_memo.get(key)
        if watts is None:
            watts = self._cpu_memo[key] = self._cpu_power(*key)
        return watts

    def _cpu_power(self, gpu_model: str, cpu_milli_total: int, cpu_milli_free: int) -> float:
        cpu = self.cpu(gpu_model)
        n = sockets(cpu_milli_total, cpu.cores)
        if self.step:
            cores = math.ceil(cpu_milli_total / MILLI / 2)
            busy_cores = cores - math.floor(cpu_milli_free / MILLI / 2)
            busy = min(n, math.ceil(busy_cores / cpu.cores)) if busy_cores > 0 else 0
            return busy * cpu.full_w + (n - busy) * cpu.idle_w
        if not cpu_milli_total:
            return 0.0
        used = (cpu_milli_total - cpu_milli_free) / cpu_milli_total
        return n * (cpu.idle_w + (cpu.full_w - cpu.idle_w) * used)

    def gpu_power(self, gpu_model: str, gpu_free: Sequence[int]) -> float:
        """Watts drawn by a node's GPUs in this allocation state."""
        if not gpu_free:
            return 0.0
        g = self.gpu(gpu_model)
        if self.step:
            busy = sum(1 for free in gpu_free if free < MILLI)
            return busy * g.full_w + (len(gpu_free) - busy) * g.idle_w
        used = len(gpu_free) * MILLI - sum(gpu_free)
        return len(gpu_free) * g.idle_w + (g.full_w - g.idle_w) * used / MILLI

    def node_power(
        self, gpu_model: str, cpu_milli_total: int, cpu_milli_free: int, gpu_free: Sequence[int]
    ) -> float:
        """Watts drawn by one node in this allocation state."""
        return self.cpu_power(gpu_model, cpu_milli_total, cpu_milli_free) + self.gpu_power(
            gpu_model, gpu_free
        )

    def sig_power(self, sig: NodeSig) -> float:
        """``node_power`` of a node signature, memoised."""
        watts = self._memo.get(sig)
        if watts is None:
            watts = self._memo[sig] = self.node_power(sig[0], sig[2], sig[4], sig[6])
        return watts

    def state_power(self, node: NodeState) -> float:
        return self.node_power(
            node.gpu_model, node.cpu_milli_total, node.cpu_milli_free, node.gpu_free
        )

    def cluster_power(self, nodes: Iterable[NodeState]) -> float:
        """Watts drawn by the whole cluster (drained nodes included: they are still on)."""
        return sum(self.state_power(n) for n in nodes)


PROPORTIONAL = PowerModel()
PAPER = PowerModel(step=True)


def power_delta(power: PowerModel, task: TaskRequest, sig: NodeSig) -> tuple[float, int | None]:
    """(watts the node's power grows by, pick) for the GPU choice that grows it least.

    A sharing task tries each distinct free share that holds it, least room first, and keeps
    the first of equal increases (so, among GPUs already busy, the fullest: best fit)."""
    before = power.sig_power(sig)
    if not task.is_share:
        return power.sig_power(sig_after(sig, task)) - before, None
    best = pick = None
    last = -1
    for g in reversed(sig[6]):
        if g < task.gpu_milli or g == last:
            continue
        last = g
        d = power.sig_power(sig_after(sig, task, g)) - before
        if best is None or d < best:
            best, pick = d, g
    return best, pick


class PowerScore:
    """A 0..100 power score of placing a task on a node (100: no increase), comparable with
    FGD's 0..100 score: ``int(100 * (1 - d / D))`` for an increase of ``d`` watts, with ``D``
    the increase on the most power-hungry idle node type of the cluster the task fits (the
    largest increase it can cause). Depends only on the task and the node signature, so the
    engine can cache it. ``prepare(nodes)`` learns the idle node types."""

    def __init__(self, power: PowerModel):
        self.power = power
        self._idle: list[NodeSig] = []
        self._span: dict[tuple, float] = {}

    def prepare(self, nodes: Iterable[NodeState]) -> None:
        seen: dict[NodeSig, None] = {}
        for n in nodes:
            if n.drained:
                continue
            idle = n.copy()
            idle.cpu_milli_free, idle.memory_mib_free = n.cpu_milli_total, n.memory_mib_total
            idle.gpu_free = [MILLI] * n.gpu_count
            seen.setdefault(signature(idle), None)
        self._idle = list(seen)
        self._span.clear()

    def span(self, task: TaskRequest) -> float:
        shape = task.shape
        d = self._span.get(shape)
        if d is None:
            d = max(
                (power_delta(self.power, task, s)[0] for s in self._idle if sig_fits(task, s)),
                default=0.0,
            )
            self._span[shape] = d
        return d

    def score(self, task: TaskRequest, sig: NodeSig) -> int:
        d, _ = power_delta(self.power, task, sig)
        span = self.span(task)
        if span <= 0:
            return 100
        return max(0, min(100, int(100 * (1 - d / span))))
