"""Idle hosts are found in the database: fresh telemetry, every card idle past the threshold.
Hosts that are not candidates are never loaded, and finding them costs the same number of
queries for 3 hosts as for 30."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.orchestration.models import Accelerator, Allocation
from apps.orchestration.services import keep_card_readings
from apps.orders.idle import enforce_idle_policies, idle_candidates, idle_instances
from apps.orders.models import IdlePolicy, Instance
from tests.factories import AllocationFactory, NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool():
    return PoolFactory()


def host(pool, *, idle_for=None, util=0.5, cards=1, held_for=600, read_ago=0, node=None):
    """A running host of `cards` cards on a node of `pool` (its own, unless `node`) whose
    telemetry was written `read_ago` minutes ago: each of the host's cards reads `util` %,
    idle since `idle_for` minutes ago (None: busy), and the host has held them `held_for`
    minutes."""
    now = timezone.now()
    node = node or NodeFactory(pool=pool)
    allocation = AllocationFactory(node=node)
    Allocation.objects.filter(pk=allocation.pk).update(created_at=now - timedelta(minutes=held_for))
    taken = node.accelerators.count()
    readings = dict((node.telemetry or {}).get("accelerators") or {})
    for index in range(taken, taken + cards):
        Accelerator.objects.create(node=node, index=index, allocation=allocation)
        since = None if idle_for is None else (now - timedelta(minutes=idle_for)).isoformat()
        readings[str(index)] = {"util": util, "idle_since": since}
    node.telemetry = {
        "updated_at": (now - timedelta(minutes=read_ago)).isoformat(),
        "accelerators": readings,
    }
    store_telemetry(node)
    return allocation.workload.instance


def store_telemetry(node):
    """Write the node's telemetry as probing its backend does: with the readings kept beside it."""
    node.save(update_fields=["telemetry"])
    keep_card_readings([node])


def found(pool, **kwargs):
    return [row.instance for row in idle_instances([pool.backend.park], **kwargs)]


def test_a_host_on_a_node_with_stale_telemetry_is_not_a_candidate(pool):
    fresh = host(pool, idle_for=300)
    stale = host(pool, idle_for=300, read_ago=31)  # telemetry proves nothing after 30 minutes
    assert found(pool) == [fresh]
    assert stale not in found(pool, min_minutes=0)


def test_a_host_idle_for_less_than_the_threshold_is_not_a_candidate(pool):
    long_idle = host(pool, idle_for=180)
    recent = host(pool, idle_for=60)
    # It got its cards after they went idle: it idles from then on.
    newcomer = host(pool, idle_for=300, held_for=30)
    assert found(pool) == [long_idle]  # the default threshold: 120 minutes
    IdlePolicy.objects.create(park=pool.backend.park, threshold_minutes=200)
    assert found(pool) == []
    assert found(pool, min_minutes=45) == [long_idle, recent]
    assert found(pool, min_minutes=0) == [long_idle, recent, newcomer]  # longest idle first


def test_a_host_with_one_card_above_the_idle_threshold_is_not_a_candidate(pool):
    quiet = host(pool, idle_for=300, cards=2, util=1.5)
    node = NodeFactory(pool=pool)
    busy = host(pool, idle_for=300, cards=2, node=node)
    node.telemetry["accelerators"]["1"] = {"util": 87.0, "idle_since": None}
    store_telemetry(node)
    (row,) = idle_instances([pool.backend.park])
    assert row.instance == quiet and row.utilization_pct == 1.5
    assert 299 <= row.idle_minutes <= 301 and row.threshold_minutes == 120
    assert busy not in found(pool, min_minutes=0)


def test_a_card_missing_from_the_telemetry_or_unreadable_proves_nothing(pool):
    node = NodeFactory(pool=pool)
    host(pool, idle_for=300, cards=2, node=node)
    del node.telemetry["accelerators"]["1"]
    store_telemetry(node)
    garbled = host(pool, idle_for=300)
    garbled.node.telemetry["accelerators"]["0"]["idle_since"] = "yesterday"
    store_telemetry(garbled.node)
    unstamped = host(pool, idle_for=300)
    unstamped.node.telemetry["updated_at"] = "not a time"
    store_telemetry(unstamped.node)
    assert found(pool, min_minutes=0) == []


def test_only_running_hosts_in_the_park_are_candidates(pool):
    idle = host(pool, idle_for=300)
    stopped = host(pool, idle_for=300)
    Instance.objects.filter(pk=stopped.pk).update(state="stopped")
    elsewhere = host(PoolFactory(), idle_for=300)
    assert found(pool) == [idle]
    assert [r.instance for r in idle_instances([elsewhere.organization.park])] == [elsewhere]


def test_finding_idle_hosts_costs_the_same_queries_for_many_hosts(pool):
    def count():
        with CaptureQueriesContext(connection) as queries:
            rows = idle_instances([pool.backend.park])
            shown = [  # what the page shows of each
                (row.instance.organization.name, row.instance.flavor.code, row.instance.node)
                for row in rows
            ]
        return len(queries), len(shown)

    def add(n):
        for _ in range(n):
            host(pool, idle_for=300)  # a candidate
            host(pool, idle_for=None)  # busy
            host(pool, idle_for=300, read_ago=60)  # stale

    add(1)
    few = count()
    add(10)
    many = count()
    assert (few[1], many[1]) == (1, 11)
    assert many[0] == few[0]


def test_the_idle_policy_stops_only_the_candidates(pool):
    park = pool.backend.park
    IdlePolicy.objects.create(park=park, threshold_minutes=120, auto_stop=True)
    idle = host(pool, idle_for=300)
    busy, stale = host(pool), host(pool, idle_for=300, read_ago=60)
    assert [c.instance_id for c in idle_candidates([park])] == [idle.pk]
    (order,) = enforce_idle_policies()
    assert order.instance_id == idle.pk
    assert set(Instance.objects.filter(state="running").values_list("pk", flat=True)) == {
        busy.pk,
        stale.pk,
    }
