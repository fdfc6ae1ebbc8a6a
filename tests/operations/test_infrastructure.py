"""Backends, nodes and capacity: registering a backend (validated by asking its driver),
probing it (capacity, health, telemetry), draining nodes, pool attributes and the capacity
samples the overview charts."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone, translation

from apps.core.errors import PermissionDenied
from apps.core.models import AuditEvent
from apps.operations.selectors import counted_pools, pools_with_allocation
from apps.operations.selectors.dashboard import capacity_breakdown, capacity_series
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.capacity import sample_capacity
from apps.orchestration.models import Backend, CapacitySample, Node, NodeHealth, Pool
from apps.orchestration.selectors import free_room_by_model
from apps.orchestration.services import (
    IDLE_BELOW_PCT,
    NoCapacity,
    drain_node,
    probe_backend,
    register_backend,
    undrain_node,
    update_pool,
)
from apps.orders.idle import idle_candidates, set_idle_policy
from apps.orders.services import submit_create
from tests.factories import (
    BackendFactory,
    NodeFactory,
    ParkFactory,
    ParkOperatorFactory,
    RegionFactory,
    UserFactory,
)
from tests.lock_order import recording

pytestmark = pytest.mark.django_db


def simulated(*pools):
    return {
        "pools": [
            {
                "name": name,
                "accelerator_model": model,
                "nodes": [
                    {"hostname": f"{name}-n{i}", "accelerators": 4, "vcpu": 64, "ram_gb": 512}
                    for i in range(nodes)
                ],
            }
            for name, model, nodes in pools
        ]
    }


@pytest.fixture
def stranger():
    """An operator of another park."""
    user = UserFactory()
    ParkOperatorFactory(park=ParkFactory(), user=user)
    return user


# --- Registering a backend -------------------------------------------------------------------


def test_register_backend_imports_what_the_driver_reports(console, operator):
    backend = register_backend(
        park=console.park,
        operator=operator,
        name="edge-sim",
        driver="simulator",
        config=simulated(("edge-h1", "test-h1", 2)),
        region=console.region,
    )

    pool = Pool.objects.get(backend=backend)
    assert (pool.name, pool.region, pool.accelerator_model) == (
        "edge-h1",
        console.region,
        console.model,
    )
    assert sorted(pool.nodes.values_list("hostname", flat=True)) == ["edge-h1-n0", "edge-h1-n1"]
    assert sum(node.accelerators.count() for node in pool.nodes.all()) == 8
    event = AuditEvent.objects.get(action="backend.registered")
    assert event.actor == operator and event.park_id == console.park.pk
    assert event.data == {"driver": "simulator", "pools": ["edge-h1"], "nodes": 2}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"driver": "no-such"}, "driver", "No backend driver is called"),
        ({"config": {"pools": [{"name": "p"}]}}, "config", "The driver refused"),
        ({"config": ["not", "an", "object"]}, "config", "must be a JSON object"),
        ({"config": simulated(("p", "unknown-gpu", 1))}, "config", "unknown-gpu"),
        ({"config": simulated(("p", "test-h1", 1), ("p", "test-h1", 1))}, "config", "same name"),
        ({"config": simulated(("p", "test-h1", 1)), "region": None}, "region", "Choose the region"),
        ({"name": "  "}, "name", "Give the backend a name"),
        ({"name": "sim"}, "name", "already has a backend"),
    ],
)
def test_register_backend_refusals_name_the_field(console, operator, fields, field, message):
    values = {
        "name": "new",
        "driver": "simulator",
        "config": simulated(("p", "test-h1", 1)),
        "region": console.region,
        **fields,
    }
    with pytest.raises(ValidationError) as excinfo:
        register_backend(park=console.park, operator=operator, **values)
    assert message in " ".join(excinfo.value.message_dict[field])
    assert not Backend.objects.filter(name="new").exists()


def test_register_backend_in_another_parks_region_is_refused(console, operator):
    foreign = RegionFactory()
    with pytest.raises(ValidationError) as excinfo:
        register_backend(
            park=console.park,
            operator=operator,
            name="x",
            driver="simulator",
            config=simulated(("p", "test-h1", 1)),
            region=foreign,
        )
    assert "region" in excinfo.value.message_dict


def test_only_the_parks_operators_register_backends(console, stranger, owner):
    for user in (stranger, owner):
        with pytest.raises(PermissionDenied):
            register_backend(
                park=console.park, operator=user, name="x", driver="simulator", config={}
            )


@pytest.fixture
def remote(remote_driver):
    """register(park, operator, region, name=, url=): a `remote` backend of one pool."""

    def register(park, operator, region, *, name, url):
        return register_backend(
            park=park,
            operator=operator,
            name=name,
            driver=remote_driver.name,
            config={**simulated((f"{name}-p", "test-h1", 1)), "url": url},
            region=region,
        )

    return register


def test_a_cluster_registered_in_any_park_is_refused_again(console, operator, remote):
    first = remote(console.park, operator, console.region, name="hpc", url="http://Head:6820/")
    assert first.endpoint == "http://head:6820"
    other_park = ParkFactory(name="North")
    other_operator = ParkOperatorFactory(park=other_park).user
    region = RegionFactory(park=other_park)

    with pytest.raises(ValidationError) as excinfo:
        remote(other_park, other_operator, region, name="hpc2", url="HTTP://head:6820")

    assert excinfo.value.message_dict["config"] == [
        f"http://head:6820 is already registered, as backend “hpc” of park “{console.park.name}”."
    ]
    assert not Backend.objects.filter(name="hpc2").exists()
    assert not Pool.objects.filter(name="hpc2-p").exists()
    # Another cluster, and drivers that name no endpoint, register as before.
    remote(other_park, other_operator, region, name="hpc3", url="http://head:6821")
    register_backend(
        park=other_park,
        operator=other_operator,
        name="sim2",
        driver="simulator",
        config=simulated(("p2", "test-h1", 1)),
        region=region,
    )
    assert Backend.objects.get(name="sim2").endpoint == ""


def test_a_config_whose_endpoint_cannot_be_read_is_refused(console, operator, remote):
    with pytest.raises(ValidationError) as excinfo:
        remote(console.park, operator, console.region, name="hpc", url="http://head:99999")
    assert "The driver refused this configuration" in excinfo.value.message_dict["config"][0]


def test_two_backends_cannot_hold_one_endpoint_however_they_race(console):
    """What holds when two registrations pass the check at once: one commits, the other's
    insert fails (register_backend turns that into the same refusal)."""
    BackendFactory(park=console.park, name="a", endpoint="http://head:6820")
    BackendFactory(park=console.park, name="b")  # no endpoint: never a clash
    BackendFactory(park=console.park, name="c")
    with pytest.raises(IntegrityError), transaction.atomic():
        BackendFactory(park=ParkFactory(), name="d", endpoint="http://head:6820")


# --- Probing: health and telemetry -----------------------------------------------------------


def test_probe_records_idle_since_and_keeps_it_while_idle(console, telemetry):
    start = timezone.now() - timedelta(minutes=90)
    Backend.objects.filter(pk=console.backend.pk).update(
        config={"utilization": {"node-a": {"0": 1, "1": 80}}, "idle_share": 0}
    )
    probe_backend(backend=console.backend, now=start)
    probe_backend(backend=console.backend, now=start + timedelta(minutes=30))

    node = Node.objects.get(hostname="node-a")
    devices = node.telemetry["accelerators"]
    assert devices["0"] == {"util": 1.0, "idle_since": start.isoformat()}
    assert devices["1"] == {"util": 80.0, "idle_since": None}
    assert node.telemetry["simulated"] is True
    assert node.last_seen_at == start + timedelta(minutes=30)

    # Busy again: the idle stretch ends.
    telemetry({"node-a": {"0": 50}})
    assert Node.objects.get(hostname="node-a").telemetry["accelerators"]["0"]["idle_since"] is None


def readings(hostname):
    node = Node.objects.get(hostname=hostname)
    cards = node.accelerators.order_by("index").values_list("idle_since", "utilization_pct")
    return node.telemetry_at, list(cards)


def test_probe_keeps_each_cards_reading_beside_the_telemetry(console, telemetry):
    start = timezone.now() - timedelta(minutes=90)
    Backend.objects.filter(pk=console.backend.pk).update(
        config={"utilization": {"node-a": {"0": 1, "1": 80}}, "idle_share": 0}
    )
    probe_backend(backend=console.backend, now=start)
    later = start + timedelta(minutes=30)
    probe_backend(backend=console.backend, now=later)

    taken_at, cards = readings("node-a")
    assert taken_at == later
    # Idle since the first reading, as the telemetry says.
    assert cards[:2] == [(start, 1.0), (None, 80.0)]

    # Busy again: the card's idle stretch ends in its column as in the telemetry.
    now = timezone.now()
    Backend.objects.filter(pk=console.backend.pk).update(
        config={"utilization": {"node-a": {"0": 50}}, "idle_share": 0}
    )
    probe_backend(backend=console.backend, now=now)
    taken_at, cards = readings("node-a")
    assert taken_at == now and cards[0] == (None, 50.0)


def test_cards_idle_in_stale_telemetry_make_no_idle_host(console, running):
    host = running()
    Backend.objects.filter(pk=console.backend.pk).update(
        config={"utilization": {host.node.hostname: {"0": 0}}, "idle_share": 0}
    )
    then = timezone.now() - timedelta(hours=3)
    probe_backend(backend=console.backend, now=then)

    # Its card reads idle, but in telemetry three hours old: that proves nothing now.
    taken_at, cards = readings(host.node.hostname)
    assert taken_at == then and cards[0][0] == then
    assert idle_candidates([console.park], min_minutes=0) == []
    # Read again now, still idle (since then): an idle host.
    probe_backend(backend=console.backend)
    (candidate,) = idle_candidates([console.park], min_minutes=0)
    assert candidate.instance_id == host.pk


def test_probe_marks_unhealthy_and_unseen_nodes_down_and_back(console):
    Backend.objects.filter(pk=console.backend.pk).update(config={"unhealthy": ["node-b"]})
    probe_backend(backend=console.backend)
    assert Node.objects.get(hostname="node-b").health == NodeHealth.DOWN
    assert Node.objects.get(hostname="node-a").health == NodeHealth.HEALTHY
    assert AuditEvent.objects.filter(action="node.health_changed").count() == 1

    Backend.objects.filter(pk=console.backend.pk).update(config={})
    probe_backend(backend=console.backend)
    assert Node.objects.get(hostname="node-b").health == NodeHealth.HEALTHY


def test_probe_keeps_the_drivers_error_on_the_backend(console):
    SimulatorDriver.fail_next(BackendError("simulator: control plane unreachable"))
    try:
        backend = probe_backend(backend=console.backend)
    finally:
        SimulatorDriver.clear_injected()
    assert backend.last_error == "simulator: control plane unreachable"
    stored = Backend.objects.get(pk=console.backend.pk)
    assert stored.last_error == backend.last_error and stored.last_checked_at is not None
    assert AuditEvent.objects.filter(action="backend.error").count() == 1

    probe_backend(backend=console.backend)
    assert Backend.objects.get(pk=console.backend.pk).last_error == ""
    assert AuditEvent.objects.filter(action="backend.recovered").count() == 1


def test_an_unreachable_backend_leaves_its_nodes_unknown_until_it_answers(console):
    """Nothing new is placed on a node whose backend cannot be asked; what it says once it
    answers again is followed."""
    nodes = Node.objects.filter(pool__backend=console.backend)
    assert free_room_by_model(console.park)
    SimulatorDriver.fail_next(BackendError("simulator: control plane unreachable"))
    try:
        probe_backend(backend=console.backend)
    finally:
        SimulatorDriver.clear_injected()
    assert set(nodes.values_list("health", flat=True)) == {NodeHealth.UNKNOWN}
    assert not free_room_by_model(console.park)  # no placement on them
    moved = AuditEvent.objects.filter(action="node.health_changed", data__to="unknown")
    assert moved.count() == nodes.count()

    probe_backend(backend=console.backend)
    assert set(nodes.values_list("health", flat=True)) == {NodeHealth.HEALTHY}
    assert free_room_by_model(console.park)


def test_probe_follows_the_capacity_report_of_registered_pools(console, operator):
    backend = register_backend(
        park=console.park,
        operator=operator,
        name="grow",
        driver="simulator",
        config=simulated(("g", "test-h1", 1)),
        region=console.region,
    )
    Backend.objects.filter(pk=backend.pk).update(config=simulated(("g", "test-h1", 2)))
    probe_backend(backend=backend)
    assert Node.objects.filter(pool__backend=backend).count() == 2


# --- Draining --------------------------------------------------------------------------------


def test_a_drained_node_takes_no_new_hosts_and_keeps_its_running_ones(
    console, operator, owner, running
):
    first = running(4, name="first")
    node = first.node
    other = next(n for n in console.nodes if n.pk != node.pk)
    drain_node(node=other, operator=operator, reason="firmware update")

    event = AuditEvent.objects.get(action="node.drained")
    assert event.actor == operator and event.park_id == console.park.pk
    assert event.data == {"reason": "firmware update", "running": 0}
    drain_node(node=node, operator=operator)
    assert Node.objects.get(pk=node.pk).is_drained
    first.refresh_from_db()
    assert first.state == "running" and first.node_id == node.pk  # it stays
    assert AuditEvent.objects.filter(action="node.drained").first().data["running"] == 1
    with pytest.raises(NoCapacity):
        submit_create(
            organization=console.organization, actor=owner, request=console.request(1, "second")
        )

    undrain_node(node=other, operator=operator)
    second = running(1, name="second")
    assert second.node_id == other.pk
    assert AuditEvent.objects.filter(action="node.undrained").count() == 1


def test_draining_twice_records_it_once(console, operator):
    node = console.nodes[0]
    drain_node(node=node, operator=operator)
    drain_node(node=node, operator=operator)
    assert AuditEvent.objects.filter(action="node.drained").count() == 1


def test_only_the_parks_operators_drain(console, stranger, owner):
    for user in (stranger, owner):
        with pytest.raises(PermissionDenied):
            drain_node(node=console.nodes[0], operator=user)
    assert not Node.objects.get(pk=console.nodes[0].pk).is_drained


# --- Pools and the idle policy ---------------------------------------------------------------


def test_update_pool_moves_it_and_records_what_changed(console, operator):
    edge = RegionFactory(park=console.park, edge=True, name="Edge")
    update_pool(
        pool=console.pool,
        operator=operator,
        region=edge,
        pue=Decimal("1.45"),
        power_price_minor_per_kwh=75,
        carbon_g_per_kwh=console.pool.carbon_g_per_kwh,
        is_schedulable=True,
    )
    pool = Pool.objects.get(pk=console.pool.pk)
    assert (pool.region, pool.pue, pool.power_price_minor_per_kwh) == (edge, Decimal("1.45"), 75)
    event = AuditEvent.objects.get(action="pool.updated")
    assert set(event.data) == {"region", "pue", "power_price_minor_per_kwh"}
    assert event.data["pue"] == {"from": "1.30", "to": "1.45"}


def test_update_pool_refusals(console, operator, stranger):
    with pytest.raises(ValidationError) as excinfo:
        update_pool(pool=console.pool, operator=operator, region=RegionFactory())
    assert "region" in excinfo.value.message_dict
    with pytest.raises(ValidationError):
        update_pool(pool=console.pool, operator=operator, pue=Decimal("0.90"))
    with pytest.raises(PermissionDenied):
        update_pool(pool=console.pool, operator=stranger, pue=Decimal("1.40"))
    assert Pool.objects.get(pk=console.pool.pk).pue == Decimal("1.30")


@pytest.mark.parametrize("minutes", [0, 9, 10081])
def test_idle_policy_threshold_range(console, operator, minutes):
    with pytest.raises(ValidationError):
        set_idle_policy(
            park=console.park, operator=operator, threshold_minutes=minutes, auto_stop=True
        )


# --- Capacity samples ------------------------------------------------------------------------


def test_sample_capacity_counts_allocated_power_and_measured_utilization(
    console, running, telemetry
):
    host = running(2)
    telemetry({host.node.hostname: {"0": 2, "1": 60}})
    now = timezone.now().replace(second=5)

    (sample,) = [s for s in sample_capacity(now=now) if s.pool_id == console.pool.pk]

    assert (sample.accelerators_total, sample.accelerators_allocated) == (16, 2)
    assert sample.accelerators_idle == 1  # device 0 reads under IDLE_BELOW_PCT
    assert IDLE_BELOW_PCT > 2
    assert sample.utilization_pct == Decimal("31.0")
    assert sample.watts == round(2 * 700 * Decimal("1.30"))
    # A second run in the same minute adds nothing.
    sample_capacity(now=now + timedelta(seconds=20))
    assert CapacitySample.objects.filter(pool=console.pool).count() == 1


def test_sample_capacity_puts_the_measured_power_beside_the_estimate(console, running):
    host = running(2)
    now = timezone.now().replace(second=5)
    node = host.node
    # What the host agent read: two busy cards and an idle one, which draws power too.
    node.telemetry = {
        "updated_at": now.isoformat(),
        "accelerators": {
            "0": {"util": 90, "power_w": 600.0},
            "1": {"util": 80, "power_w": 550.5},
            "2": {"util": 0, "power_w": 75.0},
            "3": {"util": 0},  # a card that does not report its power
        },
    }
    node.save(update_fields=["telemetry"])

    (sample,) = [s for s in sample_capacity(now=now) if s.pool_id == console.pool.pk]

    assert sample.watts == round(2 * 700 * Decimal("1.30"))  # the TDP estimate, as before
    assert sample.measured_accelerators == 3
    assert sample.measured_watts == round(Decimal("1225.5") * Decimal("1.30"))


def test_stale_or_missing_power_readings_measure_nothing(console, running):
    host = running(1)
    now = timezone.now().replace(second=5)
    Node.objects.filter(pk=host.node.pk).update(
        telemetry={
            "updated_at": (now - timedelta(hours=1)).isoformat(),
            "accelerators": {"0": {"util": 90, "power_w": 600.0}},
        }
    )
    (sample,) = [s for s in sample_capacity(now=now) if s.pool_id == console.pool.pk]
    assert (sample.measured_watts, sample.measured_accelerators) == (None, 0)
    assert sample.watts == round(700 * Decimal("1.30"))


def test_capacity_series_draws_measured_power_where_a_pool_reports_it(console):
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    for minutes, measured in ((0, None), (30, 2400), (60, 1800)):
        CapacitySample.objects.create(
            park=console.park,
            pool=console.pool,
            taken_at=start + timedelta(minutes=minutes),
            accelerators_total=4,
            accelerators_allocated=2,
            watts=1820,
            measured_watts=measured,
            measured_accelerators=4 if measured else 0,
        )
    series = capacity_series([console.park], since=start - timedelta(minutes=1))
    assert series["power_kw"] == [1.82, 1.82, 1.82]
    assert series["measured_kw"] == [None, 2.4, 1.8]
    assert series["measured_accelerators"] == 4


def test_capacity_series_sums_pools_per_moment_and_integrates_energy(console):
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2)
    other = Pool.objects.create(
        backend=console.backend, region=console.region, name="b", accelerator_model=console.model
    )
    for minutes, watts in ((0, 1000), (60, 3000), (120, 0)):
        for pool in (console.pool, other):
            CapacitySample.objects.create(
                park=console.park,
                pool=pool,
                taken_at=start + timedelta(minutes=minutes),
                accelerators_total=10,
                accelerators_allocated=5,
                watts=watts,
            )
    series = capacity_series([console.park], since=start - timedelta(minutes=1))
    assert series["points"] == 3
    assert series["allocated_pct"] == [50.0, 50.0, 50.0]
    assert series["power_kw"] == [2.0, 6.0, 0.0]
    assert series["energy_kwh"] == Decimal("8.0")  # 2 kW for 1 h + 6 kW for 1 h
    assert capacity_series([ParkFactory()], since=start)["points"] == 0


def test_capacity_breakdown_by_level_site_and_vendor(console, running):
    running(4)
    edge = RegionFactory(park=console.park, edge=True, name="Edge")
    Pool.objects.create(
        backend=console.backend, region=edge, name="edge", accelerator_model=console.model
    )
    with translation.override("en"):
        breakdown = capacity_breakdown(list(pools_with_allocation([console.park])))
    by_level = {row.label: (row.total, row.allocated, row.free) for row in breakdown["level"]}
    assert by_level == {"Center": (16, 4, 12), "Edge": (0, 0, 0)}
    assert [(r.label, r.total) for r in breakdown["vendor"]] == [("NVIDIA", 16)]
    assert {r.label for r in breakdown["region"]} == {"Center", "Edge"}


def test_the_overviews_counted_pools_are_the_annotated_ones(console, running):
    running(4)
    Pool.objects.create(  # no nodes: nothing to count
        backend=console.backend,
        region=console.region,
        name="empty",
        accelerator_model=console.model,
    )
    NodeFactory(pool=console.pool)  # a node without cards

    def counts(pools):
        return [(pool.pk, pool.total, pool.allocated, pool.node_count) for pool in pools]

    counted = counts(counted_pools([console.park]))
    assert counted == counts(pools_with_allocation([console.park]))
    assert sorted(counted)[0][1:] == (16, 4, 3) and sorted(counted)[-1][1:] == (0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_the_backend_is_told_of_a_drain_with_no_row_locked(console, operator, monkeypatch):
    """Slurm's drain is a remote call: made in the transaction that locked the node, it held
    every order and probe placing on the node for as long as the call took."""
    node = console.nodes[0]
    seen = []

    def drain_remotely(driver, hostname, reason):
        seen.append((hostname, connection.in_atomic_block))

    monkeypatch.setattr(SimulatorDriver, "drain_node", drain_remotely)
    drain_node(node=node, operator=operator, reason="fan")

    assert seen == [(node.hostname, False)]
    assert Node.objects.get(pk=node.pk).is_drained


@pytest.mark.postgres
def test_a_probe_locks_its_nodes_in_id_order_whatever_order_the_backend_reports(console, operator):
    """Placement locks nodes in id order; a probe that locked them in the backend's report
    order deadlocked with an order placing on the same two nodes."""
    config = simulated(("g", "test-h1", 3))
    backend = register_backend(
        park=console.park,
        operator=operator,
        name="reversed",
        driver="simulator",
        config=config,
        region=console.region,
    )
    config["pools"][0]["nodes"].reverse()
    Backend.objects.filter(pk=backend.pk).update(config=config)

    with recording() as recorder:
        probe_backend(backend=backend)

    nodes = [lock for locks in recorder.by_transaction.values() for lock in locks]
    locked_nodes = [
        row for lock in nodes if lock.label == "orchestration.Node" for row in lock.rows
    ]
    assert len(set(locked_nodes)) == 3
    assert recorder.out_of_order == []
