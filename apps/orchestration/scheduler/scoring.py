"""Portal placement: a weighted, explainable choice among a park's nodes.

Five parts, each normalised to 0..1 across the candidates (1 = best candidate on that part,
0 = worst; all 1 when every candidate is equal), so a weight means the same thing whatever
the units:

- ``region``: network latency to the tenant (ms), plus a penalty outside the tenant's
  preferred regions;
- ``performance``: compute units per GPU (normalised accelerator speed);
- ``energy``: grams of CO2e per compute-unit-hour = W per unit x PUE x grid g/kWh / 1000;
- ``price``: what the task costs per hour there (whole accelerators, or vCPU on CPU nodes);
- ``fragmentation``: how much the placement grows the node's expected GPU fragmentation
  (FGD's ΔF, ``fragmentation`` module): low means the park stays able to take big tasks.

The total is the weighted mean of the parts. ``Weights`` has presets per tenant preference
(``PRESETS``) and ``combine`` blends a park operator's weights with the tenant's preference.
``decide`` returns a ``Decision``: the chosen node, every candidate's parts (rejected nodes
with their filter reason code), and ``reasons()``/``explain()`` for "why here".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

from . import filters
from .fragmentation import ShapeDistribution
from .model import MILLI, NodeState, Placement, TaskRequest, apply, sig_after, signature
from .policies import best_fit_share, gpu_indices

PARTS = ("region", "performance", "energy", "price", "fragmentation")
REGION_MISS_MS = 100.0  # a node outside the preferred regions counts as this much farther
# Under "balanced" the tenant pays for the work, not for the hour: a node where the same work
# costs more than this many times what it costs at the best-value candidate (price per hour
# over speed) is not chosen, whatever it gains on energy, fragmentation or latency. The
# tenant who wants speed at any price says "fast".
BALANCED_VALUE_LIMIT = 1.5


@dataclass(frozen=True, slots=True)
class Weights:
    region: float = 1.0
    performance: float = 1.0
    energy: float = 1.0
    price: float = 1.0
    fragmentation: float = 1.0

    def __post_init__(self):
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"weight {f.name} is negative")

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in PARTS}

    def normalized(self) -> Weights:
        """The same preferences summing to 1 (all equal if every weight is 0)."""
        total = sum(self.as_dict().values())
        if total == 0:
            return Weights(*([1.0 / len(PARTS)] * len(PARTS)))
        return Weights(**{k: v / total for k, v in self.as_dict().items()})


PRESETS: dict[str, Weights] = {
    # Fragmentation keeps a say in every preset: it is the park's, not the tenant's, interest.
    "fast": Weights(region=2, performance=6, energy=0.5, price=0.5, fragmentation=1),
    "cheap": Weights(region=0.5, performance=0.5, energy=0.5, price=6, fragmentation=1),
    "green": Weights(region=0.5, performance=0.5, energy=6, price=0.5, fragmentation=1),
    "balanced": Weights(),
}


def preset(preference: str | Weights | None) -> Weights:
    if isinstance(preference, Weights):
        return preference
    try:
        return PRESETS[preference or "balanced"]
    except KeyError:
        raise ValueError(
            f"unknown preference {preference!r}; choose from {', '.join(PRESETS)}"
        ) from None


def combine(
    operator: Weights | None, preference: str | Weights | None, operator_share: float = 0.5
) -> Weights:
    """Blend the park operator's weights with the tenant's: each is normalised first, then
    ``operator_share`` of the result is the operator's (0 = tenant only, 1 = operator only)."""
    if not 0 <= operator_share <= 1:
        raise ValueError("operator_share must be within 0..1")
    tenant = preset(preference).normalized()
    if operator is None:
        return tenant
    op = operator.normalized()
    return Weights(
        **{
            k: operator_share * getattr(op, k) + (1 - operator_share) * getattr(tenant, k)
            for k in PARTS
        }
    )


# --- raw measures (lower is better for all but performance) ---------------------------------


def task_units(task: TaskRequest, node: NodeState) -> float:
    """What the task is billed for on this node: GPUs, or vCPUs on a CPU-only node."""
    if node.gpu_count and task.num_gpu:
        return task.gpu_request_milli / MILLI
    return task.cpu_milli / MILLI


def hourly_price_minor(task: TaskRequest, node: NodeState) -> float:
    return node.price_per_hour_minor * task_units(task, node)


def carbon_g_per_unit_hour(node: NodeState) -> float:
    return node.watts_per_unit * node.pue * node.carbon_g_per_kwh / 1000.0


def region_cost_ms(node: NodeState, preferred_regions: Sequence[str]) -> float:
    miss = preferred_regions and node.region not in preferred_regions
    return node.latency_ms + (REGION_MISS_MS if miss else 0.0)


def fragmentation_delta(task: TaskRequest, node: NodeState, dist: ShapeDistribution) -> float:
    """ΔF in expected milli-GPU for the placement ``place`` would make (0 without a
    distribution)."""
    if not dist.total:
        return 0.0
    sig = signature(node)
    pick = best_fit_share(task, sig[6]) if task.is_share else None
    return (dist.weighted(sig_after(sig, task, pick)) - dist.weighted(sig)) / dist.total


# --- the decision ---------------------------------------------------------------------------


@dataclass(slots=True)
class Candidate:
    node_id: str
    total: float | None = None  # None when rejected
    parts: dict[str, float] = field(default_factory=dict)  # 0..1, 1 = best
    raw: dict[str, float] = field(default_factory=dict)  # the measures behind the parts
    rejected: str | None = None  # filters reason code
    dearer: bool = False  # scored, but the work costs too much more here (BALANCED_VALUE_LIMIT)

    def as_dict(self) -> dict:
        return {
            "node_id": self.node_id,
            "total": self.total,
            "parts": dict(self.parts),
            "raw": dict(self.raw),
            "rejected": self.rejected,
            "dearer": self.dearer,
        }


# Reason phrases per part: (code, English) when the chosen node is the best candidate on the
# part, and when it is merely better than the runner-up. The caller translates by code.
_PHRASES = {
    "region": (
        ("lowest_latency", "lowest latency ({latency_ms:.0f} ms)"),
        ("low_latency", "low latency ({latency_ms:.0f} ms)"),
    ),
    "performance": (
        ("fastest", "fastest accelerators ({perf_units:g} units per GPU)"),
        ("fast", "fast accelerators ({perf_units:g} units per GPU)"),
    ),
    "energy": (
        ("greenest", "lowest carbon ({carbon_g:.0f} g CO2e per unit-hour)"),
        ("green", "low carbon ({carbon_g:.0f} g CO2e per unit-hour)"),
    ),
    "price": (
        ("cheapest", "lowest price ({price})"),
        ("cheap", "low price ({price})"),
    ),
    "fragmentation": (
        ("least_fragmentation", "lowest fragmentation"),
        ("low_fragmentation", "low fragmentation"),
    ),
}
_RAW_KEY = {
    "region": "region_cost_ms",
    "performance": "perf_units",
    "energy": "carbon_g",
    "price": "price_minor",
    "fragmentation": "frag_delta",
}


@dataclass(slots=True)
class Decision:
    task_id: str
    node: NodeState | None
    candidates: list[Candidate]
    weights: Weights
    currency: str = "¥"

    @property
    def chosen(self) -> Candidate | None:
        if self.node is None:
            return None
        return next(c for c in self.candidates if c.node_id == self.node.id)

    def rejected_counts(self) -> dict[str, int]:
        return dict(Counter(c.rejected for c in self.candidates if c.rejected))

    def reasons(self, top: int = 2) -> list[dict]:
        """Why the chosen node won, as data: the parts that contributed most to its lead.

        Each: ``{"part", "code", "best" (it is the best candidate on this part), "value",
        "text"}``; ``text`` is the English fallback, the caller translates by ``code``.
        Only parts where the choice beat the runner-up count (one stands in on a full tie);
        weight-0 parts never appear.
        """
        chosen = self.chosen
        if chosen is None:
            counts = sorted(self.rejected_counts().items(), key=lambda kv: (-kv[1], kv[0]))
            return [
                {
                    "part": None,
                    "code": code,
                    "best": False,
                    "value": count,
                    "text": f"{count} node(s): {filters.REASON_TEXT[code]}",
                }
                for code, count in counts[:top]
            ]
        others = [c for c in self.candidates if c.total is not None and c is not chosen]
        runner = max(others, key=lambda c: c.total, default=None)
        w = self.weights.as_dict()

        def lead(part):
            mine = chosen.parts[part]
            theirs = runner.parts[part] if runner else 0.0
            return w[part] * (mine - theirs), w[part] * mine

        ranked = sorted((p for p in PARTS if w[p] > 0), key=lead, reverse=True)
        # Only parts where it beat the runner-up explain the choice; if it won on none alone
        # (a tie), the part that contributed most stands in.
        ahead = [p for p in ranked if lead(p)[0] > 1e-9] or ranked[:1]
        out = []
        for part in ahead[:top]:
            best = chosen.parts[part] >= 1.0 - 1e-9
            code, template = _PHRASES[part][0 if best else 1]
            text = template.format(
                latency_ms=chosen.raw["latency_ms"],
                perf_units=chosen.raw["perf_units"],
                carbon_g=chosen.raw["carbon_g"],
                price=format_price(chosen.raw["price_minor"], self.currency),
            )
            out.append(
                {
                    "part": part,
                    "code": code,
                    "best": best,
                    "value": chosen.raw[_RAW_KEY[part]],
                    "text": text,
                }
            )
        return out

    def explain(self, top: int = 2) -> str:
        """One English sentence, e.g. "node-3: lowest price (¥12.00/h) and lowest
        fragmentation"."""
        reasons = self.reasons(top)
        if self.node is None:
            detail = "; ".join(r["text"] for r in reasons)
            return f"No node can take {self.task_id}" + (f" ({detail})" if detail else "")
        texts = [r["text"] for r in reasons]
        if not texts:
            return f"{self.node.id}: the only candidate"
        joined = texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]
        if len([c for c in self.candidates if c.total is not None]) == 1:
            return f"{self.node.id}: the only node that fits ({joined})"
        return f"{self.node.id}: {joined}"

    def as_dict(self) -> dict:
        return {
            "task_id": self.task_id,
            "node_id": self.node.id if self.node else None,
            "weights": self.weights.as_dict(),
            "candidates": [c.as_dict() for c in self.candidates],
            "reasons": self.reasons(),
            "explanation": self.explain(),
        }


def format_price(minor: float, currency: str = "¥") -> str:
    """English fallback only; the portal formats money itself (two minor digits assumed)."""
    return f"{currency}{minor / 100:.2f}/h"


def _normalise(values: list[float], higher_is_better: bool) -> list[float]:
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [1.0] * len(values)
    if higher_is_better:
        return [(v - lo) / (hi - lo) for v in values]
    return [(hi - v) / (hi - lo) for v in values]


def decide(
    task: TaskRequest,
    nodes: Iterable[NodeState],
    *,
    weights: Weights | None = None,
    operator: Weights | None = None,
    operator_share: float = 0.5,
    preferred_regions: Sequence[str] = (),
    distribution: ShapeDistribution | None = None,
    currency: str = "¥",
) -> Decision:
    """Score every feasible node for ``task`` and pick the best (ties: first in ``nodes``).

    ``weights`` wins if given; otherwise the operator's weights blended with the task's
    ``preference`` preset. ``distribution`` is the park's task-type histogram for the
    fragmentation part (without it that part is 0 for everyone and carries no weight).

    Nodes that are alike (``_alike``: the same free capacity and attributes, as most of a
    pool's are) are checked and scored once, and each gets a candidate of its own.
    """
    nodes = list(nodes)
    if weights is None:
        weights = combine(operator, task.preference, operator_share)
    weights = weights.normalized()
    dist = distribution or ShapeDistribution()
    candidates = []
    groups: dict[tuple, _Group] = {}  # in the order of each group's first node
    for node in nodes:
        key = _alike(node)
        group = groups.get(key)
        if group is None:
            reason = filters.check(task, node)
            raw = None if reason else _measures(task, node, preferred_regions, dist)
            group = groups[key] = _Group(node, reason, raw, [])
        cand = Candidate(node.id, rejected=group.reason)
        group.members.append(cand)
        candidates.append(cand)
    feasible = [group for group in groups.values() if group.reason is None]
    if feasible:
        columns = {
            "region": _normalise([g.raw["region_cost_ms"] for g in feasible], False),
            "performance": _normalise([g.raw["perf_units"] for g in feasible], True),
            "energy": _normalise([g.raw["carbon_g"] for g in feasible], False),
            "price": _normalise([g.raw["price_minor"] for g in feasible], False),
            "fragmentation": _normalise([g.raw["frag_delta"] for g in feasible], False),
        }
        w = weights.as_dict()
        for i, group in enumerate(feasible):
            parts = {p: columns[p][i] for p in PARTS}
            total = sum(w[p] * parts[p] for p in PARTS)
            for cand in group.members:
                cand.raw, cand.parts, cand.total = dict(group.raw), dict(parts), total
    if task.preference in (None, "balanced"):
        feasible = _good_value(feasible)
    # A group's later nodes tie with its first, which was seen before them: the first in
    # `nodes` of the best group wins, as when every node is compared in turn.
    best = None
    for group in feasible:
        if best is None or group.members[0].total > best.members[0].total + 1e-12:
            best = group
    return Decision(task.id, best.node if best else None, candidates, weights, currency)


@dataclass(slots=True)
class _Group:
    node: NodeState  # the first of the alike nodes, the one a decision for them names
    reason: str | None
    raw: dict | None
    members: list[Candidate]


def work_cost(raw: dict) -> float | None:
    """What an hour of the node's speed costs (price per hour over compute units per GPU):
    the same work costs this in proportion wherever it runs. None when unpriced or unrated."""
    if raw["price_minor"] > 0 and raw["perf_units"] > 0:
        return raw["price_minor"] / raw["perf_units"]
    return None


def _good_value(feasible: list[_Group]) -> list[_Group]:
    """The groups where the work costs at most BALANCED_VALUE_LIMIT times the best value's;
    the others' candidates are marked `dearer`. All of them when any is unpriced or unrated
    (price says nothing then)."""
    costs = [work_cost(group.raw) for group in feasible]
    if not costs or None in costs:
        return feasible
    limit = min(costs) * BALANCED_VALUE_LIMIT
    kept = []
    for group, cost in zip(feasible, costs, strict=True):
        if cost > limit + 1e-9:
            for cand in group.members:
                cand.dearer = True
        else:
            kept.append(group)
    return kept


def _alike(node: NodeState) -> tuple:
    """What filtering and scoring read of a node: nodes with the same key get the same
    candidate (which of its cards is free does not matter, how many and how much does)."""
    return (
        signature(node),
        node.drained,
        node.latency_ms,
        node.perf_units_per_gpu,
        node.watts_per_unit,
        node.pue,
        node.carbon_g_per_kwh,
        node.price_per_hour_minor,
    )


def _measures(task: TaskRequest, node: NodeState, preferred_regions, dist) -> dict[str, float]:
    return {
        "latency_ms": node.latency_ms,
        "region_cost_ms": region_cost_ms(node, preferred_regions),
        "perf_units": node.perf_units_per_gpu,
        "carbon_g": carbon_g_per_unit_hour(node),
        "price_minor": hourly_price_minor(task, node),
        "frag_delta": fragmentation_delta(task, node, dist),
    }


def place(task: TaskRequest, decision: Decision) -> Placement:
    """Take the resources on the decided node (a sharing task gets the fullest GPU that
    holds it, as ``fragmentation_delta`` assumed)."""
    node = decision.node
    if node is None:
        raise ValueError(f"{task.id}: the decision placed it nowhere")
    pick = best_fit_share(task, signature(node)[6]) if task.is_share else None
    return apply(node, task, gpu_indices(task, node, pick))
