"""The few nodes of a park that scoring every node could choose for a host, asked of the
database, with the counts a decision keeps.

Within a pool every node has the same region, model, price, PUE and grid carbon, so only two
things tell its nodes apart for the scorer (`scheduler.scoring.decide`): how much it has free
(best fit: the fragmentation part grows with the node's free milli-accelerators) and what its
loaded cards draw (the energy part, `adapter.watts_under_load`). Each part is normalised
between the best and the worst fitting node of the park, so within a pool a node's total is a
fixed weighted sum of those two: whatever the weights, the pool's best node is, for some
amount of free room, the one drawing least among the nodes with that room. One statement
returns, for each pool,

- for each amount of free room, the PER_ROOM fitting nodes drawing least (ties: lowest id), so
  the best node and its runners-up are there;
- its fitting node drawing most (the worst energy part, which sets that part's scale; the best
  and worst free room are there already).

Both read what each node has free and draws from its own row (`Node.room_*`, kept under the
node's lock, and `Node.loaded_watts`, kept with its telemetry), so PostgreSQL reads a few rows
of an index per pool and amount of free room (`Node.Meta.indexes`), whatever the size of the
park; SQLite, the development database, ranks every node's row instead. Scored among these,
every shortlisted node gets the parts and total that scoring every node gives it, and the
choice is the same.

How many nodes fitted and how many were rejected for each reason, with the first
KEPT_CANDIDATES rejected (a decision lists them), are counted apart and only when asked
(`Shortlist.census`): a quote that finds a node never needs them. On PostgreSQL they are
counted from `RoomTally`, how many schedulable nodes of each pool have each kind of room,
which a trigger keeps exact with every change to the nodes (less the nodes left out, read by
id): each kind is judged once, and the first rejected nodes of each kind rejected are read by
id from the `node_room_counts` index, so an order's census reads as many rows as the park has
kinds of room, whatever its size. SQLite judges every node. What a node has free is only
proposed: the node's lock counts it again.
"""

from dataclasses import dataclass
from datetime import UTC
from functools import cached_property

from django.db import connections, router
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.core import sql
from apps.orchestration import adapter, rooms
from apps.orchestration.models import Node, NodeHealth
from apps.orchestration.scheduler import MILLI, filters

# Nodes kept per pool and amount of free room: the best, and runners-up for a plan whose best
# node filled up before its lock (a plan that runs out of them is made again without them).
PER_ROOM = 3

# The nodes that may take new work: the condition of the nodes' partial indexes, spelled as
# they are (a parameter there would keep PostgreSQL from using them).
_SCHEDULABLE = f"node.health = '{NodeHealth.HEALTHY}' AND NOT node.is_drained"

# What a node has free of vCPU and memory, as `filters.check` counts it (a node registered
# smaller than what it holds has nothing free).
_VCPU_FREE = """(CASE WHEN node.room_vcpu_held > node.vcpu_total THEN 0
    ELSE node.vcpu_total - node.room_vcpu_held END)"""
_RAM_FREE = """(CASE WHEN node.room_ram_gb_held > node.ram_gb_total THEN 0
    ELSE node.ram_gb_total - node.room_ram_gb_held END)"""

_FITS = f"""node.room_idle >= %(cards)s AND {_VCPU_FREE} >= %(vcpu)s
    AND {_RAM_FREE} >= %(ram_gb)s"""

_COLUMNS = """node.id, node.pool_id, node.hostname, node.vcpu_total, node.ram_gb_total,
    node.health, node.is_drained, node.loaded_watts, node.loaded_watts_at, node.room_cards,
    node.room_idle, node.room_free_milli, node.room_vcpu_held, node.room_ram_gb_held"""

# PostgreSQL: each pool's amounts of free room, one index probe each (a loose index scan),
# then, for each, the nodes drawing least (three index scans that stop at PER_ROOM rows: those
# with fresh measured power by power, those never measured by id, and in pools without grid
# carbon, where power scores nothing, every node by id) and the lowest id of those drawing
# most; with the few whose measured power went stale (TDP stands in for it: the
# `node_power_measured_at` index finds them), they are ranked below as SQLite ranks them all.
_GATHERED_POSTGRESQL = """
WITH RECURSIVE room (pool_id, free_milli) AS (
    SELECT pool.id, (
        SELECT MIN(node.room_free_milli) FROM orchestration_node node
        WHERE node.pool_id = pool.id AND {schedulable}
            AND node.room_free_milli >= %(least_milli)s
    )
    FROM orchestration_pool pool WHERE pool.id IN ({pools})
    UNION ALL
    SELECT room.pool_id, (
        SELECT MIN(node.room_free_milli) FROM orchestration_node node
        WHERE node.pool_id = room.pool_id AND {schedulable}
            AND node.room_free_milli > room.free_milli
    )
    FROM room WHERE room.free_milli IS NOT NULL
), in_room AS (
    SELECT near.* FROM room CROSS JOIN LATERAL (
        (SELECT {columns} FROM orchestration_node node
        WHERE {in_this_room} AND node.loaded_watts IS NOT NULL
            AND node.loaded_watts_at >= %(fresh_since)s
        ORDER BY node.loaded_watts, node.id LIMIT %(per_room)s)
        UNION ALL
        (SELECT {columns} FROM orchestration_node node
        WHERE {in_this_room} AND node.loaded_watts = (
            SELECT node.loaded_watts FROM orchestration_node node
            WHERE {in_this_room} AND node.loaded_watts IS NOT NULL
                AND node.loaded_watts_at >= %(fresh_since)s
            ORDER BY node.loaded_watts DESC LIMIT 1
        ) AND node.loaded_watts_at >= %(fresh_since)s
        ORDER BY node.id LIMIT 1)
        UNION ALL
        (SELECT {columns} FROM orchestration_node node
        WHERE {in_this_room} AND node.loaded_watts IS NULL
        ORDER BY node.id LIMIT %(per_room)s)
        {carbonless_by_id}
    ) near
    WHERE room.free_milli IS NOT NULL
), gathered AS (
    SELECT * FROM in_room
    UNION
    SELECT {columns} FROM orchestration_node node
    WHERE {candidate} AND {fits} AND node.loaded_watts IS NOT NULL
        AND node.loaded_watts_at < %(fresh_since)s
)"""

_IN_THIS_ROOM = """node.pool_id = room.pool_id AND node.room_free_milli = room.free_milli
    AND {candidate} AND {fits}"""

_CARBONLESS_BY_ID = """UNION ALL
        (SELECT {columns} FROM orchestration_node node
        WHERE {in_this_room} AND room.pool_id IN ({carbonless})
        ORDER BY node.id LIMIT %(per_room)s)"""

# SQLite: every fitting node's row.
_GATHERED_SQLITE = """
WITH gathered AS (
    SELECT {columns} FROM orchestration_node node WHERE {candidate} AND {fits}
)"""

# What a node's loaded cards draw, for its rank in its pool: the measured power while fresh,
# else the TDP; nothing where the pool's grid carbon makes energy count for nothing (every
# node ties there, and the lowest id wins).
_ENERGY = """CASE
    WHEN gathered.pool_id IN ({carbonless}) THEN 0
    WHEN gathered.loaded_watts IS NOT NULL AND gathered.loaded_watts_at >= %(fresh_since)s
        THEN gathered.loaded_watts
    ELSE %(tdp_w)s END"""

_RANKED = """, ranked AS (
    SELECT gathered.*,
        ROW_NUMBER() OVER (
            PARTITION BY pool_id, room_free_milli ORDER BY {energy}, id
        ) AS in_room,
        ROW_NUMBER() OVER (PARTITION BY pool_id ORDER BY {energy} DESC, id) AS most_drawn
    FROM gathered
)
SELECT id, pool_id, hostname, vcpu_total, ram_gb_total, health, is_drained, loaded_watts,
    loaded_watts_at, room_cards, room_idle, room_free_milli, room_vcpu_held, room_ram_gb_held
FROM ranked
WHERE in_room <= %(per_room)s OR most_drawn = 1
ORDER BY id
"""

# Why a node (or a kind of room, as `RoomTally` keeps it) cannot take the host
# (`filters.check`'s codes, in its order), from its room's columns alone.
_REJECTED = f"""CASE
        WHEN %(cards)s > 0 AND node.room_cards = 0 THEN '{filters.GPU_MODEL}'
        WHEN {_VCPU_FREE} < %(vcpu)s THEN '{filters.CPU}'
        WHEN {_RAM_FREE} < %(ram_gb)s THEN '{filters.MEMORY}'
        WHEN node.room_idle < %(cards)s THEN '{filters.GPU_COUNT}'
    END"""

# PostgreSQL: how many candidate nodes have each kind of room, from the tally its trigger
# keeps (less the nodes left out, read by id), each judged; and for each kind rejected, its
# first KEPT_CANDIDATES nodes by id, read from the `node_room_counts` index (whose columns
# are the kind's, then the id). As many rows as the pools have kinds of room, whatever their
# nodes; their rows are read by id after it.
_COUNTED_POSTGRESQL = f"""
WITH kept AS (
    SELECT {rooms.TALLY_CLASS}, SUM(nodes) AS nodes FROM (
        SELECT {rooms.TALLY_CLASS}, nodes FROM orchestration_roomtally
        WHERE pool_id IN ({{pools}})
        {{left_out}}
    ) counted
    GROUP BY {rooms.TALLY_CLASS}
    HAVING SUM(nodes) <> 0
), judged AS (
    SELECT node.*, {_REJECTED} AS rejected FROM kept node
)
SELECT rejected, nodes, CASE WHEN rejected IS NOT NULL THEN ARRAY(
    SELECT node.id FROM orchestration_node node
    WHERE node.pool_id = judged.pool_id AND node.room_cards = judged.room_cards
        AND node.room_idle = judged.room_idle AND node.vcpu_total = judged.vcpu_total
        AND node.room_vcpu_held = judged.room_vcpu_held
        AND node.ram_gb_total = judged.ram_gb_total
        AND node.room_ram_gb_held = judged.room_ram_gb_held
        AND {{candidate}}
    ORDER BY node.id LIMIT %(kept)s
) END
FROM judged
"""

_LEFT_OUT = f"""UNION ALL
        SELECT {rooms.TALLY_CLASS}, -1 FROM orchestration_node node
        WHERE node.id IN ({{excluded}}) AND node.pool_id IN ({{pools}}) AND {_SCHEDULABLE}"""

_BY_ID = "SELECT {columns} FROM orchestration_node node WHERE node.id IN ({nodes})"

# SQLite: every candidate node judged, counted; then the first rejected, in a statement of
# their own.
_JUDGED = f"""
WITH judged AS (
    SELECT node.id, {_REJECTED} AS rejected FROM orchestration_node node WHERE {{candidate}}
)"""

_COUNTED_SQLITE = _JUDGED + "SELECT rejected, COUNT(*), NULL FROM judged GROUP BY rejected"

_REFUSED = (
    _JUDGED
    + """
SELECT judged.rejected, {columns}
FROM judged JOIN orchestration_node node ON node.id = judged.id
WHERE judged.rejected IS NOT NULL
ORDER BY node.id
LIMIT %(kept)s
"""
)


@dataclass
class Census:
    """What a decision keeps of the nodes that were not shortlisted."""

    fitted: int  # every node that could take the host
    rejected: dict[str, int]  # {reason code: how many nodes could not}
    # The first KEPT_CANDIDATES rejected, in id order, with why (a decision lists them): rows
    # with their room set as on a node (`free_accelerators`, `vcpu_used`, `ram_used`).
    refused: list[tuple[adapter.NodeRow, str]]


@dataclass
class Shortlist:
    nodes: list[adapter.NodeRow]  # those shortlisted, in id order, pools set
    rooms: dict[int, adapter.Room]  # {node id: its room}, for `adapter.node_views`
    _query: "_Query | None" = None

    @cached_property
    def census(self) -> Census:
        """Counted on first asking: one statement, and one more where nodes were rejected."""
        if self._query is None:
            return Census(fitted=0, rejected={}, refused=[])
        return self._query.census()

    @property
    def complete(self) -> bool:
        """Every node that fitted is in `nodes`."""
        return len(self.nodes) >= self.census.fitted


def shortlist(*, pools, shape, excluding=(), now) -> Shortlist:
    """The shortlist (above) of the schedulable nodes of `pools` (Pools with their region and
    accelerator model) for one host of `shape` (services.Shape), leaving out the nodes of
    `excluding` (ids): one statement, and one more where shortlisted nodes have cards shared
    by training tasks (what each of those has free)."""
    if not pools:
        return Shortlist(nodes=[], rooms={})
    query = _Query(pools, shape, excluding, now)
    rows = query.shortlisted()
    partial = adapter.shared_cards_free([row[0] for row in rows if row[11] > row[10] * MILLI])
    found = Shortlist(nodes=[], rooms={}, _query=query)
    for row in rows:
        node = query.node_row(row)
        cards, idle = row[9], row[10]
        shared = partial.get(node.pk, [])
        found.rooms[node.pk] = adapter.Room(
            idle=idle,
            free=[MILLI] * idle + shared + [0] * (cards - idle - len(shared)),
            vcpu_used=row[12],
            ram_gb_used=row[13],
        )
        found.nodes.append(node)
    return found


class _Query:
    """The statements of one shortlist, and their parameters."""

    def __init__(self, pools, shape, excluding, now):
        self.by_id = {pool.pk: pool for pool in pools}
        self.database = router.db_for_read(Node)
        connection = connections[self.database]
        self.vendor = connection.vendor
        pool_ids, excluded = list(self.by_id), sorted(excluding)
        carbonless = [pool.pk for pool in pools if not pool.carbon_g_per_kwh]
        self.params = {
            "cards": shape.accelerators,
            "vcpu": shape.vcpu,
            "ram_gb": shape.ram_gb,
            "least_milli": shape.accelerators * MILLI,
            "per_room": PER_ROOM,
            "kept": adapter.KEPT_CANDIDATES,
            # A host's pools are all of its accelerator model: one TDP for unmeasured power.
            "tdp_w": float(pools[0].accelerator_model.tdp_w),
            "fresh_since": connection.ops.adapt_datetimefield_value(
                now - adapter.MEASURED_POWER_FRESH_FOR
            ),
        }
        self.pools = self._named("pool", pool_ids)
        self.carbonless = self._named("carbonless", carbonless)
        self.excluded = self._named("excluded", excluded) if excluded else None
        self.candidate = f"node.pool_id IN ({self.pools}) AND {_SCHEDULABLE}" + (
            f" AND node.id NOT IN ({self.excluded})" if excluded else ""
        )

    def _named(self, prefix: str, values) -> str:
        """`%(prefix_0)s, …` for `values`, added to the parameters (NULL for none)."""
        names = [f"{prefix}_{index}" for index in range(len(values))]
        self.params.update(zip(names, values, strict=True))
        return ", ".join(f"%({name})s" for name in names) or "NULL"

    def shortlisted(self) -> list[tuple]:
        if self.vendor == "postgresql":
            in_this_room = _IN_THIS_ROOM.format(candidate=self.candidate, fits=_FITS)
            gathered = _GATHERED_POSTGRESQL.format(
                schedulable=_SCHEDULABLE,
                pools=self.pools,
                columns=_COLUMNS,
                in_this_room=in_this_room,
                candidate=self.candidate,
                fits=_FITS,
                carbonless_by_id=(
                    _CARBONLESS_BY_ID.format(
                        columns=_COLUMNS, in_this_room=in_this_room, carbonless=self.carbonless
                    )
                    if self.params.get("carbonless_0") is not None
                    else ""
                ),
            )
        else:
            gathered = _GATHERED_SQLITE.format(
                columns=_COLUMNS, candidate=self.candidate, fits=_FITS
            )
        statement = gathered + _RANKED.format(energy=_ENERGY.format(carbonless=self.carbonless))
        return sql.fetch_all(Node, statement, self.params)

    def census(self) -> Census:
        if self.vendor == "postgresql":
            return self._counted_postgresql()
        counted = sql.fetch_all(Node, _COUNTED_SQLITE.format(candidate=self.candidate), self.params)
        rejected = {code: count for code, count, _first in counted if code is not None}
        fitted = sum(count for code, count, _first in counted if code is None)
        if not rejected:
            return Census(fitted=fitted, rejected={}, refused=[])
        statement = _REFUSED.format(candidate=self.candidate, columns=_COLUMNS)
        return self._refused(fitted, rejected, sql.fetch_all(Node, statement, self.params))

    def _counted_postgresql(self) -> Census:
        left_out = (
            _LEFT_OUT.format(excluded=self.excluded, pools=self.pools) if self.excluded else ""
        )
        statement = _COUNTED_POSTGRESQL.format(
            pools=self.pools, left_out=left_out, candidate=self.candidate
        )
        fitted, rejected, first = 0, {}, []
        for code, count, ids in sql.fetch_all(Node, statement, self.params):
            if code is None:
                fitted += count
            else:
                rejected[code] = rejected.get(code, 0) + count
                first.extend((pk, code) for pk in ids)
        if not rejected:
            return Census(fitted=fitted, rejected={}, refused=[])
        code_of = dict(sorted(first)[: adapter.KEPT_CANDIDATES])
        statement = _BY_ID.format(columns=_COLUMNS, nodes=self._named("refused", list(code_of)))
        rows = [(code_of[row[0]], *row) for row in sql.fetch_all(Node, statement, self.params)]
        return self._refused(fitted, rejected, rows)

    def _refused(self, fitted: int, rejected: dict[str, int], rows) -> Census:
        """The census of `rows` ((code, *_COLUMNS) of the first nodes rejected)."""
        refused = []
        for code, *row in sorted(rows, key=lambda row: row[1]):
            node = self.node_row(row)
            node.free_accelerators, node.vcpu_used, node.ram_used = row[10], row[12], row[13]
            refused.append((node, code))
        return Census(fitted=fitted, rejected=rejected, refused=refused)

    def node_row(self, row) -> adapter.NodeRow:
        pk, pool_id, hostname, vcpu_total, ram_gb_total, health, is_drained, watts, at = row[:9]
        return adapter.NodeRow(
            pk=pk,
            pool_id=pool_id,
            hostname=hostname,
            vcpu_total=vcpu_total,
            ram_gb_total=ram_gb_total,
            health=health,
            is_drained=bool(is_drained),
            loaded_watts=watts,
            loaded_watts_at=_aware(at),
            pool=self.by_id[pool_id],
        )


def _aware(value):
    """A datetime column as read in SQL: SQLite answers it as UTC without a time zone."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        return timezone.make_aware(value, UTC)
    return value
