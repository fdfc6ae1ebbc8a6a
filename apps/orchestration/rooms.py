"""A node's room under its row lock: what placement re-counts once it holds the lock (what was
free when the candidates were read may have been taken since) and takes in memory, for a host
or a training task, before it writes the allocation. Hosts (`services.place`) and the queue
pass (`scheduling`) take cards the same way."""

from dataclasses import dataclass

from apps.catalog.selectors import free_room_changed
from apps.orchestration import adapter
from apps.orchestration.models import Accelerator, Allocation, Node, NodeHealth
from apps.orchestration.scheduler import MILLI


@dataclass
class NodeRoom:
    """What a node has free, read under its lock: whole idle cards (lowest index first), or a
    share of the card with the least room that still holds it."""

    node: Node  # with pool__region
    vcpu_free: int
    ram_gb_free: int
    cards: list[adapter.Card]  # index order

    @classmethod
    def lock(cls, node_ids) -> dict[int, "NodeRoom"]:
        """The nodes' rooms, locked (in id order) and then counted: three queries (four with
        shared cards) for any number of nodes.

        The locking statement reads the nodes too: a row it had to wait for is read again once
        its lock is held (PostgreSQL's READ COMMITTED), so a node drained meanwhile is seen
        drained; the cards and allocations are counted in statements after it, which see
        everything committed before the lock was granted."""
        nodes = list(
            Node.objects.select_for_update(no_key=True, of=("self",))
            .filter(pk__in=list(node_ids))
            .select_related("pool__region")
            .order_by("pk")
        )
        ids = [node.pk for node in nodes]
        cards = adapter.card_states(ids)
        held = adapter.held_by_nodes(ids)
        rooms = {}
        for node in nodes:
            vcpu, ram_gb = held.get(node.pk, (0, 0))
            rooms[node.pk] = cls(
                node=node,
                vcpu_free=node.vcpu_total - vcpu,
                ram_gb_free=node.ram_gb_total - ram_gb,
                cards=cards.get(node.pk, []),
            )
        return rooms

    @property
    def idle_cards(self) -> int:
        """Cards nothing holds, in service: what a placement of whole cards may take."""
        return sum(1 for card in self.cards if card.free == MILLI)

    def take(self, allocation: Allocation, milli: int) -> list[int] | None:
        """Take `milli` milli-accelerators (whole cards, in thousands; less: a share of one
        card) and `allocation`'s vCPU and memory for `allocation` (unsaved, of this node).
        Returns the ids of the cards it becomes the holder of, or None when the node can no
        longer take it (nothing is taken then)."""
        node = self.node
        if node.is_drained or node.health != NodeHealth.HEALTHY:
            return None
        if self.vcpu_free < allocation.vcpu or self.ram_gb_free < allocation.ram_gb:
            return None
        if 0 < milli < MILLI:
            fitting = [card for card in self.cards if card.free >= milli]
            if not fitting:
                return None
            card = min(fitting, key=lambda c: (c.free, c.id))
            # The first share on a card holds it, so whole-card placements pass it by.
            holds = [] if card.held else [card.id]
            card.free -= milli
            card.held = True
            allocation.share_milli, allocation.shared_accelerator_id = milli, card.id
        else:
            wanted = milli // MILLI
            idle = [card for card in self.cards if card.free == MILLI][:wanted]
            if len(idle) < wanted:
                return None
            for card in idle:
                card.free, card.held = 0, True
            holds = [card.id for card in idle]
        self.vcpu_free -= allocation.vcpu
        self.ram_gb_free -= allocation.ram_gb
        return holds

    def allocate(self, allocation: Allocation, milli: int) -> bool:
        """`take`, then write it: `allocation` saved and the cards it took pointed at it. False
        when the node can no longer take it (nothing is written then)."""
        cards = self.take(allocation, milli)
        if cards is None:
            return False
        allocation.save()
        Accelerator.objects.filter(pk__in=cards).update(allocation=allocation)
        free_room_changed()
        return True
