"""Feasibility: can this node take this task at all, and if not, why not.

Each check has a stable reason code so the portal can say "why not here" per node (and
translate it); the order of ``CHECKS`` is the order a person would look: is the node usable,
is it the right kind, then does the task fit.
"""

from __future__ import annotations

from .model import MILLI, NodeSig, NodeState, TaskRequest

DRAINED = "drained"
GPU_MODEL = "gpu_model"
REGION = "region"
CPU = "cpu"
MEMORY = "memory"
GPU_COUNT = "gpu_count"  # not enough fully free GPUs for a whole-GPU task
GPU_SHARE = "gpu_share"  # no single GPU has the share a GPU-sharing task asks for

# English fallbacks; the caller translates by code.
REASON_TEXT = {
    DRAINED: "the node is drained for maintenance",
    GPU_MODEL: "the task does not accept this GPU model",
    REGION: "the task does not accept this region",
    CPU: "not enough free CPU",
    MEMORY: "not enough free memory",
    GPU_COUNT: "not enough whole GPUs free",
    GPU_SHARE: "no GPU has enough free share",
}


def _drained(task: TaskRequest, node: NodeState) -> bool:
    return not node.drained


def _gpu_model(task: TaskRequest, node: NodeState) -> bool:
    # A constraint on the model only matters for tasks that use a GPU.
    return task.num_gpu == 0 or not task.gpu_models or node.gpu_model in task.gpu_models


def _region(task: TaskRequest, node: NodeState) -> bool:
    return not task.regions or node.region in task.regions


def _cpu(task: TaskRequest, node: NodeState) -> bool:
    return node.cpu_milli_free >= task.cpu_milli


def _memory(task: TaskRequest, node: NodeState) -> bool:
    return node.memory_mib_free >= task.memory_mib


def _gpu_count(task: TaskRequest, node: NodeState) -> bool:
    if task.num_gpu == 0 or task.is_share:
        return True
    return sum(1 for free in node.gpu_free if free == MILLI) >= task.num_gpu


def _gpu_share(task: TaskRequest, node: NodeState) -> bool:
    if not task.is_share:
        return True
    return any(free >= task.gpu_milli for free in node.gpu_free)


# Public names for the two "could it ever run here" checks (the queue's reservations use them).
gpu_model_allowed = _gpu_model
region_allowed = _region

CHECKS = (
    (DRAINED, _drained),
    (GPU_MODEL, _gpu_model),
    (REGION, _region),
    (CPU, _cpu),
    (MEMORY, _memory),
    (GPU_COUNT, _gpu_count),
    (GPU_SHARE, _gpu_share),
)


def check(task: TaskRequest, node: NodeState) -> str | None:
    """The first reason ``node`` cannot take ``task`` (in the order of ``CHECKS``), or None when
    it can.

    ``CHECKS`` written out: a queue pass calls this for every node and every task it looks at,
    and the calls through the table were most of its cost (a test holds the two together).
    """
    if node.drained:
        return DRAINED
    if task.num_gpu and task.gpu_models and node.gpu_model not in task.gpu_models:
        return GPU_MODEL
    if task.regions and node.region not in task.regions:
        return REGION
    if node.cpu_milli_free < task.cpu_milli:
        return CPU
    if node.memory_mib_free < task.memory_mib:
        return MEMORY
    if task.num_gpu == 0:
        return None
    if task.is_share:
        wanted = task.gpu_milli
        return None if any(free >= wanted for free in node.gpu_free) else GPU_SHARE
    whole = sum(1 for free in node.gpu_free if free == MILLI)
    return None if whole >= task.num_gpu else GPU_COUNT


def reasons(task: TaskRequest, node: NodeState) -> list[str]:
    """Every reason, for a full "why not here" breakdown."""
    return [code for code, ok in CHECKS if not ok(task, node)]


def fits(task: TaskRequest, node: NodeState) -> bool:
    return check(task, node) is None


def sig_fits(task: TaskRequest, sig: NodeSig) -> bool:
    """``fits`` on a signature (the engine's fast path; drained nodes never get one).

    ``sig[6]`` is sorted most-free first, so the GPU part is a look at the first entries.
    """
    if task.cpu_milli > sig[4] or task.memory_mib > sig[5]:
        return False
    if task.regions and sig[1] not in task.regions:
        return False
    n = task.num_gpu
    if n == 0:
        return True
    if task.gpu_models and sig[0] not in task.gpu_models:
        return False
    gpus = sig[6]
    if len(gpus) < n:
        return False
    if task.gpu_milli < MILLI:
        return gpus[0] >= task.gpu_milli
    return gpus[n - 1] == MILLI
