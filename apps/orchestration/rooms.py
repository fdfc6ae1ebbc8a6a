"""A node's room under its row lock: what placement re-counts once it holds the lock (what was
free when the candidates were read may have been taken since) and takes in memory, for a host
or a training task, before it writes the allocation. Every change to what a node holds goes
through it, on the one reservation path (`reservations`): a new host (`services.place`), a
stopped host starting again on its node (`services.allocate_again`), a host resized in place
(`services.resize_capacity`) and the queue pass's tasks, one node each or a gang's several
(`reservations.TaskReservation`), count and take cards the same way."""

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

    def held_by(self, allocation: Allocation) -> list[adapter.Card]:
        """The cards `allocation` (saved) holds, in index order."""
        return [card for card in self.cards if card.holder == allocation.pk]

    def has_room(self, *, vcpu: int, ram_gb: int) -> bool:
        """Room for `vcpu` more vCPU and `ram_gb` more GB of memory. What does not grow always
        fits, even on a node that holds more than it has (registered smaller since)."""
        return (vcpu <= 0 or vcpu <= self.vcpu_free) and (ram_gb <= 0 or ram_gb <= self.ram_gb_free)

    def can_take(self, milli: int, *, vcpu: int, ram_gb: int, new_work: bool = True) -> bool:
        """Whether `take` would take `milli` milli-accelerators with `vcpu` and `ram_gb` now:
        asked of each node of a gang before any of them takes its share. New work is refused
        by a node that is drained or not healthy; work that lives there already
        (`new_work=False`: a stopped host starting again, its disks are on the node) is not."""
        node = self.node
        if new_work and (node.is_drained or node.health != NodeHealth.HEALTHY):
            return False
        if not self.has_room(vcpu=vcpu, ram_gb=ram_gb):
            return False
        if 0 < milli < MILLI:
            return any(card.free >= milli for card in self.cards)
        return self._idle(milli // MILLI) is not None

    def take(
        self, allocation: Allocation, milli: int, *, new_work: bool = True
    ) -> list[int] | None:
        """Take `milli` milli-accelerators (whole cards, in thousands; less: a share of one
        card) and `allocation`'s vCPU and memory for `allocation` (unsaved, of this node).
        Returns the ids of the cards it becomes the holder of, or None when the node can no
        longer take it (`can_take`; nothing is taken then)."""
        if not self.can_take(
            milli, vcpu=allocation.vcpu, ram_gb=allocation.ram_gb, new_work=new_work
        ):
            return None
        if 0 < milli < MILLI:
            fitting = [card for card in self.cards if card.free >= milli]
            card = min(fitting, key=lambda c: (c.free, c.id))
            # The first share on a card holds it, so whole-card placements pass it by.
            holds = [] if card.held else [card.id]
            card.free -= milli
            card.held = True
            allocation.share_milli, allocation.shared_accelerator_id = milli, card.id
        else:
            idle = self._idle(milli // MILLI)
            for card in idle:
                card.free, card.held = 0, True
            holds = [card.id for card in idle]
        self.vcpu_free -= allocation.vcpu
        self.ram_gb_free -= allocation.ram_gb
        return holds

    def allocate(self, allocation: Allocation, milli: int, *, new_work: bool = True) -> bool:
        """`take`, then write it: `allocation` saved and the cards it took pointed at it. False
        when the node can no longer take it (nothing is written then)."""
        cards = self.take(allocation, milli, new_work=new_work)
        if cards is None:
            return False
        allocation.save()
        for card in self.cards:
            if card.id in cards:
                card.holder = allocation.pk
        Accelerator.objects.filter(pk__in=cards).update(allocation=allocation)
        free_room_changed()
        return True

    def resize(self, allocation: Allocation, *, cards: int, vcpu: int, ram_gb: int) -> bool:
        """Grow or shrink `allocation` (saved, holding whole cards of this node) in place to
        `cards` cards, `vcpu` and `ram_gb`, and write it: it takes the node's lowest idle cards
        and gives back its own highest-indexed ones. False when the room has too little for
        what grows (nothing is written then). The node's state is not asked: the host lives
        there."""
        held = self.held_by(allocation)
        more_vcpu, more_ram_gb = vcpu - allocation.vcpu, ram_gb - allocation.ram_gb
        taken = self._idle(cards - len(held))
        if taken is None or not self.has_room(vcpu=more_vcpu, ram_gb=more_ram_gb):
            return False
        given_back = held[cards:]
        for card in taken:
            card.free, card.held, card.holder = 0, True, allocation.pk
        for card in given_back:
            card.free = MILLI if card.in_service else 0
            card.held, card.holder = False, None
        self.vcpu_free -= more_vcpu
        self.ram_gb_free -= more_ram_gb
        if taken:
            Accelerator.objects.filter(pk__in=[card.id for card in taken]).update(
                allocation=allocation
            )
        if given_back:
            Accelerator.objects.filter(pk__in=[card.id for card in given_back]).update(
                allocation=None
            )
        allocation.vcpu, allocation.ram_gb = vcpu, ram_gb
        allocation.save(update_fields=["vcpu", "ram_gb"])
        free_room_changed()
        return True

    def _idle(self, count: int) -> list[adapter.Card] | None:
        """The `count` lowest-indexed idle cards (none for a count below one), or None when
        the node has fewer."""
        if count <= 0:
            return []
        idle = [card for card in self.cards if card.free == MILLI][:count]
        return idle if len(idle) == count else None
