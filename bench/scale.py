"""Every main page at the demo park's size and at 100 times it: median time, queries and size.

    python bench/scale.py [--scale 100] [--repeat 5] [--json]

Builds the demo park (`seed_demo`) in a throwaway SQLite database, or in DATABASE_URL's if set
(it must be an empty scratch database), adds one "copy" of activity to it (10 organizations, 160
instances in mixed states holding accelerators, two thirds of them running, their orders, meters
and daily usage records, 20 training tasks, 500 audit events, 30 days of capacity samples every 5
minutes) and renders each page through the test client as the role that sees it: a visitor (the
catalog), the demo enterprise's owner (its hosts, billing, tasks) and the park's operator (/ops/
and its pages). Then it grows the park to `--scale` copies: regions and pools ten times over,
nodes (of 16 cards), their accelerators, organizations, instances, tasks and events `--scale`
times (the default makes about 1,300 nodes, 70 pools, 1,000 organizations and 16,000 instances,
10,000 of them running), and renders every page again. Pages over 100 ms are named at the end;
on PostgreSQL, pgbench's TPC-B on the same server follows (bench/load.py's run), so that the
figures can be read against how fast the machine was.

Rows are written with bulk_create, not through the services: this builds a world to read, and
its invariants (one live allocation per instance, accelerators held only by live allocations,
allocated within total) hold by construction. A page's query count must not grow with the data.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REGION_COPIES = 10  # at full scale, each demo region and its pools exist ten times over
# Each copy after the first adds one more node than the demo's to the first two pools (the
# H200 and A100 ones): 11 nodes at 1x, about 1,300 at 100x, as issue 15 measured.
EXTRA_NODE_POOLS = 2
ORGANIZATIONS_PER_COPY = 10
# A copy's nodes have twice the demo's cards (and vCPU and RAM): 16-card servers, so that
# 100 copies hold about 10,000 running hosts, mostly of one card, on about 1,300 nodes.
CARDS_FACTOR = 2
INSTANCES_PER_COPY = 160
TENANT_INSTANCES_PER_COPY = 10  # of those, the demo enterprise's (1,000 at 100x)
TASKS_PER_COPY = 20
TENANT_TASKS_PER_COPY = 2
AUDIT_EVENTS_PER_COPY = 500
SAMPLE_EVERY = timedelta(minutes=5)  # as beat's "sample-capacity"
SAMPLED_FOR = timedelta(days=30)  # the overview's longest period
USAGE_DAYS = 30
# (state, share) of instances; those that hold resources get an allocation.
INSTANCE_STATES = [
    ("running", 67),
    ("stopped", 5),
    ("released", 20),
    ("error", 4),
    ("pending", 2),
    ("provisioning", 2),
]
FLAVOR_SIZES = [(1, 75), (2, 15), (4, 7), (8, 3)]
TASK_STATES = [("queued", 15), ("placed", 5), ("running", 20), ("succeeded", 45), ("failed", 10)]
SLOW_MS = 100  # issue 37: every console page within this at the large point
AUDIT_ACTIONS = ["instance.running", "order.created", "instance.stopped", "login", "quota.changed"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=100, help="copies of the demo's activity")
    parser.add_argument("--repeat", type=int, default=5, help="renders per page (median)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="loam-scale-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch}/scale.sqlite3")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOAM_DEMO", "true")  # its park runs on the simulator
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("CELERY_BROKER_URL", "memory://")
    warnings.filterwarnings("ignore", "No directory at")  # WhiteNoise: no collectstatic here
    import django

    from bench.metering import same_server_pgbench

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    settings.STORAGES["staticfiles"] = {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
    }
    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=StringIO())

    world = World(random.Random(42))
    results = []
    started = time.perf_counter()
    world.add_copies(range(1))
    built = [round(time.perf_counter() - started, 1)]
    results += measure(world, label="1x", repeat=args.repeat)
    if args.scale > 1:
        started = time.perf_counter()
        world.add_copies(range(1, args.scale))
        built.append(round(time.perf_counter() - started, 1))
        results += measure(world, label=f"{args.scale}x", repeat=args.repeat)

    report = {
        "database": connection.vendor,
        "pgbench_tps": same_server_pgbench() if connection.vendor == "postgresql" else None,
        "repeat": args.repeat,
        "build_seconds": built,
        "worlds": world.sizes,
        "pages": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


class World:
    """The demo park and the activity added to it, one copy at a time."""

    def __init__(self, rng):
        from django.contrib.auth.hashers import make_password
        from django.db.models import Count

        from apps.catalog.models import Flavor, Image, Price, Region
        from apps.operations import demo
        from apps.orchestration.models import Backend, Node, Pool
        from apps.tenants.models import Organization, Park

        self.rng = rng
        self.now = _now()
        self.park = Park.objects.get(slug=demo.PARK["slug"])
        self.backend = Backend.objects.get(park=self.park)
        self.tenant = Organization.objects.get(slug=demo.ENTERPRISE["slug"])
        self.password = make_password("scale-bench")  # hashed once, shared by every owner
        self.base_regions = list(Region.objects.filter(park=self.park).order_by("pk"))
        self.base_pools = list(Pool.objects.filter(backend=self.backend).order_by("pk"))
        self.base_nodes = {
            pool.pk: list(
                Node.objects.filter(pool=pool)
                .annotate(cards=Count("accelerators"))
                .order_by("hostname")
            )
            for pool in self.base_pools
        }
        self.base_prices = list(Price.objects.filter(region__park=self.park))
        self.flavors = {}  # accelerator model id -> {size: flavor}
        for flavor in Flavor.objects.select_related("family"):
            self.flavors.setdefault(flavor.family.accelerator_model_id, {})[
                flavor.accelerator_count
            ] = flavor
        self.images = {}  # accelerator model id -> a compatible image
        for image in Image.objects.filter(park=self.park).prefetch_related(
            "compatible_accelerators"
        ):
            for model in image.compatible_accelerators.all():
                self.images.setdefault(model.pk, image)
        self.pools_of_copy = {0: self.base_pools}  # region copy -> its pools
        self.nodes = []  # every node so far: the candidates of a decision
        self.sizes = []

    # --- growing ---------------------------------------------------------------------------

    def add_copies(self, copies):
        from django.db import connection, transaction

        from apps.orchestration import capacity, rooms

        with transaction.atomic(), _historic_timestamps():
            for copy in copies:
                self._add_copy(copy)
                if copy % 10 == 9:
                    print(f"built {copy + 1} copies", file=sys.stderr)
            self._sample_capacity()
        capacity.sample_capacity(now=self.now)  # a durable transaction of its own
        # The nodes' kept rooms from the rows written in bulk, as the sampler's beat keeps them.
        rooms.correct_rooms()
        if connection.vendor == "postgresql":
            # Fresh statistics, as autovacuum keeps them on a live site after bulk loads (without
            # them the planner guesses one row a table and the pages' timings measure its guess).
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        self.sizes.append(self._count())

    def _add_copy(self, copy):
        region_copy = copy % REGION_COPIES
        if region_copy not in self.pools_of_copy:
            self.pools_of_copy[region_copy] = self._copy_regions(region_copy)
        nodes = self._nodes(copy, self.pools_of_copy[region_copy])
        organizations = self._organizations(copy)
        instances = self._instances(copy, organizations, nodes)
        self.nodes += nodes
        self._orders_meters_usage(instances)
        self._placements(instances)
        self._tasks(copy, organizations)
        self._audit(copy, organizations)

    def _copy_regions(self, region_copy):
        """The demo's regions and pools again as new sites, with the demo's prices."""
        from apps.catalog.models import Price, Region
        from apps.orchestration.models import Pool

        regions = {}
        for region in self.base_regions:
            regions[region.pk] = Region.objects.create(
                park=self.park,
                code=f"{region.code}-{region_copy:02d}",
                name=f"{region.name} {region_copy:02d}",
                level=region.level,
                parent=regions.get(region.parent_id),
                latency_ms=region.latency_ms + region_copy,
            )
        Price.objects.bulk_create(
            Price(
                region=regions[price.region_id],
                kind=price.kind,
                flavor_id=price.flavor_id,
                effective_from=price.effective_from,
                amount_minor=price.amount_minor,
                currency=price.currency,
            )
            for price in self.base_prices
        )
        return Pool.objects.bulk_create(
            Pool(
                backend=self.backend,
                region=regions[pool.region_id],
                name=f"{pool.name}-{region_copy:02d}",
                accelerator_model_id=pool.accelerator_model_id,
                pue=pool.pue,
                power_price_minor_per_kwh=pool.power_price_minor_per_kwh,
                carbon_g_per_kwh=pool.carbon_g_per_kwh,
            )
            for pool in self.base_pools
        )

    def _nodes(self, copy, pools):
        """The demo's nodes again in this copy's pools (copy 0: the seeded ones), each with
        telemetry: most cards busy, a fifth of them idle for hours."""
        from apps.orchestration.models import Accelerator, Allocation, Node
        from apps.orchestration.services import keep_card_readings

        nodes = []
        for n, (base_pool, pool) in enumerate(zip(self.base_pools, pools, strict=True)):
            like = self.base_nodes[base_pool.pk]
            if copy and n < EXTRA_NODE_POOLS:
                like = [*like, like[0]]
            for extra, base in enumerate(like):
                if copy == 0:
                    node, cards = base, base.cards
                else:
                    cards = base.cards * CARDS_FACTOR
                    node = Node(
                        pool=pool,
                        hostname=f"{base.hostname}-c{copy:03d}-{extra}",
                        vcpu_total=base.vcpu_total * CARDS_FACTOR,
                        ram_gb_total=base.ram_gb_total * CARDS_FACTOR,
                    )
                node.telemetry = self._telemetry(cards)
                node.last_seen_at = self.now
                node.cards = cards
                nodes.append(node)
        held = {}  # node id -> (vCPU, RAM) its live allocations hold: the demo's own hosts
        if copy == 0:
            Node.objects.bulk_update(nodes, ["telemetry", "last_seen_at"])
            accelerators = Accelerator.objects.filter(
                node__in=nodes, allocation__isnull=True
            ).order_by("index")
            live = Allocation.objects.filter(node__in=nodes, released_at__isnull=True)
            for node_id, vcpu, ram_gb in live.values_list("node_id", "vcpu", "ram_gb"):
                before = held.get(node_id, (0, 0))
                held[node_id] = (before[0] + vcpu, before[1] + ram_gb)
        else:
            Node.objects.bulk_create(nodes)
            accelerators = Accelerator.objects.bulk_create(
                Accelerator(node=node, index=i, serial=f"{node.hostname}-{i}")
                for node in nodes
                for i in range(node.cards)
            )
        # What the idle check reads, kept beside the telemetry as probing the backend keeps it.
        keep_card_readings(nodes)
        by_node = {}
        for accelerator in accelerators:
            by_node.setdefault(accelerator.node_id, []).append(accelerator)
        for node in nodes:
            node.free = by_node.get(node.pk, [])
            vcpu, ram_gb = held.get(node.pk, (0, 0))
            node.vcpu_free, node.ram_free = node.vcpu_total - vcpu, node.ram_gb_total - ram_gb
        return nodes

    def _telemetry(self, cards):
        idle_since = (self.now - timedelta(hours=self.rng.randint(2, 12))).isoformat()
        readings = {}
        for index in range(cards):
            idle = self.rng.random() < 0.2
            readings[str(index)] = {
                "util": round(self.rng.uniform(0, 4) if idle else self.rng.uniform(40, 99), 1),
                **({"idle_since": idle_since} if idle else {}),
            }
        return {"updated_at": self.now.isoformat(), "accelerators": readings}

    def _organizations(self, copy):
        from django.contrib.auth import get_user_model

        from apps.billing.models import Wallet
        from apps.tenants.models import Membership, Organization, Role

        states = ["verified"] * 7 + ["unverified", "submitted", "rejected"]
        organizations = Organization.objects.bulk_create(
            Organization(
                park=self.park,
                slug=f"org-{copy:03d}-{n}",
                name=f"Scale Org {copy:03d}-{n}",
                legal_name=f"Scale Org {copy:03d}-{n} Co., Ltd.",
                credit_code=_credit_code(copy * ORGANIZATIONS_PER_COPY + n),
                verification_state=states[n % len(states)],
                verification_submitted_at=self.now - timedelta(days=n + 1),
                created_at=self.now - timedelta(days=self.rng.randint(30, 400)),
            )
            for n in range(ORGANIZATIONS_PER_COPY - (1 if copy == 0 else 0))
        )
        users = get_user_model().objects.bulk_create(
            get_user_model()(
                username=f"owner-{o.slug}@scale.localhost",
                email=f"owner-{o.slug}@scale.localhost",
                password=self.password,
            )
            for o in organizations
        )
        Membership.objects.bulk_create(
            Membership(organization=o, user=u, role=Role.OWNER)
            for o, u in zip(organizations, users, strict=True)
        )
        Wallet.objects.bulk_create(
            Wallet(
                organization=o,
                currency=self.park.currency,
                balance_minor=self.rng.randint(-50000, 5000000),
            )
            for o in organizations
        )
        return organizations

    def _instances(self, copy, organizations, nodes):
        """160 instances of this copy's organizations (10 of the demo enterprise), on this copy's
        nodes; those in a holding state hold an allocation and its accelerators."""
        from apps.orchestration.models import Accelerator, Allocation
        from apps.orders.models import INSTANCE_HOLDING_STATES, Instance
        from bench.workloads import give_workloads

        planned = []
        for n in range(INSTANCES_PER_COPY):
            node = self.rng.choice(nodes)
            size = _weighted(self.rng, FLAVOR_SIZES)
            flavors = self.flavors[node.pool.accelerator_model_id]
            flavor = flavors.get(size) or flavors[min(flavors)]
            state = _weighted(self.rng, INSTANCE_STATES)
            if state in INSTANCE_HOLDING_STATES:
                node = next(
                    (
                        candidate
                        for candidate in [node, *nodes]
                        if candidate.pool.accelerator_model_id == node.pool.accelerator_model_id
                        and len(candidate.free) >= flavor.accelerator_count
                        and candidate.vcpu_free >= flavor.vcpu
                        and candidate.ram_free >= flavor.ram_gb
                    ),
                    None,
                )
                if node is None:  # this copy's nodes are full: it was released long ago
                    state, node = "released", self.rng.choice(nodes)
            created = self.now - timedelta(hours=self.rng.randint(1, 24 * USAGE_DAYS))
            holding = state in INSTANCE_HOLDING_STATES
            instance = Instance(
                organization=(
                    self.tenant
                    if n < TENANT_INSTANCES_PER_COPY
                    else organizations[n % len(organizations)]
                ),
                name=f"host-{copy:03d}-{n:03d}",
                flavor=flavor,
                image=self.images[node.pool.accelerator_model_id],
                region=node.pool.region,
                pool=node.pool if holding or state == "released" else None,
                node=node if holding else None,
                state=state,
                system_disk_gb=100,
                data_disk_gb=self.rng.choice([0, 0, 500, 2000]),
                bandwidth_mbps=self.rng.choice([0, 10, 100]),
                backend_handle=f"sim-{copy}-{n}" if holding else "",
                error_message="simulated failure" if state == "error" else "",
                created_at=created,
                released_at=(
                    created + timedelta(hours=self.rng.randint(1, 48))
                    if state == "released"
                    else None
                ),
            )
            instance.held = []
            if holding:
                instance.held = node.free[: flavor.accelerator_count]
                del node.free[: flavor.accelerator_count]
                node.vcpu_free -= flavor.vcpu
                node.ram_free -= flavor.ram_gb
            planned.append(instance)
        give_workloads(planned, "host")
        instances = Instance.objects.bulk_create(planned)
        holders = [i for i in instances if i.held]
        allocations = Allocation.objects.bulk_create(
            Allocation(
                node=i.node,
                workload=i.workload,
                vcpu=i.flavor.vcpu,
                ram_gb=i.flavor.ram_gb,
                created_at=i.created_at,
            )
            for i in holders
        )
        held = []
        for instance, allocation in zip(holders, allocations, strict=True):
            for accelerator in instance.held:
                accelerator.allocation = allocation
                held.append(accelerator)
        Accelerator.objects.bulk_update(held, ["allocation"], batch_size=500)
        return instances

    def _orders_meters_usage(self, instances):
        """Each instance's create order (pending ones wait for an operator), its host meter and
        a usage record per day it ran, as metering writes them: a record a meter and day of the
        park's, from midnight to midnight."""
        from django.utils import timezone

        from apps.billing.metering import add_monthly_spend, day_start
        from apps.billing.models import Meter, MeterKind, UsageRecord
        from apps.orders.models import Order, OrderKind, OrderState

        order_state = {"pending": OrderState.AWAITING_APPROVAL, "error": OrderState.FAILED}
        Order.objects.bulk_create(
            Order(
                organization=i.organization,
                kind=OrderKind.CREATE,
                state=order_state.get(i.state, OrderState.DONE),
                instance=i,
                hourly_minor=1000 * i.flavor.accelerator_count,
                currency=self.park.currency,
                created_at=i.created_at,
                decided_at=i.created_at,
            )
            for i in instances
        )
        ran = [i for i in instances if i.state in ("running", "stopped", "released")]
        meters = []
        for i in ran:
            hourly = Decimal(1000 * i.flavor.accelerator_count)
            ended = i.released_at or (
                self.now - timedelta(hours=2) if i.state == "stopped" else None
            )
            until = ended or self.now - timedelta(minutes=1)
            meters.append(
                Meter(
                    organization=i.organization,
                    workload=i.workload,
                    kind=MeterKind.COMPUTE,
                    quantity=1,
                    hourly_minor=hourly,
                    compute_units=Decimal(i.flavor.accelerator_count),
                    currency=self.park.currency,
                    started_at=i.created_at,
                    ended_at=ended,
                    metered_until=until,
                )
            )
        meters = Meter.objects.bulk_create(meters)
        records = []
        for meter in meters:
            start = meter.started_at
            while start < meter.metered_until:
                end = min(day_start(start + timedelta(days=1)), meter.metered_until)
                seconds = int((end - start).total_seconds())
                if seconds > 0:
                    records.append(
                        UsageRecord(
                            organization=meter.organization,
                            meter=meter,
                            kind=meter.kind,
                            workload=meter.workload,
                            started_at=start,
                            ended_at=end,
                            seconds=seconds,
                            compute_unit_milliseconds=int(meter.compute_units * seconds * 1000),
                            hourly_minor=meter.hourly_minor,
                            amount_minor=int(meter.hourly_minor * seconds / 3600),
                            currency=meter.currency,
                            day=timezone.localtime(start).date(),
                        )
                    )
                start = end
        UsageRecord.objects.bulk_create(records, batch_size=2000)
        spent = Counter()  # added up as metering adds its records up
        for record in records:
            month = timezone.localtime(record.started_at).date().replace(day=1)
            spent[record.organization_id, month] += record.amount_minor
        add_monthly_spend(spent)

    def _placements(self, instances):
        """The decisions that placed the demo enterprise's hosts, each with every node of the
        model as a candidate (feasible ones scored, the others rejected) as the scheduler keeps
        them."""
        from apps.orchestration.models import Placement

        weights = {part: 0.2 for part in ("region", "performance", "energy", "price")}
        weights["fragmentation"] = 0.2
        placements = []
        for instance in instances:
            if instance.organization_id != self.tenant.pk or instance.node_id is None:
                continue
            model = instance.flavor.family.accelerator_model_id
            candidates = []
            for node in self.nodes:
                if node.pool.accelerator_model_id != model:
                    continue
                fits = len(node.free) >= instance.flavor.accelerator_count or node is instance.node
                parts = {part: round(self.rng.random(), 3) for part in weights}
                candidates.append(
                    {
                        "node": node.hostname,
                        "node_id": node.pk,
                        "pool": node.pool.name,
                        "pool_id": node.pool_id,
                        "region": node.pool.region.code,
                        "region_name": node.pool.region.name,
                        "free_accelerators": len(node.free),
                        "free_vcpu": node.vcpu_free,
                        "free_ram_gb": node.ram_free,
                        "fits": fits,
                        "total": round(sum(parts.values()) / 5, 4) if fits else None,
                        "parts": parts if fits else {},
                        "raw": {"latency_ms": node.pool.region.latency_ms, "left_free": 0},
                        "rejected": None if fits else "gpu_count",
                    }
                )
            placements.append(
                Placement(
                    workload=instance.workload,
                    chosen_pool_id=instance.pool_id,
                    chosen_node_id=instance.node_id,
                    weights={
                        "policy": "best-fit",
                        "weights": weights,
                        "operator": weights,
                        "operator_share": 0.5,
                        "park_policy": "default",
                        "preference": "balanced",
                        "currency": self.park.currency,
                        "left_free": 0,
                    },
                    candidates=candidates,
                )
            )
        Placement.objects.bulk_create(placements)

    def _tasks(self, copy, organizations):
        from apps.orchestration.models import Task
        from bench.workloads import give_workloads

        owners = [self.tenant] * TENANT_TASKS_PER_COPY + organizations
        pools = self.pools_of_copy[copy % REGION_COPIES]
        tasks = []
        for n in range(TASKS_PER_COPY):
            pool = self.rng.choice(pools)
            state = _weighted(self.rng, TASK_STATES)
            submitted = self.now - timedelta(hours=self.rng.randint(1, 24 * 14))
            started = submitted + timedelta(minutes=5) if state not in ("queued",) else None
            tasks.append(
                Task(
                    organization=owners[n % len(owners)],
                    name=f"train-{copy:03d}-{n:02d}",
                    image=self.images[pool.accelerator_model_id],
                    command="python train.py",
                    accelerator_model_id=pool.accelerator_model_id,
                    accelerator_milli=1000 * self.rng.choice([1, 2, 4]),
                    state=state,
                    pool=pool if started else None,
                    priority=self.rng.choice([0, 0, 0, 5]),
                    submitted_at=submitted,
                    started_at=started,
                    finished_at=(
                        started + timedelta(hours=2) if state in ("succeeded", "failed") else None
                    ),
                )
            )
        give_workloads(tasks, "task")
        Task.objects.bulk_create(tasks)

    def _audit(self, copy, organizations):
        from apps.core.models import AuditEvent

        owners = [self.tenant, *organizations]
        AuditEvent.objects.bulk_create(
            (
                AuditEvent(
                    park_id=self.park.pk,
                    organization_id=owners[n % len(owners)].pk,
                    actor_label=f"owner-{copy:03d}@scale.localhost",
                    action=AUDIT_ACTIONS[n % len(AUDIT_ACTIONS)],
                    object_type="instance",
                    object_id=str(n),
                    object_repr=f"host-{copy:03d}-{n % INSTANCES_PER_COPY:03d}",
                    data={"from": "pending", "to": "running"},
                    created_at=self.now - timedelta(minutes=self.rng.randint(1, 60 * 24 * 60)),
                )
                for n in range(AUDIT_EVENTS_PER_COPY)
            ),
            batch_size=2000,
        )

    def _sample_capacity(self):
        """Every pool's samples every 5 minutes over the last 30 days, as beat would have written
        them (a steady allocation with a daily swing); the sampling job then keeps what it keeps of
        them (`add_copies`)."""
        from apps.orchestration.models import CapacitySample, Pool

        pools = Pool.objects.filter(backend=self.backend).exclude(capacity_samples__isnull=False)
        pools = pools.select_related("accelerator_model").prefetch_related("nodes__accelerators")
        first = self.now - SAMPLED_FOR
        for pool in pools:
            total = sum(len(node.accelerators.all()) for node in pool.nodes.all())
            samples = []
            at = first
            step = 0
            while at <= self.now:
                swing = 0.6 + 0.3 * ((step % 288) / 288)
                allocated = min(total, int(total * swing))
                samples.append(
                    CapacitySample(
                        park=self.park,
                        pool=pool,
                        taken_at=at,
                        accelerators_total=total,
                        accelerators_allocated=allocated,
                        accelerators_idle=allocated // 5,
                        utilization_pct=Decimal("61.5"),
                        watts=int(allocated * pool.accelerator_model.tdp_w * pool.pue),
                    )
                )
                at += SAMPLE_EVERY
                step += 1
            CapacitySample.objects.bulk_create(samples, batch_size=5000)

    def _count(self):
        from apps.billing.models import UsageRecord
        from apps.core.models import AuditEvent
        from apps.orchestration.models import Accelerator, CapacitySample, Node, Pool, Task
        from apps.orders.models import Instance
        from apps.tenants.models import Organization

        counted = {
            "pools": Pool.objects.all(),
            "nodes": Node.objects.all(),
            "accelerators": Accelerator.objects.all(),
            "organizations": Organization.objects.all(),
            "instances": Instance.objects.all(),
            "running_instances": Instance.objects.filter(state="running"),
            "tasks": Task.objects.all(),
            "usage_records": UsageRecord.objects.all(),
            "audit_events": AuditEvent.objects.all(),
            "capacity_samples": CapacitySample.objects.all(),
        }
        return {name: rows.count() for name, rows in counted.items()}


@contextmanager
def _historic_timestamps():
    """Let bulk_create keep the past creation times it is given (auto_now_add would stamp every
    row with now, and pages sort and filter by these)."""
    from apps.core.models import AuditEvent
    from apps.orchestration.models import Allocation, Task
    from apps.orders.models import Instance, Order
    from apps.tenants.models import Organization

    fields = [
        model._meta.get_field(name)
        for model, name in (
            (AuditEvent, "created_at"),
            (Allocation, "created_at"),
            (Instance, "created_at"),
            (Order, "created_at"),
            (Organization, "created_at"),
            (Task, "submitted_at"),
        )
    ]
    for field in fields:
        field.auto_now_add = False
    try:
        yield
    finally:
        for field in fields:
            field.auto_now_add = True


def _credit_code(n):
    from apps.tenants.credit_code import check_character

    base = f"91310115MB{n:07d}"  # MB: apart from the factories' MA codes
    return base + check_character(base)


def _weighted(rng, choices):
    values, weights = zip(*choices, strict=True)
    return rng.choices(values, weights=weights)[0]


def _now():
    from django.utils import timezone

    return timezone.now().replace(second=0, microsecond=0)


# --- measuring -------------------------------------------------------------------------------


def pages(world):
    """(who, path) for every main page, with real objects of the world in their paths."""
    from apps.catalog.models import Flavor
    from apps.orchestration.models import Placement, Task
    from apps.orders.models import Instance

    park = world.park.pk
    tenant_instance = (
        Instance.objects.filter(organization=world.tenant, state="running").order_by("pk").first()
    )
    tenant_task = Task.objects.filter(organization=world.tenant).order_by("pk").first()
    organization = world.tenant.pk
    flavor = Flavor.objects.order_by("pk").first()
    placement = Placement.objects.order_by("-pk").first()
    listed = [
        ("visitor", "/catalog/"),
        ("visitor", "/catalog/?available_only=on&sort=price"),
        ("visitor", f"/catalog/flavors/{flavor.code}/"),
        ("owner", "/catalog/"),
        ("owner", "/instances/"),
        ("owner", f"/instances/{tenant_instance.pk}/"),
        ("owner", "/orders/"),
        ("owner", "/billing/"),
        ("owner", "/tasks/"),
        ("owner", f"/tasks/{tenant_task.pk}/"),
        ("operator", "/ops/"),
        ("operator", "/ops/?period=7d"),
        ("operator", "/ops/?period=30d"),
        ("operator", "/ops/verifications/"),
        ("operator", "/ops/organizations/"),
        ("operator", f"/ops/organizations/{organization}/"),
        ("operator", f"/ops/organizations/{organization}/quotas/"),
        ("operator", "/ops/audit/"),
        ("operator", "/ops/orders/"),
        ("operator", "/ops/orders/?state="),
        ("operator", "/ops/instances/"),
        ("operator", f"/ops/parks/{park}/idle/"),
        ("operator", f"/ops/parks/{park}/catalog/"),
        ("operator", f"/ops/parks/{park}/catalog/images/"),
        ("operator", f"/ops/parks/{park}/catalog/prices/"),
        ("operator", f"/ops/parks/{park}/backends/"),
        ("operator", f"/ops/parks/{park}/pools/"),
        ("operator", f"/ops/parks/{park}/nodes/"),
        ("operator", f"/ops/parks/{park}/security/"),
        ("operator", f"/ops/parks/{park}/approval-policy/"),
        ("operator", "/ops/billing/"),
        ("operator", f"/ops/billing/organizations/{organization}/"),
        ("operator", f"/ops/tasks/policy/{park}/"),
    ]
    if placement is not None:
        listed.append(("operator", f"/ops/tasks/decisions/{placement.pk}/"))
    return listed


def page_name(path):
    """The path with its ids as <id>, so one page's rows line up across worlds."""
    return "/".join("<id>" if part.isdigit() else part for part in path.split("/"))


def clients():
    from django.test import Client

    from apps.operations import demo

    visitor, owner, operator = Client(), Client(), Client()
    assert owner.login(username=demo.OWNER["email"], password=demo.OWNER["password"])
    assert operator.login(username=demo.OPERATOR["email"], password=demo.OPERATOR["password"])
    return {"visitor": visitor, "owner": owner, "operator": operator}


def measure(world, *, label, repeat):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    by_role = clients()
    rows = []
    for who, path in pages(world):
        client = by_role[who]
        response = client.get(path)  # warm: sessions, translations, template loading
        assert response.status_code == 200, (path, response.status_code)
        timings = []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(path)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        rows.append(
            {
                "world": label,
                "who": who,
                "path": page_name(path),
                "median_ms": round(statistics.median(timings), 1),
                "queries": len(queries),
                "kb": round(len(response.content) / 1024, 1),
            }
        )
    return rows


def print_table(report):
    print(
        f"database: {report['database']}, median of {report['repeat']} renders per page, "
        f"built in {' + '.join(str(s) for s in report['build_seconds'])} s"
    )
    for label, sizes in zip(("1x", "scaled"), report["worlds"], strict=False):
        print(f"  {label}: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sizes.items()))
    worlds = sorted({row["world"] for row in report["pages"]}, key=lambda w: int(w[:-1]))
    by_page = {}
    for row in report["pages"]:
        by_page.setdefault((row["who"], row["path"]), {})[row["world"]] = row
    header = f"{'who':<9}{'path':<44}"
    for world in worlds:
        header += f"{world + ' ms':>11}{'queries':>9}{'KB':>8}"
    print(header)
    for (who, path), figures in by_page.items():
        line = f"{who:<9}{path[:43]:<44}"
        for world in worlds:
            row = figures.get(world)
            line += f"{row['median_ms']:>11}{row['queries']:>9}{row['kb']:>8}" if row else ""
        print(line)
    slow = [row for row in report["pages"] if row["median_ms"] > SLOW_MS]
    for world in worlds:
        over = [f"{row['path']} ({row['median_ms']})" for row in slow if row["world"] == world]
        print(f"over {SLOW_MS} ms at {world}: {', '.join(over) or 'none'}")
    if report["pgbench_tps"] is not None:
        print(f"pgbench TPC-B, -T 10 -c 8 -j 2, same server: {report['pgbench_tps']} TPS")


if __name__ == "__main__":
    main()
