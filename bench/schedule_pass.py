"""One training-queue pass: time and queries as the queue grows.

    python bench/schedule_pass.py [--tasks 1000,2000] [--nodes 211] [--organizations 20] [--json]

Builds the demo park in a throwaway SQLite database (or DATABASE_URL's, if set, which must be
an empty scratch database), grows it to `--nodes` nodes spread over the demo's pools (regions,
models, 8- and 4-card hosts), adds organizations with quotas (and a park-wide limit), then for
each queue length queues that many tasks of mixed shapes (quarter and half shares, 1 to 8 whole
cards, some pinned to a model, a region or a maximum price, some at a lower priority) and runs
one `schedule_queue_pass`, timed with its queries counted. Between lengths the park is emptied
again, so every pass starts from free nodes. Queries must not grow with the placements.
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time
import warnings
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = (  # (accelerator_milli, vcpu, ram_gb, weight)
    (250, 4, 16, 3),
    (500, 6, 32, 3),
    (1000, 12, 96, 6),
    (2000, 24, 192, 4),
    (4000, 48, 384, 2),
    (8000, 96, 768, 1),
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="1000,2000")
    parser.add_argument("--nodes", type=int, default=211)
    parser.add_argument("--organizations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="loam-bench-")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{scratch}/bench.sqlite3")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOAM_DEMO", "true")  # its park runs on the simulator
    # The placed tasks' jobs go to an in-memory broker: the pass is measured, not the backend.
    os.environ["CELERY_BROKER_URL"] = "memory://"
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    warnings.filterwarnings("ignore", "No directory at")  # WhiteNoise: no collectstatic here
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from apps.orchestration.scheduling import schedule_queue_pass

    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=StringIO())
    rng = random.Random(args.seed)
    park = _grow_park(args.nodes)
    organizations = _organizations(park, args.organizations, rng)

    results = []
    for count in (int(n) for n in args.tasks.split(",")):
        _empty(park)
        _queue(park, organizations, count, rng)
        queries = QueryCounter()
        with connection.execute_wrapper(queries):
            started, cpu_started = time.perf_counter(), time.process_time()
            passed = schedule_queue_pass(park=park)
            seconds = time.perf_counter() - started
            cpu_seconds = time.process_time() - cpu_started
        results.append(
            {
                "tasks": count,
                "nodes": args.nodes,
                "organizations": args.organizations,
                "seconds": round(seconds, 3),
                # This process only (not the database server's): steadier on a busy machine.
                "cpu_seconds": round(cpu_seconds, 3),
                "queries": queries.count,
                "placed": len(passed.placed),
                "held_back": len(passed.held_back),
                "waiting": len(passed.waiting),
            }
        )

    if args.json:
        print(json.dumps({"database": connection.vendor, "results": results}, indent=2))
        return
    print(f"database: {connection.vendor}, one pass per row")
    columns = ("tasks", "nodes", "organizations", "seconds", "cpu_seconds", "queries", "placed")
    print("".join(f"{c:>14}" for c in columns))
    for row in results:
        print("".join(f"{row[c]:>14}" for c in columns))


class QueryCounter:
    """Counts every statement sent (Django's own query log keeps only the last 9,000)."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def _grow_park(total_nodes: int):
    """The demo park with `total_nodes` nodes: more hosts in each demo pool, in turn."""
    from apps.orchestration.models import Node, Pool
    from apps.orchestration.services import register_node
    from apps.tenants.models import Park

    park = Park.objects.get(slug="demo")
    pools = list(Pool.objects.filter(backend__park=park).order_by("pk"))
    templates = {pool.pk: Node.objects.filter(pool=pool).order_by("pk").first() for pool in pools}
    existing = Node.objects.filter(pool__backend__park=park).count()
    for n in range(total_nodes - existing):
        pool = pools[n % len(pools)]
        template = templates[pool.pk]
        register_node(
            pool=pool,
            hostname=f"{pool.name}-bench-{n:04d}",
            accelerators=template.accelerators.count(),
            vcpu=template.vcpu_total,
            ram_gb=template.ram_gb_total,
        )
    return park


def _organizations(park, count: int, rng):
    """Verified organizations with limits from tight to roomy, one with a per-model limit, and a
    park-wide accelerator limit, so the pass refuses some tasks on quota."""
    from apps.catalog.models import AcceleratorModel
    from apps.quotas.models import QuotaLimit, QuotaResource
    from apps.tenants.models import Organization, VerificationState

    h200 = AcceleratorModel.objects.get(name="H200 SXM")
    organizations = []
    for n in range(count):
        organization = Organization.objects.create(
            park=park,
            name=f"Bench organization {n}",
            slug=f"bench-{n}",
            legal_name=f"Bench organization {n} Co., Ltd.",
            credit_code=f"91310115MA{n:08d}",
            verification_state=VerificationState.VERIFIED,
        )
        accelerators = rng.choice((16, 48, 96, 200))
        limits = {
            QuotaResource.ACCELERATORS: accelerators,
            QuotaResource.COMPUTE_UNITS: accelerators * 8,
            QuotaResource.VCPU: accelerators * 24,
            QuotaResource.RAM_GB: accelerators * 256,
        }
        for resource, limit in limits.items():
            QuotaLimit.objects.create(
                park=park, organization=organization, resource=resource, limit=limit
            )
        if n % 5 == 0:
            QuotaLimit.objects.create(
                park=park,
                organization=organization,
                resource=QuotaResource.MODEL_ACCELERATORS,
                accelerator_model=h200,
                limit=8,
            )
        organizations.append(organization)
    QuotaLimit.objects.create(
        park=park, organization=None, resource=QuotaResource.ACCELERATORS, limit=1500
    )
    return organizations


def _queue(park, organizations, count: int, rng) -> None:
    from apps.catalog.models import Image, Region
    from apps.orchestration.models import Task, TaskPreference
    from bench.workloads import give_workloads

    images = list(Image.objects.filter(park=park).prefetch_related("compatible_accelerators"))
    regions = list(Region.objects.filter(park=park))
    shapes = [shape for shape in SHAPES for _ in range(shape[3])]
    preferences = list(TaskPreference.values)
    tasks, pinned_regions = [], []
    for n in range(count):
        milli, vcpu, ram_gb, _weight = rng.choice(shapes)
        image = rng.choice(images)
        models = list(image.compatible_accelerators.all())
        tasks.append(
            Task(
                organization=rng.choice(organizations),
                name=f"bench-{n}",
                image=image,
                command="python train.py",
                accelerator_model=rng.choice(models) if rng.random() < 0.3 else None,
                accelerator_milli=milli,
                vcpu=vcpu,
                ram_gb=ram_gb,
                max_hourly_minor=rng.choice((None, None, None, 5000)),
                preference=rng.choice(preferences),
                priority=rng.choice((0, 0, 0, -1)),
            )
        )
        pinned_regions.append(rng.sample(regions, 2) if rng.random() < 0.2 else [])
    give_workloads(tasks, "task")
    created = Task.objects.bulk_create(tasks)
    through = Task.allowed_regions.through
    through.objects.bulk_create(
        through(task_id=task.pk, region_id=region.pk)
        for task, chosen in zip(created, pinned_regions, strict=True)
        for region in chosen
    )


def _empty(park) -> None:
    """Every node free again and no task left, for the next queue length."""
    from apps.orchestration.models import Accelerator, Allocation, Placement, Task
    from apps.workloads.models import Workload

    Accelerator.objects.filter(node__pool__backend__park=park).update(allocation=None)
    Placement.objects.filter(workload__task__organization__park=park).delete()
    Allocation.objects.filter(workload__task__organization__park=park).delete()
    Task.objects.filter(organization__park=park).delete()
    Workload.objects.filter(organization__park=park, kind="task").delete()


if __name__ == "__main__":
    main()
