"""The two things the placement engine reasons about: a node's free capacity and a task's ask.

Everything is plain integers in the units the openb trace uses, so the same engine serves the
trace benchmark and the portal:

- CPU in milli-cores (1 vCPU = 1000), memory in MiB,
- GPUs as a list of per-device free shares in milli-GPU (0..1000; 1000 = the whole device is free).

The Django adapter maps a DB node with N whole accelerators of model X, `vcpu` and `ram_gb` to
``NodeState(id, cpu_milli_total=vcpu*1000, memory_mib_total=ram_gb*1024,
gpu_free=[1000]*N minus what is allocated, gpu_model=X, ...)`` (see ``NodeState.from_portal``).
No Django here: this package must import without settings (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MILLI = 1000  # one whole GPU (or one vCPU) in milli units


@dataclass(slots=True)
class NodeState:
    """Free and total capacity of one node, plus the portal attributes scoring looks at.

    ``gpu_free[i]`` is the free share of GPU i in milli-GPU: 1000 means idle, 0 means full.
    ``cpu_milli_free``/``memory_mib_free`` default to the totals (an empty node).
    """

    id: str
    cpu_milli_total: int
    memory_mib_total: int
    gpu_free: list[int] = field(default_factory=list)
    gpu_model: str = ""  # "" for a CPU-only node
    cpu_milli_free: int | None = None
    memory_mib_free: int | None = None
    # Portal attributes (neutral defaults: the openb benchmark leaves them alone).
    region: str = ""
    latency_ms: float = 0.0
    perf_units_per_gpu: float = 1.0  # normalised compute units one GPU delivers
    watts_per_unit: float = 0.0  # electrical power per compute unit at load
    pue: float = 1.0  # data-centre power usage effectiveness (>= 1)
    carbon_g_per_kwh: float = 0.0  # grid carbon intensity where the node runs
    # Price of one whole accelerator for one hour, in minor currency units (fen, cents); on a
    # CPU-only node, the price of one vCPU-hour.
    price_per_hour_minor: int = 0
    drained: bool = False

    def __post_init__(self):
        if self.cpu_milli_free is None:
            self.cpu_milli_free = self.cpu_milli_total
        if self.memory_mib_free is None:
            self.memory_mib_free = self.memory_mib_total
        for free in self.gpu_free:
            if not 0 <= free <= MILLI:
                raise ValueError(f"{self.id}: GPU free share {free} is outside 0..{MILLI}")

    @classmethod
    def from_portal(
        cls,
        id: str,
        *,
        accelerators: int,
        accelerator_model: str,
        vcpu: int,
        ram_gb: int,
        busy_accelerators: int = 0,
        vcpu_used: int = 0,
        ram_gb_used: int = 0,
        **attributes,
    ) -> NodeState:
        """A portal node: whole accelerators only (the portal does not share a device).

        ``busy_accelerators`` devices are marked full; the rest are idle. Extra keyword
        arguments (region, latency_ms, price_per_hour_minor, ...) pass straight through.
        """
        if not 0 <= busy_accelerators <= accelerators:
            raise ValueError(f"{id}: {busy_accelerators} busy of {accelerators} accelerators")
        return cls(
            id=id,
            cpu_milli_total=vcpu * MILLI,
            memory_mib_total=ram_gb * 1024,
            cpu_milli_free=(vcpu - vcpu_used) * MILLI,
            memory_mib_free=(ram_gb - ram_gb_used) * 1024,
            gpu_free=[0] * busy_accelerators + [MILLI] * (accelerators - busy_accelerators),
            gpu_model=accelerator_model if accelerators else "",
            **attributes,
        )

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_free)

    @property
    def gpu_milli_total(self) -> int:
        return len(self.gpu_free) * MILLI

    @property
    def gpu_milli_free(self) -> int:
        return sum(self.gpu_free)

    @property
    def whole_gpus_free(self) -> int:
        return sum(1 for free in self.gpu_free if free == MILLI)

    def copy(self) -> NodeState:
        clone = NodeState.__new__(NodeState)
        for name in NodeState.__slots__:
            setattr(clone, name, getattr(self, name))
        clone.gpu_free = list(self.gpu_free)
        return clone


@dataclass(slots=True)
class TaskRequest:
    """What one task asks for on a single node.

    ``num_gpu`` whole GPUs, or, when ``num_gpu == 1`` and ``gpu_milli < 1000``, a share of one GPU
    (GPU sharing). ``gpu_milli`` is normalised: 0 for CPU-only tasks, 1000 for whole GPUs.
    Empty ``gpu_models``/``regions`` mean any.
    """

    id: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = MILLI
    gpu_models: frozenset[str] = frozenset()
    regions: frozenset[str] = frozenset()
    organization: str | int | None = None
    priority: int = 0  # higher runs first
    preference: str = "balanced"  # tenant preset name, see scoring.PRESETS
    submitted_at: float = 0.0  # queue order among equals (seconds, any epoch)

    def __post_init__(self):
        if self.num_gpu < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"{self.id}: negative request")
        if self.num_gpu == 0:
            self.gpu_milli = 0
        elif self.num_gpu > 1 or self.gpu_milli <= 0:
            # A multi-GPU task takes whole devices; 0 on a GPU task is read as "whole".
            self.gpu_milli = MILLI
        elif self.gpu_milli > MILLI:
            raise ValueError(f"{self.id}: gpu_milli {self.gpu_milli} > {MILLI}")
        if not isinstance(self.gpu_models, frozenset):
            self.gpu_models = frozenset(self.gpu_models)
        if not isinstance(self.regions, frozenset):
            self.regions = frozenset(self.regions)

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU asked for, in milli-GPU (the unit the allocation ratio counts)."""
        return self.gpu_milli if self.is_share else self.num_gpu * MILLI

    @property
    def shape(self) -> tuple:
        """Everything placement depends on, hashable: tasks with one shape are interchangeable
        for the policies (organisation, priority and id are queue matters)."""
        return (
            self.cpu_milli,
            self.memory_mib,
            self.num_gpu,
            self.gpu_milli,
            self.gpu_models,
            self.regions,
        )


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a task went: the node and the GPU indices it holds (``gpu_milli`` on each)."""

    task_id: str
    node_id: str
    gpu_indices: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int


def apply(node: NodeState, task: TaskRequest, gpu_indices: tuple[int, ...]) -> Placement:
    """Take the task's resources from ``node`` on the given GPUs (checked, so a bug in a policy
    can never oversubscribe a device)."""
    if len(gpu_indices) != task.num_gpu or len(set(gpu_indices)) != len(gpu_indices):
        raise ValueError(f"{task.id}: needs {task.num_gpu} distinct GPUs, got {gpu_indices}")
    if node.cpu_milli_free < task.cpu_milli or node.memory_mib_free < task.memory_mib:
        raise ValueError(f"{task.id}: does not fit {node.id} on CPU or memory")
    for i in gpu_indices:
        if node.gpu_free[i] < task.gpu_milli:
            raise ValueError(f"{task.id}: GPU {i} of {node.id} has {node.gpu_free[i]} free")
    node.cpu_milli_free -= task.cpu_milli
    node.memory_mib_free -= task.memory_mib
    for i in gpu_indices:
        node.gpu_free[i] -= task.gpu_milli
    return Placement(
        task.id, node.id, tuple(gpu_indices), task.gpu_milli, task.cpu_milli, task.memory_mib
    )


def release(node: NodeState, placement: Placement) -> None:
    """Give a placement's resources back (departures, or undoing a tentative plan)."""
    node.cpu_milli_free = min(node.cpu_milli_total, node.cpu_milli_free + placement.cpu_milli)
    node.memory_mib_free = min(node.memory_mib_total, node.memory_mib_free + placement.memory_mib)
    for i in placement.gpu_indices:
        node.gpu_free[i] = min(MILLI, node.gpu_free[i] + placement.gpu_milli)


class NodeSig(tuple):
    """A node's state as a hashable value: what every scoring policy looks at, nothing more.

    Many nodes are identical (the openb cluster has 27 node types for 1,523 nodes), and they stay
    identical until a task lands on them, so the engine scores one representative per distinct
    signature and caches per-signature results. GPUs are sorted (most free first): which device
    index holds which share does not change any score.

    Fields: (gpu_model, region, cpu_total, mem_total, cpu_free, mem_free, gpus_desc).
    A plain tuple subclass rather than a NamedTuple: it is built on every placement.
    """

    __slots__ = ()

    model = property(lambda self: self[0])
    region = property(lambda self: self[1])
    cpu_total = property(lambda self: self[2])
    mem_total = property(lambda self: self[3])
    cpu_free = property(lambda self: self[4])
    mem_free = property(lambda self: self[5])
    gpus = property(lambda self: self[6])


def signature(node: NodeState) -> NodeSig:
    return NodeSig(
        (
            node.gpu_model,
            node.region,
            node.cpu_milli_total,
            node.memory_mib_total,
            node.cpu_milli_free,
            node.memory_mib_free,
            tuple(sorted(node.gpu_free, reverse=True)),
        )
    )


def sig_after(sig: NodeSig, task: TaskRequest, share_from: int | None = None) -> NodeSig:
    """The signature ``sig`` would have after taking ``task``.

    For a sharing task, ``share_from`` is the free share of the GPU it lands on; whole-GPU tasks
    take fully free GPUs (all alike). The caller has checked that the task fits.
    """
    gpus = sig[6]
    if task.num_gpu == 0:
        new_gpus = gpus
    elif task.gpu_milli < MILLI:
        lst = list(gpus)
        lst.remove(share_from)
        left = share_from - task.gpu_milli
        # Keep descending order: insert the reduced share after everything at least as large.
        i, n = 0, len(lst)
        while i < n and lst[i] >= left:
            i += 1
        lst.insert(i, left)
        new_gpus = tuple(lst)
    else:
        # Fully free GPUs come first in descending order; taking k of them puts k zeros last.
        k = task.num_gpu
        new_gpus = gpus[k:] + (0,) * k
    return NodeSig(
        (
            sig[0],
            sig[1],
            sig[2],
            sig[3],
            sig[4] - task.cpu_milli,
            sig[5] - task.memory_mib,
            new_gpus,
        )
    )
