"""The few nodes of a park that scoring every node could choose for a host, asked of the
database, with the counts a decision keeps.

Within a pool every node has the same region, model, price, PUE and grid carbon, so only two
things tell its nodes apart for the scorer (`scheduler.scoring.decide`): how much it has free
(best fit: the fragmentation part grows with the node's free milli-accelerators) and what its
loaded cards draw (the energy part, `adapter.watts_under_load`). Each part is normalised
between the best and the worst fitting node of the park, so within a pool a node's total is a
fixed weighted sum of those two: whatever the weights, the pool's best node is, for some
amount of free room, the one drawing least among the nodes with that room. One statement
counts every node's room in the database and returns, for each pool,

- for each amount of free room, the PER_ROOM fitting nodes drawing least (ties: lowest id), so
  the best node and its runners-up are there;
- its fitting node drawing most (the worst energy part, which sets that part's scale; the best
  and worst free room are there already);

and, over the park, how many nodes fitted and how many were rejected for each reason, with the
first KEPT_CANDIDATES rejected for each (a decision lists them). Scored among these, every
shortlisted node gets the parts and total that scoring every node gives it, and the choice is
the same. What a node has free is only proposed: the node's lock counts it again.
"""

import json
from dataclasses import dataclass

from django.db import connections, router

from apps.core import sql
from apps.orchestration import adapter
from apps.orchestration.models import Node, NodeHealth
from apps.orchestration.scheduler import MILLI, filters

# Nodes kept per pool and amount of free room: the best, and runners-up for a plan whose best
# node filled up before its lock (a plan that runs out of them is made again without them).
PER_ROOM = 3

# What a node's loaded cards draw (NULL: nothing fresh measured), as `adapter.watts_under_load`
# reads its telemetry, spelled per database: the mean power of its cards at LOADED_PCT or
# more, from readings not older than MEASURED_POWER_FRESH_FOR. Params: the oldest fresh
# reading's time (ISO 8601), LOADED_PCT.
_MEASURED_WATTS = {
    "postgresql": """
        CASE WHEN (node.telemetry ->> 'updated_at')::timestamptz >= %s::timestamptz THEN (
            SELECT AVG((reading.value ->> 'power_w')::float8)
            FROM jsonb_each(CASE WHEN jsonb_typeof(node.telemetry -> 'accelerators') = 'object'
                THEN node.telemetry -> 'accelerators' END) reading
            WHERE reading.value ->> 'power_w' IS NOT NULL
                AND COALESCE((reading.value ->> 'util')::float8, 0) >= %s
        ) END""",
    "sqlite": """
        CASE WHEN julianday(json_extract(node.telemetry, '$.updated_at')) >= julianday(%s) THEN (
            SELECT AVG(json_extract(reading.value, '$.power_w'))
            FROM json_each(node.telemetry, '$.accelerators') reading
            WHERE json_extract(reading.value, '$.power_w') IS NOT NULL
                AND COALESCE(json_extract(reading.value, '$.util'), 0) >= %s
        ) END""",
}

# Every candidate node's room as `adapter.rooms` counts it (cards, idle cards, cards shared by
# tasks and what they have free, what live allocations hold), why it cannot take the host
# (`filters.check`'s codes, in its order; healthy and undrained nodes only are read), and the
# rows described above. A node's rank within its pool uses what its cards draw only where the
# pool's grid carbon makes it count (with none, energy ties every node, and the lowest id wins).
_SHORTLIST_SQL = """
WITH card_room AS (
    SELECT card.node_id, COUNT(*) AS cards,
        SUM(CASE WHEN card.allocation_id IS NULL AND NOT card.out_of_service THEN 1 ELSE 0 END)
            AS idle,
        SUM(CASE WHEN holder.share_milli > 0 AND NOT card.out_of_service THEN 1 ELSE 0 END)
            AS shared,
        SUM(CASE WHEN holder.share_milli > 0 AND NOT card.out_of_service THEN
            CASE WHEN COALESCE(shares.milli, 0) >= {milli} THEN 0
                ELSE {milli} - COALESCE(shares.milli, 0) END
            ELSE 0 END) AS shared_free
    FROM orchestration_accelerator card
    JOIN orchestration_node node ON node.id = card.node_id
    LEFT JOIN orchestration_allocation holder ON holder.id = card.allocation_id
    LEFT JOIN (
        SELECT shared_accelerator_id, SUM(share_milli) AS milli
        FROM orchestration_allocation
        WHERE shared_accelerator_id IS NOT NULL AND released_at IS NULL
        GROUP BY shared_accelerator_id
    ) shares ON shares.shared_accelerator_id = card.id
    WHERE {candidate}
    GROUP BY card.node_id
), held AS (
    SELECT live.node_id, SUM(live.vcpu) AS vcpu, SUM(live.ram_gb) AS ram_gb
    FROM orchestration_allocation live
    JOIN orchestration_node node ON node.id = live.node_id
    WHERE {candidate} AND live.released_at IS NULL
    GROUP BY live.node_id
), room AS (
    SELECT node.id, node.pool_id, node.vcpu_total, node.ram_gb_total,
        COALESCE(card_room.cards, 0) AS cards, COALESCE(card_room.idle, 0) AS idle,
        COALESCE(card_room.shared, 0) AS shared,
        COALESCE(card_room.idle, 0) * {milli} + COALESCE(card_room.shared_free, 0) AS free_milli,
        COALESCE(held.vcpu, 0) AS vcpu_used, COALESCE(held.ram_gb, 0) AS ram_used
    FROM orchestration_node node
    LEFT JOIN card_room ON card_room.node_id = node.id
    LEFT JOIN held ON held.node_id = node.id
    WHERE {candidate}
), judged AS (
    SELECT room.*, CASE
        WHEN %s > 0 AND cards = 0 THEN '{gpu_model}'
        WHEN vcpu_total - (CASE WHEN vcpu_used > vcpu_total THEN vcpu_total ELSE vcpu_used END)
            < %s THEN '{cpu}'
        WHEN ram_gb_total - (CASE WHEN ram_used > ram_gb_total THEN ram_gb_total ELSE ram_used
            END) < %s THEN '{memory}'
        WHEN idle < %s THEN '{gpu_count}'
    END AS rejected
    FROM room
), fitted AS (
    SELECT judged.*, {energy} AS energy
    FROM judged
    JOIN orchestration_node node ON node.id = judged.id
    WHERE judged.rejected IS NULL
), shortlisted AS (
    SELECT ranked.*, (SELECT COUNT(*) FROM fitted) AS counted FROM (
        SELECT fitted.*,
            ROW_NUMBER() OVER (PARTITION BY pool_id, free_milli ORDER BY energy, id) AS in_room,
            ROW_NUMBER() OVER (PARTITION BY pool_id ORDER BY energy DESC, id) AS most_drawn
        FROM fitted
    ) ranked
    WHERE in_room <= %s OR most_drawn = 1
), refused AS (
    SELECT ranked.* FROM (
        SELECT judged.*, ROW_NUMBER() OVER (PARTITION BY rejected ORDER BY id) AS nth,
            COUNT(*) OVER (PARTITION BY rejected) AS counted
        FROM judged
        WHERE rejected IS NOT NULL
    ) ranked
    WHERE nth <= %s
), listed AS (
    SELECT id, cards, idle, shared, vcpu_used, ram_used, rejected, counted FROM shortlisted
    UNION ALL
    SELECT id, cards, idle, shared, vcpu_used, ram_used, rejected, counted FROM refused
)
SELECT node.id, node.pool_id, node.hostname, node.vcpu_total, node.ram_gb_total, node.health,
    node.is_drained, CASE WHEN listed.rejected IS NULL THEN node.telemetry END AS telemetry,
    listed.cards, listed.idle, listed.shared, listed.vcpu_used, listed.ram_used,
    listed.rejected, listed.counted
FROM listed
JOIN orchestration_node node ON node.id = listed.id
ORDER BY node.id
"""


@dataclass
class Shortlist:
    nodes: list[adapter.NodeRow]  # those shortlisted, in id order, pools set
    rooms: dict[int, adapter.Room]  # {node id: its room}, for `adapter.node_views`
    fitted: int  # every node that could take the host
    rejected: dict[str, int]  # {reason code: how many nodes could not}
    # The first KEPT_CANDIDATES rejected, in id order, with why (a decision lists them): rows
    # with their room set as on a node (`free_accelerators`, `vcpu_used`, `ram_used`).
    refused: list[tuple[adapter.NodeRow, str]]

    @property
    def complete(self) -> bool:
        """Every node that fitted is in `nodes`."""
        return len(self.nodes) >= self.fitted


def shortlist(*, pools, shape, excluding=(), now) -> Shortlist:
    """The shortlist (above) of the schedulable nodes of `pools` (Pools with their region and
    accelerator model) for one host of `shape` (services.Shape), leaving out the nodes of
    `excluding` (ids): one statement, and one more where shortlisted nodes have cards shared
    by training tasks (what each of those has free)."""
    by_id = {pool.pk: pool for pool in pools}
    if not by_id:
        return Shortlist(nodes=[], rooms={}, fitted=0, rejected={}, refused=[])
    database = router.db_for_read(Node)
    vendor = connections[database].vendor
    pool_ids, excluded = list(by_id), list(excluding)
    # A host's pools are all of its accelerator model: one TDP stands in for unmeasured power.
    drawn = f"COALESCE({_MEASURED_WATTS[vendor]}, {int(pools[0].accelerator_model.tdp_w)})"
    carbonless = [pool.pk for pool in pools if not pool.carbon_g_per_kwh]
    statement = _SHORTLIST_SQL.format(
        energy=(
            f"CASE WHEN judged.pool_id IN ({sql.placeholders(carbonless)}) THEN 0 ELSE {drawn} END"
            if carbonless
            else drawn
        ),
        candidate=(
            f"node.pool_id IN ({sql.placeholders(pool_ids)}) AND node.health = %s"
            " AND NOT node.is_drained"
            + (f" AND node.id NOT IN ({sql.placeholders(excluded)})" if excluded else "")
        ),
        milli=MILLI,
        gpu_model=filters.GPU_MODEL,
        cpu=filters.CPU,
        memory=filters.MEMORY,
        gpu_count=filters.GPU_COUNT,
    )
    fresh_since = now - adapter.MEASURED_POWER_FRESH_FOR
    candidate = [*pool_ids, NodeHealth.HEALTHY, *excluded]
    params = [
        *candidate,  # the cards counted
        *candidate,  # what allocations hold
        *candidate,  # the nodes
        shape.accelerators,
        shape.vcpu,
        shape.ram_gb,
        shape.accelerators,
        *carbonless,
        fresh_since.isoformat(),
        adapter.LOADED_PCT,
        PER_ROOM,
        adapter.KEPT_CANDIDATES,
    ]
    rows = sql.fetch_all(Node, statement, params)
    partial = adapter.shared_cards_free([row[0] for row in rows if row[10] and row[13] is None])
    found = Shortlist(nodes=[], rooms={}, fitted=0, rejected={}, refused=[])
    for (
        pk,
        pool_id,
        hostname,
        vcpu_total,
        ram_gb_total,
        health,
        is_drained,
        telemetry,
        cards,
        idle,
        _shared,
        vcpu_used,
        ram_used,
        code,
        counted,
    ) in rows:
        node = adapter.NodeRow(
            pk=pk,
            pool_id=pool_id,
            hostname=hostname,
            vcpu_total=vcpu_total,
            ram_gb_total=ram_gb_total,
            health=health,
            is_drained=bool(is_drained),
            # Read for the nodes that fitted only: a rejected node's power scores nothing.
            telemetry=json.loads(telemetry) if isinstance(telemetry, str) else telemetry or {},
            pool=by_id[pool_id],
        )
        if code is not None:
            found.rejected[code] = counted
            node.free_accelerators, node.vcpu_used, node.ram_used = idle, vcpu_used, ram_used
            found.refused.append((node, code))
            continue
        found.fitted = counted
        shared = partial.get(pk, [])
        found.rooms[pk] = adapter.Room(
            idle=idle,
            free=[MILLI] * idle + shared + [0] * (cards - idle - len(shared)),
            vcpu_used=vcpu_used,
            ram_gb_used=ram_used,
        )
        found.nodes.append(node)
    return found
