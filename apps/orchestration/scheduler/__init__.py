"""Loam's placement engine: pure Python, no Django (a test imports it without settings).

The Django adapter maps rows into ``NodeState``/``TaskRequest`` (``NodeState.from_portal`` for
a node of whole accelerators) and calls:

- ``decide(task, nodes, operator=..., preferred_regions=..., distribution=...)`` for one
  portal placement with its explanation, then ``place(task, decision)``;
- ``plan(queued, nodes, usage_by_org)`` / ``queue_positions(queued, usage_by_org)`` for the
  training queue;
- ``Loam(distribution)`` with ``Policy.schedule(task, nodes)``, or ``Cluster`` for many
  placements at once (the benchmark's baselines and ``make_policy`` are in ``baselines``).
"""

from .engine import Cluster
from .filters import REASON_TEXT, check, fits, reasons
from .fragmentation import ShapeDistribution, cluster_fragmentation
from .loam import Loam
from .model import MILLI, NodeState, Placement, TaskRequest, apply, release
from .policies import FGD, Policy
from .queue import Hold, QueuePlan, fair_order, plan, queue_positions, schedule_queue
from .scoring import PRESETS, Candidate, Decision, Weights, combine, decide, place

__all__ = [
    "Hold",
    "FGD",
    "MILLI",
    "PRESETS",
    "REASON_TEXT",
    "Candidate",
    "Cluster",
    "Decision",
    "Loam",
    "NodeState",
    "Placement",
    "Policy",
    "QueuePlan",
    "ShapeDistribution",
    "TaskRequest",
    "Weights",
    "apply",
    "check",
    "cluster_fragmentation",
    "combine",
    "decide",
    "fair_order",
    "fits",
    "place",
    "plan",
    "queue_positions",
    "reasons",
    "release",
    "schedule_queue",
]
