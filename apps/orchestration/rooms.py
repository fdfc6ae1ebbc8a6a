"""A node's room under its row lock: what placement re-counts once it holds the lock (what was
free when the candidates were read may have been taken since) and takes in memory, for a host
or a training task, before it writes the allocation. Every change to what a node holds goes
through it, on the one reservation path (`reservations`): a new host (`services.place`), a
stopped host starting again on its node (`services.allocate_again`), a host resized in place
(`services.resize_capacity`) and the queue pass's tasks, one node each or a gang's several
(`reservations.TaskReservation`), count and take cards the same way.

What a room counts is kept on the node's row as well (`Node.room_*`), for placement's
shortlist to read: written under the lock whenever the count or what is taken differs from it
(`NodeRoom.save_room`), counted again in the database where cards or allocations change
outside a room (`recount`: a release, a node registered again, a card out of service), and
corrected where it drifted anyway (`correct_rooms`, on the capacity sampler's beat). On
PostgreSQL, how many schedulable nodes have each room is tallied from those rows by a trigger
(`RoomTally`); the same beat folds and corrects the tally (`correct_tallies`)."""

from dataclasses import dataclass

from django.db import connections, router, transaction

from apps.catalog.models import Region
from apps.catalog.selectors import free_room_changed
from apps.core import sql
from apps.core.transactions import lock_all
from apps.orchestration import adapter
from apps.orchestration.models import (
    ROOM_KIND,
    Accelerator,
    Allocation,
    Node,
    NodeHealth,
    Pool,
    RoomTally,
)
from apps.orchestration.scheduler import MILLI

ROOM_FIELDS = ("room_cards", "room_idle", "room_free_milli", "room_vcpu_held", "room_ram_gb_held")

# Each of ROOM_FIELDS as the database counts it for the node `node`, as `adapter.card_states`
# and `adapter.held_by_nodes` count it: its cards; those idle; what is free on its cards in
# service (an idle one whole, one shared by tasks less its live shares); what its live
# allocations hold.
_COUNTED = (
    "(SELECT COUNT(*) FROM orchestration_accelerator card WHERE card.node_id = node.id)",
    """(SELECT COUNT(*) FROM orchestration_accelerator card
        WHERE card.node_id = node.id AND card.allocation_id IS NULL AND NOT card.out_of_service)""",
    f"""(SELECT COALESCE(SUM(CASE
            WHEN card.allocation_id IS NULL THEN {MILLI}
            WHEN holder.share_milli > 0 THEN {MILLI} - COALESCE((
                SELECT CASE WHEN SUM(share.share_milli) > {MILLI} THEN {MILLI}
                    ELSE SUM(share.share_milli) END
                FROM orchestration_allocation share
                WHERE share.shared_accelerator_id = card.id AND share.released_at IS NULL
            ), 0)
            ELSE 0 END), 0)
        FROM orchestration_accelerator card
        LEFT JOIN orchestration_allocation holder ON holder.id = card.allocation_id
        WHERE card.node_id = node.id AND NOT card.out_of_service)""",
    """(SELECT COALESCE(SUM(live.vcpu), 0) FROM orchestration_allocation live
        WHERE live.node_id = node.id AND live.released_at IS NULL)""",
    """(SELECT COALESCE(SUM(live.ram_gb), 0) FROM orchestration_allocation live
        WHERE live.node_id = node.id AND live.released_at IS NULL)""",
)

_RECOUNT_SQL = "UPDATE orchestration_node AS node SET {counted} WHERE node.id IN ({nodes})"

_DRIFTED_SQL = """
SELECT id FROM (
    SELECT node.id, {stored}, {counted} FROM orchestration_node node
) room
WHERE {differs}
ORDER BY id
"""


def recount(node_ids) -> None:
    """Count the rooms of `node_ids` (locked by the caller) again in the database and keep
    them on their rows: where cards or allocations changed outside a `NodeRoom`. One
    statement."""
    node_ids = list(node_ids)
    if not node_ids:
        return
    counted = ", ".join(
        f"{field} = {expression}" for field, expression in zip(ROOM_FIELDS, _COUNTED, strict=True)
    )
    with transaction.get_connection().cursor() as cursor:
        cursor.execute(
            _RECOUNT_SQL.format(counted=counted, nodes=sql.placeholders(node_ids)), node_ids
        )


# What tells one kind of room from another (`ROOM_KIND`): `RoomTally`'s columns, as on a node.
TALLY_CLASS = ", ".join(Node._meta.get_field(name).column for name in ROOM_KIND)

# Every backend's rows that no transaction holds now (one in flight is skipped, never waited
# for), summed into backend 0's.
_FOLD_SQL = f"""
WITH folded AS (
    DELETE FROM orchestration_roomtally WHERE id IN (
        SELECT id FROM orchestration_roomtally WHERE backend <> 0 FOR UPDATE SKIP LOCKED
    )
    RETURNING {TALLY_CLASS}, nodes
)
INSERT INTO orchestration_roomtally AS tally ({TALLY_CLASS}, backend, nodes)
SELECT {TALLY_CLASS}, 0, SUM(nodes) FROM folded GROUP BY {TALLY_CLASS}
ON CONFLICT ({TALLY_CLASS}, backend) DO UPDATE SET nodes = tally.nodes + EXCLUDED.nodes
"""

# What the nodes count less what the tally says, in one snapshot (what a transaction in
# flight changed is in neither), added to backend 0's rows.
_CORRECT_SQL = f"""
INSERT INTO orchestration_roomtally AS tally ({TALLY_CLASS}, backend, nodes)
SELECT {TALLY_CLASS}, 0, SUM(nodes) FROM (
    SELECT {TALLY_CLASS}, COUNT(*) AS nodes FROM orchestration_node node
    WHERE node.health = '{NodeHealth.HEALTHY}' AND NOT node.is_drained
    GROUP BY {TALLY_CLASS}
    UNION ALL
    SELECT {TALLY_CLASS}, -SUM(nodes) FROM orchestration_roomtally GROUP BY {TALLY_CLASS}
) drift
GROUP BY {TALLY_CLASS}
HAVING SUM(nodes) <> 0
ON CONFLICT ({TALLY_CLASS}, backend) DO UPDATE SET nodes = tally.nodes + EXCLUDED.nodes
RETURNING tally.id
"""


def correct_tallies() -> int:
    """Fold the tally's rows (`RoomTally`) into as few as the park has kinds of room, and
    correct it where it differs from the nodes (a trigger switched off, a row written by
    hand): how many kinds of room were corrected. Nothing on SQLite, which keeps no tally.
    One at a time (a transaction-level advisory lock), so two never correct the same drift
    twice."""
    database = router.db_for_write(RoomTally)
    if connections[database].vendor != "postgresql":
        return 0
    with transaction.atomic(using=database), connections[database].cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('orchestration_roomtally'))")
        cursor.execute(_FOLD_SQL)
        cursor.execute(_CORRECT_SQL)
        corrected = cursor.rowcount
        cursor.execute("DELETE FROM orchestration_roomtally WHERE backend = 0 AND nodes = 0")
    return corrected


def correct_rooms() -> list[int]:
    """Every node whose kept room differs from what its cards and allocations say, counted
    again under its lock and kept: a change no room or recount saw (a row written by hand,
    a path that forgot). Read without locks first, so a park that agrees costs one statement
    and locks no node; then the tally of rooms (`correct_tallies`). Returns the ids of the
    nodes corrected."""
    statement = _DRIFTED_SQL.format(
        stored=", ".join(f"node.{field} AS kept_{field}" for field in ROOM_FIELDS),
        counted=", ".join(
            f"{expression} AS counted_{field}"
            for field, expression in zip(ROOM_FIELDS, _COUNTED, strict=True)
        ),
        differs=" OR ".join(f"kept_{field} <> counted_{field}" for field in ROOM_FIELDS),
    )
    drifted = [row[0] for row in sql.fetch_all(Node, statement)]
    if drifted:
        with transaction.atomic():
            lock_all(Node, drifted)
            recount(drifted)
        free_room_changed()
    correct_tallies()
    return drifted


def _locked_nodes(node_ids: list[int]) -> list[Node]:
    """The nodes `node_ids`, each with its pool and the pool's region, locked FOR NO KEY UPDATE
    in id order. Written out on PostgreSQL: every order locks its node so, where the ORM took
    several times the statement's CPU to build it and its three rows."""
    connection = transaction.get_connection()
    if connection.vendor != "postgresql":  # no row locks to take: the ORM's no-op
        return list(
            Node.objects.select_for_update(no_key=True, of=("self",))
            .filter(pk__in=node_ids)
            .select_related("pool__region")
            .order_by("pk")
        )
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError(
            "select_for_update cannot be used outside of a transaction."
        )
    quote = connection.ops.quote_name
    table = {model: quote(model._meta.db_table) for model in (Node, Pool, Region)}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_LOCKED_NODE.sql(connection)} FROM {table[Node]} node "
            f"JOIN {table[Pool]} pool ON pool.id = node.pool_id "
            f"JOIN {table[Region]} region ON region.id = pool.region_id "
            "WHERE node.id = ANY(%s) ORDER BY node.id FOR NO KEY UPDATE OF node",
            [node_ids],
        )
        rows = cursor.fetchall()
    nodes = []
    for row in rows:
        node, pool, region = _LOCKED_NODE.load(connection, row)
        Pool.region.field.set_cached_value(pool, region)
        Node.pool.field.set_cached_value(node, pool)
        nodes.append(node)
    return nodes


_LOCKED_NODE = sql.ModelColumns((Node, "node"), (Pool, "pool"), (Region, "region"))


@dataclass
class NodeRoom:
    """What a node has free, read under its lock: whole idle cards (lowest index first), or a
    share of the card with the least room that still holds it."""

    node: Node  # with pool__region
    vcpu_free: int
    ram_gb_free: int
    cards: list[adapter.Card]  # index order

    @property
    def counted(self) -> tuple[int, int, int, int, int]:
        """The room as `Node.room_*` keeps it (ROOM_FIELDS' order)."""
        node = self.node
        return (
            len(self.cards),
            self.idle_cards,
            sum(card.free for card in self.cards),
            node.vcpu_total - self.vcpu_free,
            node.ram_gb_total - self.ram_gb_free,
        )

    def save_room(self) -> bool:
        """Keep the room as counted now (what was taken included) on the node's row, where it
        differs from what the row kept: one UPDATE, or none. True when it wrote."""
        if not self._keep_counted():
            return False
        with transaction.get_connection().cursor() as cursor:
            cursor.execute(*self._room_update())
        return True

    def _room_update(self) -> tuple[str, list]:
        """The UPDATE that keeps the node's `room_*` as its row holds them now."""
        node = self.node
        return (
            f"UPDATE {Node._meta.db_table} SET {', '.join(f'{f} = %s' for f in ROOM_FIELDS)} "
            "WHERE id = %s",
            [*(getattr(node, field) for field in ROOM_FIELDS), node.pk],
        )

    @staticmethod
    def save_rooms(rooms) -> None:
        """`save_room` for several rooms (a queue pass's): one UPDATE of those that differ."""
        changed = [room.node for room in rooms if room._keep_counted()]
        if changed:
            Node.objects.bulk_update(changed, ROOM_FIELDS)

    def _keep_counted(self) -> bool:
        """Set the node's `room_*` to the room counted now; False when they said so already."""
        counted = dict(zip(ROOM_FIELDS, self.counted, strict=True))
        node = self.node
        if all(getattr(node, field) == value for field, value in counted.items()):
            return False
        for field, value in counted.items():
            setattr(node, field, value)
        return True

    @classmethod
    def lock(cls, node_ids) -> dict[int, "NodeRoom"]:
        """The nodes' rooms, locked (in id order) and then counted: three queries (four with
        shared cards) for any number of nodes.

        The locking statement reads the nodes too: a row it had to wait for is read again once
        its lock is held (PostgreSQL's READ COMMITTED), so a node drained meanwhile is seen
        drained; the cards and allocations are counted in statements after it, which see
        everything committed before the lock was granted."""
        nodes = _locked_nodes(list(node_ids))
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

    def allocate(
        self, allocation: Allocation, milli: int, *, new_work: bool = True, recorded=None
    ) -> bool:
        """`take`, then write it: `allocation` saved and the cards it took pointed at it, with
        the rows `recorded(room)` gives, once taken (the Placement that says why here). False
        when the node can no longer take it (nothing is written then)."""
        cards = self.take(allocation, milli, new_work=new_work)
        if cards is None:
            return False
        # The allocation, its cards, the room it leaves and what is recorded with them: one
        # statement on PostgreSQL.
        along = []
        if cards:
            along.append(
                (
                    f"UPDATE {Accelerator._meta.db_table} SET allocation_id = {{0}} "
                    f"WHERE id IN ({sql.placeholders(cards)})",
                    cards,
                )
            )
        if self._keep_counted():
            along.append(self._room_update())
        sql.insert_together(allocation, *(recorded(self) if recorded else ()), along=along)
        for card in self.cards:
            if card.id in cards:
                card.holder = allocation.pk
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
        self.save_room()
        free_room_changed()
        return True

    def _idle(self, count: int) -> list[adapter.Card] | None:
        """The `count` lowest-indexed idle cards (none for a count below one), or None when
        the node has fewer."""
        if count <= 0:
            return []
        idle = [card for card in self.cards if card.free == MILLI][:count]
        return idle if len(idle) == count else None
