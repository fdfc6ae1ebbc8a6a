"""The fast path: schedule many tasks on a large cluster with any ``Policy``.

A policy looks only at a node's signature (``model.NodeSig``), so:

- identical nodes form one *group* per signature, and each group is scored once, not per node;
- per task shape (``TaskRequest.shape``), the engine keeps a heap of (key, group) over the
  groups that fit, so the best node is the top of the heap;
- a placement changes one node: it leaves its group and joins another. Heaps are not rebuilt;
  groups that appear since a shape was last seen are pushed when that shape next comes
  (``_events``), and groups that emptied are dropped lazily when they surface at the top.
  A shape not seen for longer than there are groups rebuilds its heap from the live groups
  (only those of an allowed GPU model) instead of replaying the backlog;
- FGD's per-signature fragmentation is memoised in the ``ShapeDistribution``.

So a placement costs a few heap operations plus scoring the handful of new groups, not
O(nodes x task types).

Ties (equal keys) go to the node that comes first in the node list, exactly as
``Policy.choose`` does: the paper's simulator patches kube-scheduler to take the
lexicographically smallest node name among equal scores "for reproducibility", and the openb
node files are sorted by name. Each heap entry records its group's first node; a group whose
first node changed is re-filed when it surfaces, and a node joining a group ahead of its first
node counts as a new event. With ``Policy.random_ties`` the engine instead draws uniformly
among the tied nodes (stock kube-scheduler's ``selectHost``). A test checks the engine makes
the same decisions as ``Policy.schedule`` over the plain node list.
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left, insort
from collections.abc import Sequence

from .filters import sig_fits
from .model import NodeSig, NodeState, Placement, TaskRequest, apply, release, sig_after, signature
from .policies import Policy, gpu_indices

_RANDOM_TRIES = 32  # random samples before enumerating feasible nodes (keeps it uniform)


class Cluster:
    def __init__(self, nodes: Sequence[NodeState], policy: Policy, *, seed: int = 0):
        self.nodes = list(nodes)
        self.policy = policy
        policy.prepare(self.nodes)
        self.rng = random.Random(seed)
        self._groups: dict[NodeSig, list[int]] = {}  # sorted node indices per signature
        self._by_model: dict[str, set[NodeSig]] = {}
        self._events: list[NodeSig] = []  # every time a group (re)appears
        self._shapes: dict[tuple, list] = {}  # shape -> [events position, heap]
        self._sig_of: list[NodeSig | None] = [None] * len(self.nodes)
        # A policy scoring against a distribution that learns online (``observe``) changes its
        # ranks: the heaps are then dropped and rebuilt as shapes come.
        self._dist = getattr(policy, "dist", None)
        self._dist_version = getattr(self._dist, "version", None)
        self._active = [i for i, n in enumerate(self.nodes) if not n.drained]
        for i in self._active:
            self._join(i, signature(self.nodes[i]))

    # --- groups ---------------------------------------------------------------------------

    def _join(self, i: int, sig: NodeSig) -> None:
        group = self._groups.get(sig)
        if group is None:
            self._groups[sig] = [i]
            models = self._by_model.get(sig[0])
            if models is None:
                models = self._by_model[sig[0]] = set()
            models.add(sig)
            self._events.append(sig)
        elif i < group[0]:
            # The group's first node (its tie-break) moved forward: heaps must hear of it.
            group.insert(0, i)
            self._events.append(sig)
        else:
            insort(group, i)
        self._sig_of[i] = sig

    def _leave(self, i: int) -> None:
        sig = self._sig_of[i]
        group = self._groups[sig]
        del group[bisect_left(group, i)]
        if not group:
            del self._groups[sig]
            self._by_model[sig[0]].discard(sig)

    @property
    def group_count(self) -> int:
        return len(self._groups)

    # --- choosing -------------------------------------------------------------------------

    def _entry(self, task: TaskRequest, sig: NodeSig):
        key, pick = self.policy.rank(task, sig)
        return (key, self._groups[sig][0], sig, pick)

    def _live_candidates(self, task: TaskRequest):
        if task.num_gpu and task.gpu_models:
            for model in task.gpu_models:
                yield from self._by_model.get(model, ())
        else:
            yield from self._groups

    def _best(self, task: TaskRequest):
        """(sig, pick, node index) of the best node for ``task``, or None when nothing fits."""
        if self._dist is not None and self._dist.version != self._dist_version:
            self._shapes.clear()
            self._dist_version = self._dist.version
        shape = task.shape
        state = self._shapes.get(shape)
        events = self._events
        if state is None or len(events) - state[0] > len(self._groups):
            heap = [self._entry(task, s) for s in self._live_candidates(task) if sig_fits(task, s)]
            heapq.heapify(heap)
            state = self._shapes[shape] = [len(events), heap]
        else:
            heap = state[1]
            groups = self._groups
            for sig in events[state[0] :]:
                if sig in groups and sig_fits(task, sig):
                    heapq.heappush(heap, self._entry(task, sig))
            state[0] = len(events)
        groups = self._groups
        while heap:
            top = heap[0]
            group = groups.get(top[2])
            if group is None:
                heapq.heappop(heap)  # the group emptied
            elif group[0] != top[1]:
                # Its first node changed since the push: re-file under the current one.
                heapq.heapreplace(heap, (top[0], group[0], top[2], top[3]))
            else:
                break
        else:
            return None
        if not self.policy.random_ties:
            return top[2], top[3], top[1]
        # Uniform over the *nodes* whose key equals the best (kube-scheduler's selectHost):
        # take the tied entries off the heap, draw one node, put them back.
        key = top[0]
        tied, kept, seen = [], [], set()
        while heap and heap[0][0] == key:
            entry = heapq.heappop(heap)
            if entry[2] in groups:
                kept.append(entry)
                if entry[2] not in seen:
                    seen.add(entry[2])
                    tied.append(entry)
        r = self.rng.randrange(sum(len(groups[e[2]]) for e in tied))
        for entry in kept:
            heapq.heappush(heap, entry)
        for entry in tied:
            members = groups[entry[2]]
            if r < len(members):
                return entry[2], entry[3], members[r]
            r -= len(members)
        raise AssertionError("unreachable")

    def _random(self, task: TaskRequest):
        active, sig_of, rng = self._active, self._sig_of, self.rng
        if not active:
            return None
        for _ in range(_RANDOM_TRIES):
            i = active[rng.randrange(len(active))]
            if sig_fits(task, sig_of[i]):
                return i
        feasible = [i for s, g in self._groups.items() if sig_fits(task, s) for i in g]
        return rng.choice(feasible) if feasible else None

    # --- placing --------------------------------------------------------------------------

    def schedule(self, task: TaskRequest) -> Placement | None:
        """Place ``task`` where the policy prefers, or return None if it fits nowhere."""
        if self.policy.randomized:
            i = self._random(task)
            if i is None:
                return None
            sig = self._sig_of[i]
            _, pick = self.policy.rank(task, sig)
        else:
            best = self._best(task)
            if best is None:
                return None
            sig, pick, i = best
        node = self.nodes[i]
        placement = apply(node, task, gpu_indices(task, node, pick))
        self._leave(i)
        self._join(i, sig_after(sig, task, pick))
        return placement

    def release(self, placement: Placement) -> None:
        """A task left: give its resources back to its node."""
        i = next(i for i, n in enumerate(self.nodes) if n.id == placement.node_id)
        release(self.nodes[i], placement)
        if self._sig_of[i] is not None:
            self._leave(i)
            self._join(i, signature(self.nodes[i]))

    # --- measures -------------------------------------------------------------------------

    def gpu_milli_total(self) -> int:
        return sum(n.gpu_milli_total for n in self.nodes)

    def gpu_milli_allocated(self) -> int:
        return sum(n.gpu_milli_total - n.gpu_milli_free for n in self.nodes)
